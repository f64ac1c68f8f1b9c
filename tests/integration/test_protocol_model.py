"""The job lock protocol against a model of its states, for both implementations.

A state machine drives acquire, renew, complete, fail, release, reset, lease expiry and
the loss of a job's keys on a few jobs, by a few holders: owners keep their label when
they restart and get a new run, and earlier runs linger as stale holders. Every reply is
checked against a pure Python model, and after every step so are what ``inspect`` reports
and the raw keys: status, attempt, token, last owner and run, and the one holder, and
the job's one entry in the namespace's index (:mod:`lockworker.model.index`). The
script protocol runs twice: its steps sent alone, and each sent in a batch, looped in
one command beside steps of the same script on another job.

The model is written from the protocol's rules, not from its code:

- a pending free job is granted to anyone: attempt + 1 and token + 1 (a job the server
  does not know starts at the server clock in microseconds), unless its attempts are all
  spent, in which case it gives up there and then (a dead last attempt);
- a live lease is re-entered only by the same run (not merely the same owner label);
- only the exact lock value of the holder renews or settles; a stale one changes nothing
  (it is answered as applied only when the state already is what it would write: a
  retry whose first reply was lost); so what a settle writes is unique to it, and a
  failure names its owner but no run (the grant, and a dead last attempt given up,
  write the same fields with the run);
- a failure may set the job's next attempt a delay ahead (its due time, the server's
  clock plus the delay, written where the run would be): until then nobody is granted
  the job, and every look says how long it has left; a retried failure with a delay
  finds its own write by its fields; a failure may give the job up at once;
- DONE and GAVE_UP are final except through reset, which keeps the token counter; a
  DONE job's records expire (``done_retention``), and a duplicate then runs it again
  with a larger token;
- the index holds each job's kind: none once DONE, GAVE_UP, HELD under a lease (and
  after its holder died, until the next step on the job), BACKOFF at the due time,
  else PENDING; a job whose keys vanished keeps its entry until a step writes it again;
- tokens handed out for a job strictly increase over the whole run.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
import redis
from helpers import wait_for
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from lockworker.model.codec import Holder, LockValue, decode_lock, decode_state
from lockworker.model.history import HISTORY_CAP, AttemptEnd
from lockworker.model.index import Kind, entry, score
from lockworker.model.keys import JobKeys, escape
from lockworker.model.state import Grant, JobStatus, Renewal, Reset, Settle, Snapshot
from lockworker.protocol import LockProtocol, ScriptProtocol, batch
from lockworker.protocol.decode import text
from lockworker.protocol.script import Step
from lockworker.protocol.txn import TxnProtocol

LEASE = 30_000
LONG_LEASE = 60_000
RETENTION = 120_000
SLACK_MS = 5_000
JOBS = ("j0", "j1", "j2")
OWNERS = ("a", "b", "c|d", "\u00e9")
KINDS = ("complete", "fail", "fail later", "give up", "release")
LATER_MS = 60_000
"""The retry delay of a "fail later": far enough that it never passes by itself in a run;
the rule ``due_time_passes`` moves a due time into the past instead."""

ENDINGS = {end.value for end in AttemptEnd}

SETTINGS = settings(max_examples=60, stateful_step_count=30, deadline=None)

Fields = tuple[JobStatus, int, int, str, str]
"""What a job's state says: status, attempt, last token, last run, last owner."""


