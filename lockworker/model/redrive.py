"""What a reset needs to run a stream's job again, and what it did. Pure: no Redis.

A reset makes a job pending again, but a job that was resolved (DONE, GAVE_UP) is in no
reader's hands any more: a fan-out reader's position is past its entry, a group
acknowledged it, and the entry is trimmed once every reader passed it. To re-drive it,
the reset adds the job to its stream again, as a new entry with the same job id and
payload, which every reader of the stream (or one member of a group) then sees.

So that the payload outlives the entry, a serving worker keeps, for a stream's job that
ended GAVE_UP in its hands, where it came from: the job's *origin* record (one key in
the job's slot, ``lw:job:<namespace>:{<job id>}:origin``, JSON ``{"v": 1, "stream":
..., "payload": ...}``, kept as long as the job's state). Only a given-up job's is
kept (one SET per dead job; a DONE job costs nothing more), so a reset of a DONE job,
or of one run by ``Worker.process`` directly, finds none: nothing is re-added, and the
reset says how to submit the job again (:func:`resubmit_command`).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

from lockworker.model.keys import JobKeys
from lockworker.model.state import Reset

ORIGIN = "origin"
"""The suffix of a job's origin key (:func:`origin_key`)."""
RESOLVED_STATES = ("done", "gave_up")
"""States of a job that no process has in hand: a reset of one needs a re-drive."""


def origin_key(keys: JobKeys) -> str:
    """The job's origin key, in the job's slot."""
    return keys.extra(ORIGIN)


@dataclass(frozen=True)
class Origin:
    """Where a job came from: its stream, and its payload's JSON text."""

    stream: str
    payload: str

    def encode(self) -> str:
        return json.dumps(
            {"v": 1, "stream": self.stream, "payload": self.payload},
            sort_keys=True, separators=(",", ":"),
        )


def decode_origin(raw: Any) -> Origin | None:
    """The :class:`Origin` ``raw`` encodes, or None (absent, or not lockworker's)."""
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        stream, payload = data["stream"], data["payload"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(stream, str) or not isinstance(payload, str) or not stream:
        return None
    return Origin(stream, payload)


def resubmit_command(job_id: str, stream: str | None = None, payload: str | None = None) -> str:
    """The shell command that submits the job again (placeholders for what is unknown)."""
    return "lockworker submit {} {} {}".format(
        shlex.quote(stream) if stream else "STREAM", shlex.quote(job_id),
        shlex.quote(payload) if payload is not None else "'PAYLOAD_JSON'",
    )


@dataclass(frozen=True)
class Redrive:
    """What one reset did: the reset step's result, and whether the job was re-driven."""

    job_id: str
    result: Reset
    resolved: bool
    """The job was DONE or GAVE_UP before the reset (or foreign, replaced by force): no
    process had it in hand, so only a re-drive runs it again. A pending or held job is
    still in the hands of the process serving it (its entry is not resolved)."""
    stream: str | None = None
    """The stream the job was added to again (None: not re-added)."""
    entry: str | None = None
    """The new entry's id."""

    @property
    def reset(self) -> bool:
        return self.result is Reset.RESET

    @property
    def redriven(self) -> bool:
        return self.stream is not None

    @property
    def stranded(self) -> bool:
        """Pending again, but nothing will run it: no origin was kept to re-add it."""
        return self.reset and self.resolved and self.stream is None

    def resubmit(self) -> str:
        """The command that submits the job again by hand (see :func:`resubmit_command`)."""
        return resubmit_command(self.job_id)

    def describe(self, namespace: str) -> str:
        """One line about what happened, for a person (a reset that did not happen
        says nothing here: its caller says why)."""
        where = f"job {self.job_id!r} in namespace {namespace!r}"
        if self.redriven:
            return f"{where} is pending again, and was added to stream {self.stream!r} again"
        if self.stranded:
            return (
                f"{where} is pending again, but nothing will run it: its payload was not "
                "kept (only a stream job that gave up keeps it); submit it again: "
                + self.resubmit()
            )
        return f"{where} is pending again"
