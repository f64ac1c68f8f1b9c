"""Histories of critical sections, written by every fault-test process, and their checker.

Each child process appends JSON lines to a file of its own through a :class:`Recorder`,
one ``os.write`` per line on an ``O_APPEND`` descriptor, so a SIGKILL loses at most the
line being written (the loader skips a torn last line). Times are ``time.monotonic()``:
CLOCK_MONOTONIC is system-wide on Linux, so times from different processes compare.

Events of one critical section (a worker attempt, a lock hold, a leader term):

- ``start``: written first thing, with kind, key, owner, run, token and whether the
  process believed it held the section at that moment;
- ``believe``: a time at which the process still believed it held it, taken *before*
  the check (``job.lost``, ``lock.lost``, ``term.lost``) that said so, and written before
  each write to the fenced store;
- ``end``: how the section ended (missing if the process was killed first).

:func:`load` folds them into one :class:`Section` each, and :func:`check` verifies the
whole history: exclusion per key, fencing tokens, DONE at most once, nothing lost.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

VIOLATION_KINDS = (
    "overlap",
    "token_reuse",
    "token_backwards",
    "double_done",
    "lost",
    "too_many_attempts",
    "fence",
    "index_disagrees",
)

JOB = "job"
"""Kind of a worker attempt; lock holds, leader terms and redlock holds are the others."""


class Recorder:
    """Appends one process's events to its own history file."""

    def __init__(self, path: str | Path, *, owner: str = "") -> None:
        self.owner = owner
        self.pid = os.getpid()
        self.run = f"{self.pid}-{uuid.uuid4().hex[:12]}"
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._mutex = threading.Lock()
        self._sids = itertools.count(1)

    def emit(self, ev: str, **fields: Any) -> None:
        line = json.dumps({"ev": ev, "run": self.run, **fields}, separators=(",", ":"))
        data = (line + "\n").encode()
        with self._mutex:
            while data:
                written = os.write(self._fd, data)
                data = data[written:]

    def begin(
        self, kind: str, key: str, token: int, lost: Callable[[], bool], *,
        attempt: int | None = None,
    ) -> int:
        """Record the start of a section; ``lost`` says whether it is already lost."""
        t = time.monotonic()
        believed = not lost()
        sid = next(self._sids)
        self.emit(
            "start", sid=sid, kind=kind, key=key, token=token, attempt=attempt,
            owner=self.owner, pid=self.pid, t=t, believed=believed,
        )
        return sid

    def holding(self, sid: int, lost: Callable[[], bool]) -> float | None:
        """If the section is still believed held, record and return the time of belief.

        The time is taken before ``lost()`` is asked, so the process certainly believed
        it held the section then; None if ``lost()`` says it does not."""
        t = time.monotonic()
        if lost():
            return None
        self.emit("believe", sid=sid, t=t)
        return t

    def end(self, sid: int, result: str) -> None:
        self.emit("end", sid=sid, t=time.monotonic(), result=result)

    def outcome(self, key: str, outcome: str) -> None:
        """What ``Worker.process`` returned for ``key`` in this process."""
        self.emit("outcome", kind=JOB, key=key, outcome=outcome, t=time.monotonic())

    def note(self, what: str, **fields: Any) -> None:
        self.emit("note", what=what, t=time.monotonic(), **fields)

    def close(self) -> None:
        os.close(self._fd)


@dataclass
class Section:
    """One critical section as one process lived it."""

    kind: str
    key: str
    run: str
    token: int
    start: float
    last_believed: float | None
    """Last time the process believed it held the section (None: never did)."""
    end: float | None = None
    """None if the process was killed inside the section."""
    result: str | None = None
    """``returned`` (work finished), ``failed``, ``lost``, ``fenced``, ``stopped``."""
    owner: str = ""
    sid: int = 0
    attempt: int | None = None


@dataclass(frozen=True)
class Outcome:
    run: str
    kind: str
    key: str
    outcome: str
    t: float