@dataclass
class JobModel:
    """What the server should hold for one job."""

    max_attempts: int
    known: bool = False
    """The server holds a state for the job (else every read shows a fresh job)."""
    status: JobStatus = JobStatus.PENDING
    attempt: int = 0
    token: int = 0
    run: str = ""
    owner: str = ""
    holder: LockValue | None = None
    issued: list[LockValue] = field(default_factory=list)
    """Every lock value granted for the job, in order, over the whole run."""
    recorded: list[LockValue] = field(default_factory=list)
    """The grants whose records the server keeps, in order (before the history's cap)."""
    folded: bool = False
    """The DONE state holds the job's one clean attempt, and no history key exists."""
    implied: LockValue | None = None
    """The grant of a job the server did not know, whose record its lease and state
    imply (none written): it goes with them if they vanish before a step writes it."""
    last_settle: tuple[LockValue, str] | None = None
    """The holder's lock value and step of the job's last applied settle."""
    due_ms: int | None = None
    """The due time the state holds (server ms), written by a "fail later"."""
    lapsed: bool = False
    """The holder died and its lease ran out, and no step on the job came since: the
    index still holds the job as held."""
    orphan: Kind | None = None
    """What the index held for the job when its keys vanished (expiry, or the server
    lost them): the entry stays until a step on the job writes it again."""

    def indexed(self) -> Kind | None:
        """The job's entry in the namespace's index (:mod:`lockworker.model.index`)."""
        if not self.known:
            return self.orphan
        if self.status is JobStatus.DONE:
            return None
        if self.status is JobStatus.GAVE_UP:
            return Kind.GAVE_UP
        if self.holder is not None:
            return Kind.HELD
        if self.due_ms is not None:
            return Kind.BACKOFF
        return Kind.HELD if self.lapsed else Kind.PENDING

    def fields(self) -> Fields:
        return (self.status, self.attempt, self.token, self.run, self.owner)

    def write(self, fields: Fields, due_ms: int | None = None) -> None:
        self.status, self.attempt, self.token, self.run, self.owner = fields
        self.known = True
        self.due_ms = due_ms
        self.lapsed, self.orphan = False, None
        self.implied = None  # every step after the grant writes (or folds) the record

    def forget(self) -> None:
        if self.implied is not None:  # its record was its lease and state
            self.recorded.remove(self.implied)
            self.implied = None
        self.orphan = self.indexed()
        self.known, self.holder, self.due_ms, self.lapsed = False, None, None, False
        self.status, self.attempt, self.token, self.run, self.owner = (
            JobStatus.PENDING, 0, 0, "", ""
        )

    def stale(self) -> list[LockValue]:
        return [v for v in self.issued if v != self.holder]


def settled_fields(held: LockValue, kind: str, max_attempts: int) -> Fields:
    """The state a holder's complete, fail or release writes."""
    if kind == "complete":
        status = JobStatus.DONE
        attempt = held.attempt
    elif kind in ("fail", "fail later", "give up"):
        final = kind == "give up" or held.attempt >= max_attempts
        status = JobStatus.GAVE_UP if final else JobStatus.PENDING
        attempt = held.attempt
        return (status, attempt, held.token, "", held.owner)
    else:
        status, attempt = JobStatus.PENDING, held.attempt - 1
    return (status, attempt, held.token, held.run, held.owner)


def applied(fields: Fields) -> Settle:
    """The answer to a settle step that wrote (or had already written) ``fields``."""
    return {
        JobStatus.DONE: Settle.DONE,
        JobStatus.GAVE_UP: Settle.GAVE_UP,
        JobStatus.PENDING: Settle.RELEASED,
    }[fields[0]]


