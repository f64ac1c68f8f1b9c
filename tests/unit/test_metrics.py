"""lockworker.metrics: events to Prometheus metrics, on a fresh registry, with synthetic events.

The events come through the real loggers (``events.logger``), bound as the worker and
the leader bind them, so these tests also hold the observer path end to end.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

import lockworker
from lockworker import metrics
from lockworker.errors import ExtraNotInstalled
from lockworker.runtime import events
from lockworker.testing import FakeClock

NS = "billing"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def installed(registry: CollectorRegistry, clock: FakeClock) -> Iterator[metrics.Metrics]:
    m = metrics.install(registry, clock=clock)
    yield m
    m.uninstall()


def value(registry: CollectorRegistry, metric: str, /, **labels: str) -> float | None:
    return registry.get_sample_value(metric, labels)


def job_log(job_id: str, namespace: str = NS) -> events.EventLog:
    """A job run's logger, bound as the worker binds it."""
    return events.logger(events.WORKER, None, namespace=namespace, owner="a", run="r").bind(
        job_id=job_id
    )


def outcome(registry: CollectorRegistry, name: str, namespace: str = NS) -> float | None:
    return value(registry, "lockworker_job_outcomes_total", namespace=namespace, outcome=name)


@pytest.mark.usefixtures("installed")
def test_each_worker_event_counts_as_its_outcome(registry: CollectorRegistry) -> None:
    log = job_log("j")
    for event in (events.DONE, events.DONE_ELSEWHERE, events.FAILED, events.FAILED,
                  events.GAVE_UP, events.LOST, events.STOPPED, events.LOCKED, events.RENEWED):
        log.info(event)
    assert {name: outcome(registry, name) for name in metrics.OUTCOMES.values()} == {
        "done": 1, "done_elsewhere": 1, "failed": 2, "gave_up": 1, "lost": 1, "stopped": 1,
    }


@pytest.mark.usefixtures("installed")
def test_a_namespace_has_every_outcome_at_zero_from_its_first_event(
    registry: CollectorRegistry,
) -> None:
    job_log("j", "fresh").debug(events.LOCKED)
    assert [outcome(registry, o, "fresh") for o in metrics.OUTCOMES.values()] == [0.0] * 6
    assert value(registry, "lockworker_leases_held", namespace="fresh") == 0


@pytest.mark.usefixtures("installed")
def test_events_of_other_loggers_are_not_job_outcomes(registry: CollectorRegistry) -> None:
    events.logger(events.LOCK, None, lock="res", namespace=NS).warning(events.LOST)
    events.logger(events.SERVE, None, namespace=NS).info(events.DONE)
    assert outcome(registry, "lost") is None and outcome(registry, "done") is None


@pytest.mark.usefixtures("installed")
def test_an_attempt_lasts_from_acquired_to_its_first_end_on_the_monotonic_clock(
    registry: CollectorRegistry, clock: FakeClock
) -> None:
    held = job_log("j").bind(attempt=1, token=41)
    held.info(events.ACQUIRED, reentered=False)
    assert value(registry, "lockworker_leases_held", namespace=NS) == 1
    clock.advance(2.5)
    held.info(events.RELEASED, reason="stopping")
    held.info(events.STOPPED)  # the same attempt's second end: not a second attempt
    assert value(registry, "lockworker_attempt_duration_seconds_count", namespace=NS) == 1
    assert value(registry, "lockworker_attempt_duration_seconds_sum", namespace=NS) == 2.5
    assert value(registry, "lockworker_leases_held", namespace=NS) == 0
    assert outcome(registry, "stopped") == 1


