"""The nightly report, run once a night by whichever of two hosts is up.

``lockworker run reports:NightlyReport --cron 'nightly=30 2 * * *' --tz Europe/Berlin``
on a primary host and the same with ``--role backup`` on another
(``supervisord.conf`` here): every night at 02:30 Berlin time one of them runs
:meth:`NightlyReport.on_acquired` for that night's tick. The primary runs it while it
is up; if it dies mid-report, the backup takes the tick over when the lease runs out,
with a larger fencing token, and finishes it; a finished night never runs again.

The report is stored through a fence: the store keeps the token of the run that wrote
it and refuses a smaller one, so a run that lost its lease (a host paused past it)
cannot overwrite the report of the run that took over.
"""

from __future__ import annotations

import json

import lockworker

FENCED_WRITE = """
local kept = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
if tonumber(ARGV[1]) < kept then return 0 end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'report', ARGV[2])
return 1
"""
"""Store report ARGV[2] written under token ARGV[1] unless a larger token wrote it."""


def report_key(namespace: str, tick_id: str) -> str:
    """Where the report of one night (one tick: ``nightly@2026-11-30T01:30:00Z``) is."""
    return f"report:{namespace}:{tick_id}"


class NightlyReport(lockworker.Worker):
    """Builds one night's report and stores it through the fence."""

    def on_acquired(self, job: lockworker.Job) -> None:
        night = job.scheduled_for  # the tick's nominal time, aware UTC
        assert night is not None, "served by --cron/--every: every job is a tick"
        report = {"night": night.isoformat(), "by": self.owner, "attempt": job.attempt}
        # ... gather the day's figures here; call job.check() between long steps ...
        # Refused (0) only if a run with a larger token took the night over: this run's
        # lease is lost, and the worker's own completion is refused as well.
        self.client.eval(
            FENCED_WRITE, 1, report_key(self.namespace, job.id), job.token, json.dumps(report)
        )