@dataclass(frozen=True)
class Effect:
    """A write the fenced store accepted, in the store's order (``seq``)."""

    kind: str
    key: str
    token: int
    run: str
    sid: int
    op: str
    """``write`` (work), ``commit`` (the last write of finished work) or ``late``."""
    seq: int


@dataclass(frozen=True)
class Final:
    """A job's state at the end, as ``Worker.inspect`` reads it."""

    status: str
    """``done``, ``gave_up`` or ``pending``."""
    token: int
    attempt: int


@dataclass(frozen=True)
class Window:
    """A finished job whose DONE record expired (``done_retention`` over): the one case
    where a job may run again. Granted by a scenario, per job, explicitly."""

    expired: float
    """When the record was gone (monotonic): sections and outcomes after it belong to
    the job's next life."""
    done: Final
    """The job's state just before it expired: the first life's end."""


@dataclass
class History:
    sections: list[Section] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    notes: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Violation:
    kind: str
    key: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind} [{self.key}]: {self.detail}"


def parse_lines(lines: Iterable[str], history: History | None = None) -> History:
    """Fold event lines into ``history``; a torn (unparsable) last line is skipped."""
    history = history if history is not None else History()
    by_sid: dict[tuple[str, int], Section] = {}
    pending: list[str] = [line for line in lines if line.strip()]
    for n, line in enumerate(pending):
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            if n == len(pending) - 1:
                break  # the line being written when the process was killed
            raise
        ev = event["ev"]
        if ev == "start":
            section = Section(
                kind=event["kind"], key=event["key"], run=event["run"], token=event["token"],
                start=event["t"], last_believed=event["t"] if event["believed"] else None,
                owner=event.get("owner", ""), sid=event["sid"], attempt=event.get("attempt"),
            )
            by_sid[(section.run, section.sid)] = section
            history.sections.append(section)
        elif ev == "believe":
            section = by_sid[(event["run"], event["sid"])]
            if section.last_believed is None or event["t"] > section.last_believed:
                section.last_believed = event["t"]
        elif ev == "end":
            section = by_sid[(event["run"], event["sid"])]
            section.end, section.result = event["t"], event["result"]
        elif ev == "outcome":
            history.outcomes.append(
                Outcome(event["run"], event["kind"], event["key"], event["outcome"], event["t"])
            )
        else:
            history.notes.append(event)
    return history


def load(paths: Iterable[Path]) -> History:
    """The history of every file (one file per process)."""
    history = History()
    for path in sorted(paths):
        parse_lines(path.read_text().splitlines(), history)
    return history


def followed_early(history: History, final: Mapping[str, Final]) -> list[Violation]:
    """Deliveries settled by the progress (``followed`` notes) before their job was
    done: the run whose attempt the server marked DONE must have ended its section
    (``returned``) before any backup settled the job without a look; a job that did
    not end DONE must never be settled so."""
    out: list[Violation] = []
    for note in history.notes:
        if note.get("what") != "followed":
            continue
        key, at = note["key"], note["t"]
        end = final.get(key)
        done = [s for s in history.sections if s.kind == JOB and s.key == key
                and end is not None and s.token == end.token and s.result == "returned"]
        if end is None or end.status != "done" or not done:
            out.append(Violation(
                "followed_early", key, f"run {note['run']} settled it by the progress, "
                f"yet it ended {end.status if end else 'unknown'} with no run done"))
        elif done[0].end is None or done[0].end > at:
            out.append(Violation(
                "followed_early", key, f"run {note['run']} settled it by the progress "
                f"{(done[0].end or at) - at:.3f} s before the run that did it returned"))
    return out


def handovers(history: History) -> int:
    """Sections that follow, on the same key, a section of another process."""
    count = 0
    for sections in _by_key(history.sections).values():
        ordered = sorted(sections, key=lambda s: s.start)
        count += sum(1 for a, b in itertools.pairwise(ordered) if a.run != b.run)
    return count


def _by_key(sections: Iterable[Section]) -> dict[tuple[str, str], list[Section]]:
    grouped: dict[tuple[str, str], list[Section]] = defaultdict(list)
    for s in sections:
        grouped[(s.kind, s.key)].append(s)
    return grouped