@pytest.mark.usefixtures("installed")
@pytest.mark.parametrize("end", [events.DONE, events.FAILED, events.LOST, events.RELEASED])
def test_every_end_of_an_attempt_ends_its_pair(
    registry: CollectorRegistry, clock: FakeClock, end: str
) -> None:
    held = job_log("j").bind(attempt=1, token=7)
    held.info(events.ACQUIRED)
    clock.advance(0.25)
    held.info(end)
    assert value(registry, "lockworker_attempt_duration_seconds_sum", namespace=NS) == 0.25
    assert value(registry, "lockworker_leases_held", namespace=NS) == 0


@pytest.mark.usefixtures("installed")
def test_an_end_with_another_token_or_job_ends_nothing(registry: CollectorRegistry) -> None:
    job_log("j").bind(token=7).info(events.ACQUIRED)
    job_log("j").bind(token=6).warning(events.LOST)  # an older attempt's news
    job_log("other").bind(token=7).info(events.DONE)
    assert value(registry, "lockworker_leases_held", namespace=NS) == 1
    assert value(registry, "lockworker_attempt_duration_seconds_count", namespace=NS) == 0


@pytest.mark.usefixtures("installed")
def test_an_attempt_whose_end_was_never_seen_ends_at_the_next_acquisition(
    registry: CollectorRegistry,
) -> None:
    job_log("j").bind(token=1).info(events.ACQUIRED)  # then Redis went away: no end event
    job_log("j").bind(token=1).info(events.ACQUIRED, reentered=True)
    job_log("j").bind(token=2).info(events.ACQUIRED)
    assert value(registry, "lockworker_leases_held", namespace=NS) == 1
    assert value(registry, "lockworker_attempt_duration_seconds_count", namespace=NS) == 0


@pytest.mark.usefixtures("installed")
def test_the_pairing_table_is_bounded_and_the_gauge_follows_it(
    registry: CollectorRegistry, installed: metrics.Metrics, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics, "MAX_PAIRS", 3)
    job_log("old", "other").bind(token=1).info(events.ACQUIRED)
    for i in range(5):
        job_log(f"j{i}").bind(token=1).info(events.ACQUIRED)
    assert len(installed._held) == 3
    assert value(registry, "lockworker_leases_held", namespace=NS) == 3
    assert value(registry, "lockworker_leases_held", namespace="other") == 0
    job_log("j0").bind(token=1).info(events.DONE)  # forgotten: its end changes nothing
    assert value(registry, "lockworker_leases_held", namespace=NS) == 3


@pytest.mark.usefixtures("installed")
def test_handover_wait_and_takeover_latency_come_from_the_acquisition_fields(
    registry: CollectorRegistry,
) -> None:
    job_log("a").bind(token=1).info(events.ACQUIRED, waited_ms=1500.0, past_lease_ms=12.5)
    job_log("b").bind(token=1).info(events.ACQUIRED, waited_ms=3.0)
    job_log("c").bind(token=1).info(events.ACQUIRED)  # nobody held it before: neither
    wait = "lockworker_handover_wait_seconds"
    late = "lockworker_takeover_latency_seconds"
    assert value(registry, f"{wait}_count", namespace=NS) == 2
    assert value(registry, f"{wait}_sum", namespace=NS) == pytest.approx(1.503)
    assert value(registry, f"{late}_count", namespace=NS) == 1
    assert value(registry, f"{late}_sum", namespace=NS) == pytest.approx(0.0125)
    assert value(registry, f"{late}_bucket", namespace=NS, le="0.025") == 1


@pytest.mark.usefixtures("installed")
def test_the_leader_gauge_is_1_from_election_to_resignation_or_loss(
    registry: CollectorRegistry,
) -> None:
    log = events.logger(events.LEADER, None, leader="scheduler", owner="a", run="r")
    for event, expected in (("leader.elected", 1), ("leader.resigned", 0),
                            ("leader.elected", 1), ("leader.lost", 0)):
        log.bind(token=3).info(event)
        assert value(registry, "lockworker_leader", name="scheduler") == expected