class ProtocolModel(RuleBasedStateMachine):
    holders = Bundle("holders")

    def __init__(self, client: redis.Redis, protocol: LockProtocol) -> None:
        super().__init__()
        self.client = client
        self.protocol = protocol
        namespace = f"model-{uuid.uuid4().hex[:12]}"
        self.keys = {job: JobKeys.of(namespace, job) for job in JOBS}
        self.jobs: dict[str, JobModel] = {}
        self.runs = 0

    # -- helpers -------------------------------------------------------------------

    def new_holder(self, owner: str) -> Holder:
        self.runs += 1
        return Holder(owner, f"{self.runs:016x}")

    def server_ms(self) -> int:
        return self.server_us() // 1000

    def due_ahead(self, m: JobModel) -> bool:
        """True if ``m``'s job is pending and free with a due time still ahead."""
        return (
            m.status is JobStatus.PENDING and m.holder is None and m.due_ms is not None
            and m.due_ms > self.server_ms()
        )

    def server_us(self) -> int:
        seconds, micros = self.client.time()
        return int(seconds) * 1_000_000 + int(micros)

    def held_jobs(self) -> list[str]:
        return [job for job, m in self.jobs.items() if m.holder is not None]

    def jobs_with_stale(self) -> list[str]:
        return [job for job, m in self.jobs.items() if m.stale()]

    def held_stale_jobs(self) -> list[str]:
        return [job for job, m in self.jobs.items() if m.holder is not None and m.stale()]

    def settled_jobs(self) -> list[str]:
        return [job for job, m in self.jobs.items() if m.last_settle is not None]

    def lock_pttl(self, job: str) -> int:
        return int(self.client.pttl(self.keys[job].lock))

    def settle(self, job: str, held: LockValue, kind: str) -> Settle:
        keys, m = self.keys[job], self.jobs[job]
        if kind == "complete":
            return self.protocol.complete(keys, held, RETENTION)
        if kind == "fail":
            return self.protocol.fail(keys, held, m.max_attempts, RETENTION)
        if kind in ("fail later", "give up"):
            return self.protocol.fail(
                keys, held, m.max_attempts, RETENTION, delay_ms=LATER_MS,
                give_up=kind == "give up",
            )
        return self.protocol.release(keys, held, RETENTION)

    def acquire(self, job: str, who: Holder) -> Grant | Snapshot:
        """Acquire ``job`` for ``who``, check the answer against the model, update it."""
        m, keys = self.jobs[job], self.keys[job]
        before = self.server_us() if not m.known else 0
        got = self.protocol.acquire(keys, who, LEASE, m.max_attempts, RETENTION)
        if m.status is not JobStatus.PENDING:
            # DONE and GAVE_UP are final: nothing to take, nothing written
            assert got == Snapshot(m.status, m.attempt, m.token, m.owner, run=m.run), got
            return got
        if m.holder is not None:
            h = m.holder
            if (h.owner, h.run) == (who.owner, who.run):
                assert got == Grant(h.attempt, h.token, reentered=True), got
                return got
            assert isinstance(got, Snapshot), (got, h, who)
            assert got.pttl_ms is not None and 0 < got.pttl_ms <= LONG_LEASE, got
            assert got == Snapshot(
                JobStatus.PENDING, h.attempt, h.token, h.owner,
                holder=h.owner, pttl_ms=got.pttl_ms, run=h.run,
            ), got
            return got
        if m.known and m.attempt >= m.max_attempts:
            # the last attempt died without settling: the job gives up now
            assert got == Snapshot(
                JobStatus.GAVE_UP, m.attempt, m.token, m.owner, run=m.run
            ), got
            m.status, m.lapsed, m.implied = JobStatus.GAVE_UP, False, None
            return got
        if self.due_ahead(m):
            # a failure set the next attempt ahead: refused to everybody, with the time left
            assert isinstance(got, Snapshot), (got, m)
            assert got.due_ms is not None and 0 < got.due_ms <= LATER_MS, got
            assert got == Snapshot(
                JobStatus.PENDING, m.attempt, m.token, m.owner, due_ms=got.due_ms
            ), (got, m)
            return got
        assert isinstance(got, Grant), (got, m)
        assert not got.reentered and got.attempt == m.attempt + 1, (got, m)
        if m.known:
            assert got.token == m.token + 1, (got, m)
        else:
            assert before <= got.token <= self.server_us(), (got, before)
        assert all(got.token > v.token for v in m.issued), (got, m.issued)
        value = who.value(got.token, got.attempt)
        new = not m.known
        m.write((JobStatus.PENDING, got.attempt, got.token, who.run, who.owner))
        if new:  # a new job's grant writes no record: its lease and state imply it
            assert self.client.exists(keys.history) == (1 if m.recorded else 0), m
            m.implied = value
        m.holder = value
        m.issued.append(value)
        m.recorded.append(value)
        return got

    def stale_step(self, job: str, stale: LockValue, kind: str) -> None:
        """``stale`` (no longer the holder) renews or settles: nothing changes."""
        m = self.jobs[job]
        if kind == "renew":
            before = self.lock_pttl(job)
            renewed = self.protocol.renew(self.keys[job], stale, LONG_LEASE, RETENTION)
            expected_renewal = Renewal.NOT_HOLDER if m.known else Renewal.STATE_LOST
            assert renewed is expected_renewal, (renewed, stale, m)
            # nobody else's lease is extended
            assert self.lock_pttl(job) <= before
            return
        would_write = settled_fields(stale, kind, m.max_attempts)
        got = self.settle(job, stale, kind)
        # a failure with a delay is recognised by its fields, whatever its due time
        with_delay = kind == "fail later" and would_write[0] is JobStatus.PENDING
        if not m.known:
            expected = Settle.STATE_LOST
        elif m.fields() == would_write and (m.due_ms is None or with_delay):
            # the state already is what this step writes: a retry after a lost reply
            expected = applied(would_write)
        else:
            expected = Settle.NOT_HOLDER
        assert got is expected, (got, kind, stale, m)

    def expire(self, job: str, wait: bool) -> None:
        """The holder dies: its lease runs out (or is deleted, which is what expiry does)."""
        lock = self.keys[job].lock
        if wait:
            assert self.client.pexpire(lock, 1)
            wait_for(lambda: self.client.exists(lock) == 0, timeout=5.0, interval=0.001)
        else:
            assert self.client.delete(lock) == 1
        self.jobs[job].holder = None
        self.jobs[job].lapsed = True

    # -- rules ---------------------------------------------------------------------

    @initialize(target=holders, maxes=st.tuples(*[st.integers(1, 3) for _ in JOBS]))
    def start(self, maxes: tuple[int, ...]) -> object:
        self.jobs = {job: JobModel(n) for job, n in zip(JOBS, maxes, strict=True)}
        return multiple(*(self.new_holder(owner) for owner in OWNERS))

    @rule(target=holders, job=st.sampled_from(JOBS), who=holders, restarted=st.booleans())
    def acquire_by_anyone(self, job: str, who: Holder, restarted: bool) -> Holder:
        """``who`` (or ``who`` restarted: same owner label, new run) asks for the job."""
        if restarted:
            who = self.new_holder(who.owner)
        self.acquire(job, who)
        return who

    @precondition(lambda self: self.held_jobs())
    @rule(target=holders, data=st.data())
    def restarted_owner_waits_out_its_predecessor(self, data: st.DataObject) -> Holder:
        job = data.draw(st.sampled_from(self.held_jobs()), label="job")
        old = self.jobs[job].holder
        assert old is not None
        successor = self.new_holder(old.owner)
        got = self.acquire(job, successor)
        assert isinstance(got, Snapshot) and (got.holder, got.run) == (old.owner, old.run)
        return successor

    @precondition(lambda self: self.held_jobs())
    @rule(data=st.data())
    def acquire_retried_by_the_holding_run(self, data: st.DataObject) -> None:
        """The holder's acquire is sent again (its reply was lost): the same lease."""
        job = data.draw(st.sampled_from(self.held_jobs()), label="job")
        h = self.jobs[job].holder
        assert h is not None
        got = self.acquire(job, Holder(h.owner, h.run))
        assert got == Grant(h.attempt, h.token, reentered=True)

    @precondition(lambda self: self.held_jobs())
    @rule(data=st.data(), kind=st.sampled_from(("renew", *KINDS)))
    def holder_steps(self, data: st.DataObject, kind: str) -> None:
        job = data.draw(st.sampled_from(self.held_jobs()), label="job")
        m, keys = self.jobs[job], self.keys[job]
        h = m.holder
        assert h is not None
        if kind == "renew":
            lease = data.draw(st.sampled_from([LEASE, LONG_LEASE]), label="lease")
            assert self.protocol.renew(keys, h, lease, RETENTION) is Renewal.RENEWED
            assert lease - SLACK_MS < self.lock_pttl(job) <= lease
            assert RETENTION - SLACK_MS < int(self.client.pttl(keys.state)) <= RETENTION
            return
        expected = settled_fields(h, kind, m.max_attempts)
        # A completion folds a history that is this grant's record alone, started at
        # its token's milliseconds (a grant of a job the server did not know).
        opened = self.protocol.inspect(keys, history=True).history
        folds = kind == "complete" and m.recorded == [h] and (
            opened[-1].started_ms == h.token // 1000
        )
        before = self.server_ms()
        got = self.settle(job, h, kind)
        after = self.server_ms()
        assert got is applied(expected), (got, kind, h, m)
        if (kind.startswith("fail") and h.attempt == m.max_attempts) or kind == "give up":
            assert got is Settle.GAVE_UP
        if kind == "release":
            # the attempt is refunded, the token is not
            assert expected[1] == h.attempt - 1 and expected[2] == h.token
        due = None
        if kind == "fail later" and got is Settle.RELEASED:
            state = decode_state(self.client.get(keys.state))
            assert state is not None and state.due_ms is not None, state
            assert before + LATER_MS <= state.due_ms <= after + LATER_MS, (state, before)
            due = state.due_ms
        m.write(expected, due)
        m.holder = None
        m.last_settle = (h, kind)
        m.folded = folds
        state = decode_state(self.client.get(keys.state))
        assert state is not None and (state.took_ms is not None) == folds, (state, m)
        assert self.client.exists(keys.history) == (0 if folds else 1), m
        times = state.folded()
        if times is not None:  # the record as it would have been: started, ended then
            assert times[0] == opened[-1].started_ms and before <= times[1] <= after, times

    @precondition(lambda self: any(self.due_ahead(m) for m in self.jobs.values()))
    @rule(data=st.data())
    def due_time_passes(self, data: st.DataObject) -> None:
        """A job's due time comes (moved into the past: the clock went on)."""
        jobs = [job for job, m in self.jobs.items() if self.due_ahead(m)]
        job = data.draw(st.sampled_from(jobs), label="job")
        m, keys = self.jobs[job], self.keys[job]
        past = self.server_ms() - 1
        state = decode_state(self.client.get(keys.state))
        assert state is not None and state.due_ms == m.due_ms, (state, m)
        assert self.client.set(keys.state, replace(state, due_ms=past).encode(), keepttl=True)
        # the index's time of a job backing off is its due time: it moves along
        assert self.client.zadd(
            keys.index, {escape(job): score(Kind.BACKOFF, past)}, xx=True, ch=True
        ) == 1
        m.due_ms = past

    @precondition(lambda self: any(
        m.known and m.status is JobStatus.DONE for m in self.jobs.values()))
    @rule(data=st.data())
    def done_record_expires(self, data: st.DataObject) -> None:
        """A DONE job's records expire (``done_retention`` is over): the job is unknown
        again, and a duplicate of it runs again, with a larger token."""
        jobs = [j for j, m in self.jobs.items() if m.known and m.status is JobStatus.DONE]
        job = data.draw(st.sampled_from(jobs), label="job")
        m, keys = self.jobs[job], self.keys[job]
        self.client.pexpire(keys.history, 1)
        assert self.client.pexpire(keys.state, 1)
        wait_for(lambda: self.client.exists(keys.state, keys.history) == 0, timeout=5.0,
                 interval=0.001)
        m.forget()
        m.recorded.clear()
        m.folded = False

    @precondition(lambda self: self.jobs_with_stale())
    @rule(
        data=st.data(),
        steps=st.permutations(("renew", *KINDS)),
        under_a_live_lease=st.booleans(),
    )
    def stale_holder_steps(
        self, data: st.DataObject, steps: list[str], under_a_live_lease: bool
    ) -> None:
        """A lock value of an earlier grant renews and settles: nothing changes."""
        jobs = self.jobs_with_stale()
        if under_a_live_lease and self.held_stale_jobs():
            jobs = self.held_stale_jobs()
        job = data.draw(st.sampled_from(jobs), label="job")
        stale = data.draw(st.sampled_from(self.jobs[job].stale()), label="stale")
        for kind in steps:
            self.stale_step(job, stale, kind)

    @precondition(lambda self: self.settled_jobs())
    @rule(data=st.data())
    def settle_retried_after_a_lost_reply(self, data: st.DataObject) -> None:
        """The last settle of a job, sent again: recognised while nothing else happened."""
        job = data.draw(st.sampled_from(self.settled_jobs()), label="job")
        last = self.jobs[job].last_settle
        assert last is not None
        self.stale_step(job, *last)

    @precondition(lambda self: self.held_jobs())
    @rule(
        data=st.data(),
        wait=st.booleans(),
        successor=st.none() | holders,
        comes_back=st.none() | st.permutations(("renew", *KINDS)),
    )
    def holder_dies(
        self,
        data: st.DataObject,
        wait: bool,
        successor: Holder | None,
        comes_back: list[str] | None,
    ) -> None:
        """The holder dies; maybe another process takes over (or the job gives up), and
        maybe the old holder was only paused and comes back to renew and settle."""
        job = data.draw(st.sampled_from(self.held_jobs()), label="job")
        old = self.jobs[job].holder
        assert old is not None
        self.expire(job, wait)
        if successor is not None:
            self.acquire(job, successor)
        for kind in comes_back or ():
            self.stale_step(job, old, kind)

    @precondition(lambda self: any(m.known for m in self.jobs.values()))
    @rule(
        data=st.data(),
        how=st.sampled_from(("reset", "forced reset", "keys lost")),
        a_held_job=st.booleans(),
    )
    def start_over(self, data: st.DataObject, how: str, a_held_job: bool) -> None:
        """A job is reset (with or without force), or its keys vanish: retention passed,
        or the server lost its data."""
        jobs = self.held_jobs() if a_held_job and self.held_jobs() else list(JOBS)
        job = data.draw(st.sampled_from(jobs), label="job")
        m, keys = self.jobs[job], self.keys[job]
        if how == "keys lost":
            self.client.delete(keys.lock, keys.state)
            m.forget()
            if m.folded:  # the job's one record was in its state
                m.recorded.clear()
                m.folded = False
            return
        force = how == "forced reset"
        got = self.protocol.reset(keys, RETENTION, force=force)
        if not m.known:
            assert got is Reset.ABSENT, got
        elif m.holder is not None and not force:
            assert got is Reset.HELD, got
        else:
            # pending again, no attempt spent, the token counter kept
            assert got is Reset.RESET, got
            m.write((JobStatus.PENDING, 0, m.token, "", ""))
            m.holder = None
            m.folded = False  # a folded attempt went back to the history

    # -- invariants ----------------------------------------------------------------

    @invariant()
    def history_has_one_record_per_grant(self) -> None:
        """The last HISTORY_CAP grants, in order, each with one record; the live
        holder's record open, every other one ended (a stale settle wrote nothing)."""
        for job, m in self.jobs.items():
            records = self.protocol.inspect(self.keys[job], history=True).history
            granted = [(r.token, r.attempt, r.run, r.owner) for r in records]
            issued = [(v.token, v.attempt, v.run, v.owner) for v in m.recorded]
            assert granted == issued[len(issued) - len(granted) :], (granted, issued)
            assert len(granted) == min(len(issued), HISTORY_CAP), (granted, issued)
            if m.implied is not None:
                # read from the lease and state alone, started at the token's ms
                stored = self.client.lrange(self.keys[job].history, 0, -1)
                assert not any(f"|{m.implied.token}|" in text(v) for v in stored), stored
                assert records[-1].token == m.implied.token, (records, m)
                assert records[-1].started_ms == m.implied.token // 1000, records
            if m.holder is not None:
                assert records[-1].token == m.holder.token, (records, m)
                assert records[-1].ending is None, records
                records = records[:-1]
            assert all(r.ending in ENDINGS for r in records), records

    @invariant()
    def server_agrees_with_the_model(self) -> None:
        for job, m in self.jobs.items():
            keys = self.keys[job]
            seen = self.protocol.inspect(keys)
            raw_lock, raw_state = self.client.mget(keys.lock, keys.state)
            assert m.attempt <= m.max_attempts, m
            h = m.holder
            if h is not None:
                # one holder: the lock key holds exactly its value
                assert m.status is JobStatus.PENDING and m.known, m
                assert raw_lock is not None and decode_lock(raw_lock) == h, (raw_lock, h)
                assert seen.pttl_ms is not None and 0 < seen.pttl_ms <= LONG_LEASE, seen
                assert seen == Snapshot(
                    JobStatus.PENDING, h.attempt, h.token, m.owner,
                    holder=h.owner, pttl_ms=seen.pttl_ms, run=h.run,
                ), (seen, m)
                assert (h.attempt, h.token, h.run, h.owner) == m.fields()[1:], m
            else:
                assert raw_lock is None, (raw_lock, m)
                due = seen.due_ms
                if self.due_ahead(m):
                    assert due is not None and 0 < due <= LATER_MS, (seen, m)
                assert seen == Snapshot(
                    m.status, m.attempt, m.token, m.owner, run=m.run, due_ms=due
                ), (seen, m)
                if due is not None:
                    assert m.due_ms is not None and m.status is JobStatus.PENDING, (seen, m)
            if m.known:
                state = decode_state(raw_state) if raw_state is not None else None
                assert state is not None, (raw_state, m)
                assert (state.status, state.attempt, state.token, state.run, state.owner) == (
                    m.fields()
                ), (state, m)
                assert state.due_ms == m.due_ms, (state, m)
            else:
                assert raw_state is None, (raw_state, m)
            tokens = [v.token for v in m.issued]
            assert tokens == sorted(set(tokens)), tokens

    @invariant()
    def index_agrees_with_the_model(self) -> None:
        """Each job's one entry in the namespace's index is of the kind its state says
        (a backing-off job's at its due time), and the index holds no other member."""
        found: dict[str, tuple[Kind, int]] = {}
        for key in {k.index for k in self.keys.values()}:
            for member, value in self.client.zrange(key, 0, -1, withscores=True):
                e = entry(text(member), value)
                assert e is not None and e.job_id in self.jobs, (key, member, value)
                assert e.job_id not in found and key == self.keys[e.job_id].index, e
                found[e.job_id] = (e.kind, e.ms)
        now = self.server_ms()
        for job, m in self.jobs.items():
            kind, ms = found.get(job, (None, 0))
            assert kind is m.indexed(), (job, kind, m)
            if kind is Kind.BACKOFF:  # at the due time (an orphan's is its state's was)
                assert not m.known or ms == m.due_ms, (job, ms, m)
            elif kind is not None:  # the time of the step that wrote it
                assert ms <= now, (job, kind, ms, now)

    def teardown(self) -> None:
        for keys in self.keys.values():
            self.client.delete(keys.lock, keys.state, keys.history, keys.index)