def _who(s: Section) -> str:
    return f"run {s.run} ({s.owner or '?'}, token {s.token})"


def check(
    history: History,
    *,
    effects: Sequence[Effect] | None = None,
    final: Mapping[str, Final] | None = None,
    exclusive: bool = True,
    tokens: bool = True,
    once: bool = True,
    pending_ok: bool = True,
    max_attempts: int | None = None,
    windows: Mapping[str, Window] | None = None,
) -> list[Violation]:
    """Every violation of lockworker's promises found in ``history``.

    - ``exclusive``: no two sections of one key by different runs overlap on their
      ``[start, last_believed]`` intervals (sections never believed are skipped);
    - ``tokens``: per key, tokens strictly grow in order of section start (where
      holders may overlap, not ``exclusive``: a section's token is above that of every
      section that stopped believing before it started), and no token belongs to two
      sections (nor, in the store, to two runs);
    - ``once`` (jobs): at most one run reports DONE, it is the run whose attempt the
      server marked DONE, that attempt finished its work, and nothing ran after it;
    - ``final`` (jobs: id -> state at the end): every job is DONE, GAVE_UP or
      inspectably pending (not pending if ``pending_ok`` is False), and its state never
      fell behind the tokens handed out;
    - ``max_attempts`` (jobs): the hook ran at most that many times per job;
    - ``effects``: the store's accepted writes, checked for order and provenance;
    - ``windows`` (job id -> :class:`Window`): jobs whose DONE record expired, which may
      run once more after it; the DONE-once, nothing-lost and attempt checks judge each
      life apart (``<id> (before the window's end)``: what came before, ending in
      ``done``), while exclusion, tokens and fencing still span both.
    """
    out: list[Violation] = []
    grouped = _by_key(history.sections)
    if exclusive:
        out += _overlaps(grouped)
    if tokens:
        out += _token_order(grouped, exclusive=exclusive)
    if windows:
        history, effects, final = _lives(history, effects, final, windows)
        grouped = _by_key(history.sections)
    jobs = {key for kind, key in grouped if kind == JOB}
    if once:
        out += _done_once(history, grouped, final, effects)
    if final is not None:
        out += _nothing_lost(grouped, final, jobs, pending_ok)
    if max_attempts is not None:
        for key in sorted(jobs):
            runs = grouped[(JOB, key)]
            if len(runs) > max_attempts:
                out.append(Violation(
                    "too_many_attempts", key,
                    f"the hook ran {len(runs)} times (max_attempts={max_attempts}): tokens "
                    f"{[s.token for s in sorted(runs, key=lambda s: s.start)]}",
                ))
    if effects is not None:
        out += _fencing(grouped, effects, tokens=tokens)
    return out


def earlier_life(key: str) -> str:
    """The name the checker gives a job's life before its DONE record expired."""
    return f"{key} (before the window's end)"


def _lives(
    history: History,
    effects: Sequence[Effect] | None,
    final: Mapping[str, Final] | None,
    windows: Mapping[str, Window],
) -> tuple[History, list[Effect] | None, dict[str, Final] | None]:
    """``history`` with each windowed job's first life renamed (:func:`earlier_life`):
    its sections and outcomes before the record expired, its store writes with tokens up
    to its DONE's, and that DONE as its final state."""
    def before(kind: str, key: str, expired_if: bool) -> str:
        return earlier_life(key) if kind == JOB and key in windows and expired_if else key

    sections = [
        replace(s, key=before(s.kind, s.key, s.start < windows[s.key].expired))
        if s.kind == JOB and s.key in windows else s
        for s in history.sections
    ]
    outcomes = [
        replace(o, key=before(o.kind, o.key, o.t < windows[o.key].expired))
        if o.kind == JOB and o.key in windows else o
        for o in history.outcomes
    ]
    moved = None if effects is None else [
        replace(e, key=before(e.kind, e.key, e.token <= windows[e.key].done.token))
        if e.kind == JOB and e.key in windows else e
        for e in effects
    ]
    lives = None if final is None else {
        **final, **{earlier_life(key): w.done for key, w in windows.items()}
    }
    return History(sections, outcomes, history.notes), moved, lives