@pytest.mark.usefixtures("installed")
def test_a_follower_shows_the_name_at_0_so_a_missing_leader_can_be_seen(
    registry: CollectorRegistry,
) -> None:
    log = events.logger(events.LEADER, None, leader="scheduler", owner="b", run="r")
    assert value(registry, "lockworker_leader", name="scheduler") is None
    log.info("leader.following", holder="a", token=3)
    assert value(registry, "lockworker_leader", name="scheduler") == 0


@pytest.mark.usefixtures("installed")
def test_redis_retries_count_by_step_without_the_names(registry: CollectorRegistry) -> None:
    job_log("nightly-7").warning(events.REDIS_RETRY, step="acquire job (job 'nightly-7')")
    job_log("nightly-8").warning(events.REDIS_RETRY, step="acquire job (job 'nightly-8')")
    events.logger(events.LOCK, None, lock="r").warning(
        events.REDIS_RETRY, step="read the lock 'report'"
    )
    events.logger(events.LEADER, None, leader="s").warning(events.REDIS_RETRY, step="renew")
    retries = "lockworker_redis_retries_total"
    assert value(registry, retries, step="acquire job") == 2
    assert value(registry, retries, step="read the lock") == 1
    assert value(registry, retries, step="renew") == 1


def test_step_labels() -> None:
    assert metrics.step_label("mark job done (job 'a (b)')") == "mark job done"
    assert metrics.step_label('read stream "it\'s"') == "read stream"
    assert metrics.step_label(None) == metrics.step_label("") == "unknown"


def test_installing_twice_returns_the_same_metrics_and_uninstall_unregisters(
    registry: CollectorRegistry, clock: FakeClock
) -> None:
    first = metrics.install(registry, clock=clock)
    assert metrics.install(registry) is first
    assert events._observers.count(first.observe) == 1
    job_log("j").info(events.DONE)
    assert outcome(registry, "done") == 1
    first.uninstall()
    first.uninstall()
    assert first.observe not in events._observers
    assert outcome(registry, "done") is None  # unregistered
    again = metrics.install(registry, clock=clock)
    try:
        assert again is not first
        job_log("j").info(events.DONE)
        assert outcome(registry, "done") == 1
    finally:
        again.uninstall()


def test_separate_registries_count_separately(clock: FakeClock) -> None:
    one, two = CollectorRegistry(), CollectorRegistry()
    installed = [metrics.install(one, clock=clock), metrics.install(two, clock=clock)]
    try:
        job_log("j").info(events.DONE)
        assert outcome(one, "done") == outcome(two, "done") == 1
    finally:
        for m in installed:
            m.uninstall()


def test_without_prometheus_client_the_module_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # what an absent one does
    monkeypatch.delitem(sys.modules, "lockworker.metrics")
    monkeypatch.delattr(lockworker, "metrics")
    with pytest.raises(ExtraNotInstalled, match=r"pip install 'lockworker\[metrics\]'") as exc:
        importlib.import_module("lockworker.metrics")
    assert isinstance(exc.value, ImportError)