def looped(client: redis.Redis) -> LockProtocol:
    """The script protocol whose every step travels in a batch, looped on the server
    beside two steps of the same script on a job outside the model
    (:mod:`lockworker.protocol.many`): its replies must be the model's all the same."""
    scratch = JobKeys.of(f"model-scratch-{uuid.uuid4().hex[:12]}", "x")

    def send(step: Step[Any]) -> Any:
        filler = replace(step, keys=scratch)
        calls = batch.plan(client, [filler, step, filler])
        assert len(calls) == 1 and calls[0].looped  # one command carries all three
        return batch.send(client, [filler, step, filler])[1]

    return ScriptProtocol(client, sender=send)


IMPLEMENTATIONS: dict[str, Callable[[redis.Redis], LockProtocol]] = {
    "script": ScriptProtocol,
    "script, looped in batches": looped,
    "txn": TxnProtocol,
}


@pytest.mark.parametrize("implementation", sorted(IMPLEMENTATIONS))
def test_protocol_follows_its_model(redis_client: redis.Redis, implementation: str) -> None:
    protocol = IMPLEMENTATIONS[implementation](redis_client)

    class OnThisServer(ProtocolModel):
        def __init__(self) -> None:
            super().__init__(redis_client, protocol)

    run_state_machine_as_test(OnThisServer, settings=SETTINGS)