def _overlaps(grouped: Mapping[tuple[str, str], list[Section]]) -> list[Violation]:
    out: list[Violation] = []
    for (_kind, key), sections in grouped.items():
        believed = sorted(
            (s for s in sections if s.last_believed is not None), key=lambda s: s.start
        )
        active: list[Section] = []
        for b in believed:
            active = [a for a in active if a.last_believed is not None
                      and a.last_believed > b.start]
            for a in active:
                if a.run != b.run:
                    assert a.last_believed is not None
                    out.append(Violation(
                        "overlap", key,
                        f"{_who(a)} believed it held it until {a.last_believed:.6f}, "
                        f"{(a.last_believed - b.start) * 1000:.1f} ms after {_who(b)} "
                        f"started at {b.start:.6f}",
                    ))
            active.append(b)
    return out


def _token_order(
    grouped: Mapping[tuple[str, str], list[Section]], *, exclusive: bool = True
) -> list[Violation]:
    out: list[Violation] = []
    for (_kind, key), sections in grouped.items():
        by_token: dict[int, list[Section]] = defaultdict(list)
        for s in sections:
            by_token[s.token].append(s)
        for token, same in sorted(by_token.items()):
            if len(same) > 1:
                out.append(Violation(
                    "token_reuse", key,
                    f"token {token} was handed to {len(same)} sections: "
                    + ", ".join(f"run {s.run} ({s.owner or '?'}) at {s.start:.6f}" for s in same),
                ))
        believed = sorted(
            (s for s in sections if s.last_believed is not None), key=lambda s: s.start
        )
        pairs = itertools.pairwise(believed) if exclusive else _after_belief(believed)
        for a, b in pairs:
            if b.token < a.token:
                out.append(Violation(
                    "token_backwards", key,
                    f"{_who(b)} started at {b.start:.6f} after {_who(a)} "
                    f"started at {a.start:.6f}",
                ))
    return out


def _after_belief(believed: Sequence[Section]) -> Iterator[tuple[Section, Section]]:
    """Each section (by start) beside the highest-token section that had stopped
    believing before it started: the order tokens must keep where holders may overlap.

    After the server lost its data two holders can believe at once (the promise is
    then the fence: the store refuses the older token, :func:`_fencing`). A holder
    granted just before the loss may start its section after one granted just after
    it, with a lower token: their starts do not tell the order of their grants. A
    section that starts once another stopped believing was granted after that one's
    grant, so its token must be higher."""
    ended = sorted(believed, key=lambda s: s.last_believed or 0.0)
    top: Section | None = None
    n = 0
    for b in believed:
        while n < len(ended) and (ended[n].last_believed or 0.0) < b.start:
            if top is None or ended[n].token > top.token:
                top = ended[n]
            n += 1
        if top is not None:
            yield top, b