def test_the_library_and_the_cli_never_import_prometheus_client() -> None:
    code = (
        "import sys, lockworker, lockworker.cli.main, lockworker.cli.run, lockworker.testing\n"
        "assert 'prometheus_client' not in sys.modules, 'imported'\n"
        "assert 'lockworker.metrics' not in sys.modules, 'imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr


@pytest.mark.usefixtures("installed")
def test_leader_elections_and_losses_count_by_name_from_the_first_event(
    registry: CollectorRegistry,
) -> None:
    """What an alert on handover storms and on failing renewals reads: every term won
    and every term lost, at 0 from the name's first event (a follower's too)."""
    log = events.logger(events.LEADER, None, leader="scheduler", owner="a", run="r")
    log.info("leader.following", holder="b", token=2)
    assert value(registry, "lockworker_leader_elections_total", name="scheduler") == 0
    assert value(registry, "lockworker_leader_lost_total", name="scheduler") == 0
    for event in ("leader.elected", "leader.lost", "leader.elected", "leader.resigned",
                  "leader.elected"):
        log.bind(token=3).info(event)
    assert value(registry, "lockworker_leader_elections_total", name="scheduler") == 3
    assert value(registry, "lockworker_leader_lost_total", name="scheduler") == 1


@pytest.mark.usefixtures("installed")
def test_redis_steps_given_up_count_by_step_at_zero_from_the_first_retry(
    registry: CollectorRegistry,
) -> None:
    unavailable = "lockworker_redis_unavailable_total"
    job_log("n-1").warning(events.REDIS_RETRY, step="renew lease (job 'n-1')")
    assert value(registry, unavailable, step="renew lease") == 0
    job_log("n-1").error(events.REDIS_UNAVAILABLE, step="renew lease (job 'n-1')", tries=9)
    job_log("n-2").error(events.REDIS_UNAVAILABLE, step="acquire job (job 'n-2')", tries=4)
    assert value(registry, unavailable, step="renew lease") == 1
    assert value(registry, unavailable, step="acquire job") == 1


@pytest.mark.usefixtures("installed")
def test_the_memory_check_sets_the_used_ratio(registry: CollectorRegistry) -> None:
    from lockworker.model import servercheck as verdicts
    from lockworker.runtime.servercheck import log_findings

    where = {"server": "10.0.0.5:6379"}
    log = events.logger(events.WORKER)
    log_findings(log, [verdicts.memory_use(85, 100, None).on(where["server"])])
    assert value(registry, "lockworker_server_memory_used_ratio", **where) == 0.85
    assert value(registry, "lockworker_server_check", check="memory", **where) == 1
    log_findings(log, [verdicts.memory_use(None, 100, None).on(where["server"])])
    assert value(registry, "lockworker_server_memory_used_ratio", **where) == 0.85  # kept
    assert value(registry, "lockworker_server_check", check="memory", **where) == 2


@pytest.mark.usefixtures("installed")
def test_schedule_events_count_each_decision_once_and_set_the_alert_gauges(
    registry: CollectorRegistry,
) -> None:
    log = events.logger(events.SOURCES, None, namespace=NS)
    labels = {"namespace": NS, "schedule": "nightly"}

    def ticks(kind: str) -> float | None:
        return value(registry, "lockworker_schedule_ticks_total", **labels, outcome=kind)

    log.debug("schedule.progress", schedule="nightly", last_ran=None, since=1000.5,
              period_s=86400)
    assert (ticks("ran"), ticks("skipped")) == (0, 0)  # at 0 from the first look
    assert value(registry, "lockworker_schedule_last_completed_seconds", **labels) == 1000.5
    assert value(registry, "lockworker_schedule_period_seconds", **labels) == 86400
    log.info("schedule.admitted", schedule="nightly", tick="t1", late_ms=1500, decided=True)
    log.info("schedule.admitted", schedule="nightly", tick="t1", late_ms=1700, decided=False)
    log.info("schedule.skipped", schedule="nightly", tick="t2", decided=True)
    log.info("schedule.skipped", schedule="nightly", tick="t2", decided=False)
    log.info("schedule.ran", schedule="nightly", tick="t1", tick_at=86400)
    assert (ticks("ran"), ticks("skipped")) == (1, 1)
    lateness = "lockworker_schedule_lateness_seconds"
    assert value(registry, f"{lateness}_count", **labels) == 1
    assert value(registry, f"{lateness}_sum", **labels) == 1.5
    completed = "lockworker_schedule_last_completed_seconds"
    assert value(registry, completed, **labels) == 86400
    log.info("schedule.ran", schedule="nightly", tick="t0", tick_at=0)  # an older one
    assert value(registry, completed, **labels) == 86400
    log.debug("schedule.progress", schedule="nightly", last_ran=172800, since=1000.5,
              period_s=86400)
    assert value(registry, completed, **labels) == 172800