def _done_once(
    history: History,
    grouped: Mapping[tuple[str, str], list[Section]],
    final: Mapping[str, Final] | None,
    effects: Sequence[Effect] | None,
) -> list[Violation]:
    out: list[Violation] = []
    done_runs: dict[str, list[str]] = defaultdict(list)
    for o in history.outcomes:
        if o.kind == JOB and o.outcome == "done":
            done_runs[o.key].append(o.run)
    commits: dict[str, list[Effect]] = defaultdict(list)
    for e in effects or ():
        if e.kind == JOB and e.op == "commit":
            commits[e.key].append(e)
    keys = set(done_runs) | {key for kind, key in grouped if kind == JOB} | set(final or {})
    for key in sorted(keys):
        runs = done_runs.get(key, [])
        if len(runs) > 1:
            out.append(Violation(
                "double_done", key, f"{len(runs)} runs report DONE: {', '.join(runs)}"
            ))
        state = final.get(key) if final is not None else None
        if state is None:
            continue
        sections = grouped.get((JOB, key), [])
        if state.status == "done":
            finisher = [s for s in sections if s.token == state.token]
            finishers = {s.run for s in finisher}
            if not any(s.result == "returned" for s in finisher):
                out.append(Violation(
                    "lost", key,
                    f"marked DONE with token {state.token}, but no attempt with that token "
                    f"finished its work ({[s.result for s in finisher]})",
                ))
            for run in runs:
                if finishers and run not in finishers:
                    out.append(Violation(
                        "double_done", key,
                        f"run {run} reports DONE, but the job was done by "
                        f"{', '.join(sorted(finishers))} (token {state.token})",
                    ))
            for s in sections:
                if s.token > state.token:
                    out.append(Violation(
                        "double_done", key,
                        f"{_who(s)} ran after the job was DONE with token {state.token}",
                    ))
            for e in commits.get(key, []):
                if e.token > state.token:
                    out.append(Violation(
                        "double_done", key,
                        f"the store accepted a commit with token {e.token} from run {e.run} "
                        f"after the job was DONE with token {state.token}",
                    ))
            if effects is not None and not any(
                e.token == state.token for e in commits.get(key, [])
            ):
                out.append(Violation(
                    "lost", key, f"DONE with token {state.token} but the store has no commit"
                ))
        elif runs:
            out.append(Violation(
                "double_done" if state.status == "gave_up" else "lost", key,
                f"run(s) {', '.join(runs)} report DONE, but the job ended {state.status}",
            ))
    return out


def _nothing_lost(
    grouped: Mapping[tuple[str, str], list[Section]],
    final: Mapping[str, Final],
    jobs: set[str],
    pending_ok: bool,
) -> list[Violation]:
    out: list[Violation] = []
    for key in sorted(jobs | set(final)):
        state = final.get(key)
        if state is None:
            out.append(Violation("lost", key, "no state could be read at the end"))
            continue
        if state.status not in ("done", "gave_up", "pending"):
            out.append(Violation("lost", key, f"unknown status {state.status!r}"))
        if state.status == "pending" and not pending_ok:
            out.append(Violation(
                "lost", key, f"still pending at the end (attempt {state.attempt})"
            ))
        sections = grouped.get((JOB, key), [])
        if sections:
            top = max(s.token for s in sections)
            if state.token < top:
                out.append(Violation(
                    "lost", key,
                    f"the job's state fell behind: it shows token {state.token} "
                    f"({state.status}, attempt {state.attempt}) but token {top} was handed out",
                ))
    return out


def _fencing(
    grouped: Mapping[tuple[str, str], list[Section]],
    effects: Sequence[Effect],
    *,
    tokens: bool,
) -> list[Violation]:
    out: list[Violation] = []
    by_key: dict[tuple[str, str], list[Effect]] = defaultdict(list)
    for e in sorted(effects, key=lambda e: e.seq):
        by_key[(e.kind, e.key)].append(e)
    for (kind, key), accepted in by_key.items():
        known = {(s.run, s.sid): s for s in grouped.get((kind, key), [])}
        for a, b in itertools.pairwise(accepted):
            if b.token < a.token:
                out.append(Violation(
                    "fence", key,
                    f"the store accepted token {b.token} (run {b.run}) after token {a.token}",
                ))
        runs_of: dict[int, set[str]] = defaultdict(set)
        for e in accepted:
            runs_of[e.token].add(e.run)
            section = known.get((e.run, e.sid))
            if section is None or section.token != e.token:
                out.append(Violation(
                    "fence", key,
                    f"the store accepted a {e.op} with token {e.token} from run {e.run}, "
                    "which held no such section",
                ))
        if tokens:
            for token, runs in sorted(runs_of.items()):
                if len(runs) > 1:
                    out.append(Violation(
                        "token_reuse", key,
                        f"the store accepted writes with token {token} from {len(runs)} "
                        f"runs: {', '.join(sorted(runs))}",
                    ))
    return out
