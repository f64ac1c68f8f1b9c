"""Which workers of a namespace are alive, and what a backup makes of it. Pure: no
Redis, no clock, no threads.

Every :class:`~lockworker.Worker` (primary or backup) that serves registers in its
namespace's presence set, a sorted set whose members are the workers
(:class:`Member`, JSON) and whose scores say when each registration ends (server time,
in ms). A background loop of the worker, not its jobs, refreshes the registration
every third of its time to live (the worker's ``lock_timeout``); a clean stop removes
it. A worker that registers or leaves publishes on the namespace's presence channel.

A backup keeps a :class:`View`: ``primary_until``, the moment on its own monotonic
clock until which some primary of its namespace is registered. It updates it from
every refresh of its own registration (which returns the set), from a re-read when the
channel says a primary joined or left, and from a re-read at ``primary_until`` itself,
so that it knows of a clean stop within a round trip and of a crash within one lease.
While its last reading showed a primary, the backup defers to it
(:func:`lockworker.model.policy.backup_step`); once a reading shows none (after a
``left`` message, or at the registration's end), it competes at once, except during
its start-up grace (:meth:`View.begin`). Its fan-out
serving also holds back behind the backups ranked before it (``acting_until``): with
no primary, the first backup serves as one.

Keys of namespace ``billing`` (one hash tag, so one Cluster slot)::

    lw:presence:workers:{billing}:members   sorted set: member -> registration end (ms)
    lw:presence:workers:{billing}:acting    hash: run -> since when (ms) that backup
                                            serves as a primary
    lw:presence:workers:{billing}:wake      pub/sub channel: ``joined``, ``left``

A backup whose reading shows no primary registered does the primaries' work (its
contests no longer defer): it *serves as a primary* (:func:`serving_as_primary`). It
records since when, by the server's clock, in the ``acting`` hash (once, when its view
changes; removed when a primary serves again or it leaves; the hash expires with the
set). The registration's grammar is unchanged: a reader of an earlier release ignores
the hash, and a backup of an earlier release records nothing (a reader then shows it
serving, without since when).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from lockworker.model.keys import PREFIX, JobKeys, Space, check_name, unescape
from lockworker.model.state import Role

NAMESPACE = "workers"
ACTING = "acting"
"""The suffix of a namespace's hash of backups serving as primaries."""
JOINED = "joined"
LEFT = "left"
NOBODY = -math.inf
"""``primary_until`` when no primary is known to be registered."""
READ_MARGIN = 0.001
"""Seconds after a registration's end before re-reading, so the read lands after it."""
RETRY_PAUSE = 1.0
"""Longest pause after a failed refresh before the next try."""


def presence_keys(namespace: str) -> JobKeys:
    """The keys of ``namespace``'s presence (see the module docstring)."""
    return JobKeys(NAMESPACE, check_name(namespace, "namespace"), Space.PRESENCE)


def handover_channel(namespace: str) -> str:
    """The channel on which a settle that hands a job of ``namespace`` over at once (a
    release, a failure due again at once) tells so: one channel a namespace, in its
    presence space. Backups holding deliveries back listen there
    (:mod:`lockworker.daemons.defer`)."""
    return presence_keys(namespace).extra("handovers")


MEMBERS_PATTERN = f"{PREFIX}:{Space.PRESENCE.value}:{NAMESPACE}:{{*}}:members"
"""A SCAN pattern matching every namespace's presence set."""


def parse_members_key(key: str) -> str | None:
    """The namespace whose presence set ``key`` is, or None if it is not one."""
    head, tail = f"{PREFIX}:{Space.PRESENCE.value}:{NAMESPACE}:{{", "}:members"
    if not (key.startswith(head) and key.endswith(tail)) or len(key) == len(head + tail):
        return None
    name = key[len(head) : -len(tail)]
    return None if "}" in name else unescape(name)


@dataclass(frozen=True)
class Member:
    """One worker object's registration: who it is, and its time to live."""

    role: Role
    owner: str
    run: str
    host: str
    pid: int
    ttl_ms: int

    def encode(self) -> str:
        """The sorted set's member: canonical JSON, the same for every refresh."""
        return json.dumps(
            {"role": self.role.value, "owner": self.owner, "run": self.run,
             "host": self.host, "pid": self.pid, "ttl_ms": self.ttl_ms},
            sort_keys=True, separators=(",", ":"),
        )


def decode_member(raw: str) -> Member | None:
    """The :class:`Member` ``raw`` encodes, or None if lockworker did not write it."""
    try:
        data: Any = json.loads(raw)
        member = Member(
            Role(data["role"]), str(data["owner"]), str(data["run"]), str(data["host"]),
            int(data["pid"]), int(data["ttl_ms"]),
        )
    except (ValueError, KeyError, TypeError):
        return None
    return member


@dataclass(frozen=True)
class Registered:
    """A live registration as read: the member and the seconds left of it."""

    member: Member
    left: float

    @property
    def last_seen(self) -> float:
        """Seconds since the worker last refreshed its registration."""
        return max(0.0, self.member.ttl_ms / 1000.0 - self.left)


def registered(pairs: Iterable[tuple[str, int]]) -> list[Registered]:
    """The live registrations among ``(member, ms left)`` pairs (foreign members and
    ended registrations left out)."""
    found = []
    for raw, left_ms in pairs:
        member = decode_member(raw)
        if member is not None and left_ms > 0:
            found.append(Registered(member, left_ms / 1000.0))
    return found


def primary_until(found: Iterable[Registered], at: float) -> float:
    """Until when (on the clock that read ``at``) some primary is registered, from a
    reading taken at ``at``; :data:`NOBODY` if none is."""
    lefts = [r.left for r in found if r.member.role is Role.PRIMARY]
    return at + max(lefts) if lefts else NOBODY


def serving_as_primary(found: Iterable[Registered]) -> frozenset[str]:
    """The runs of the backups among ``found`` that serve as primaries: every backup,
    when no primary is registered (their contests compete at once; a fan-out stream's
    deliveries go to the first of them, :func:`acting`)."""
    found = list(found)
    if any(r.member.role is Role.PRIMARY for r in found):
        return frozenset()
    return frozenset(r.member.run for r in found if r.member.role is Role.BACKUP)


def ranks_before(member: Member, me: Member) -> bool:
    """Whether backup ``member`` acts for a primary before backup ``me``: by owner, then
    by run (two processes given one owner label still rank apart)."""
    return (member.owner, member.run) < (me.owner, me.run)


def acting(found: Iterable[Registered], me: Member | None) -> list[Registered]:
    """The registrations ``me``'s serving leaves a stream's jobs to: the primaries and,
    for a backup ``me``, the backups ranked before it (:func:`ranks_before`). With no
    primary the first backup serves as one, the others holding back behind it."""
    return [
        r for r in found
        if r.member.role is Role.PRIMARY
        or (me is not None and me.role is Role.BACKUP and ranks_before(r.member, me))
    ]


def acting_until(found: Iterable[Registered], at: float, me: Member | None) -> float:
    """Until when one of :func:`acting` is registered; :data:`NOBODY` if none is."""
    lefts = [r.left for r in acting(found, me)]
    return at + max(lefts) if lefts else NOBODY


class View:
    """What one worker knows of its namespace's primaries, and when to read again.

    Updated only by the worker's presence loop (a thread, or a task); the worker's
    contests read :attr:`primary_until` (a float, read whole).
    """

    def __init__(
        self, ttl: float, *, watch: bool, me: Member | None = None, grace: float = 0.0
    ) -> None:
        self.ttl = ttl
        self.watch = watch
        """A backup watches the primaries: it also re-reads when the last one's
        registration ends."""
        self.me = me
        """The worker's own registration: what ranks a backup among the backups."""
        self.primary_until = NOBODY
        self.acting_until = NOBODY
        """Like :attr:`primary_until`, with the backups ranked before this one
        (:func:`acting_until`): what a fan-out serving holds its deliveries back for."""
        self.primary_runs: frozenset[str] = frozenset()
        self.acting_runs: frozenset[str] = frozenset()
        """The runs of the last reading's primaries, and of :func:`acting`: whose
        progress on the jobs tells a held-back serving that the ones it defers to move
        (:class:`lockworker.serving.held.Held`)."""
        self.grace = grace
        """Seconds from the worker's start during which it defers as if a primary
        served, whatever its readings show (a backup's ``backup_delay``): see
        :meth:`begin`."""
        self.grace_until = NOBODY
        """Until when (on the worker's clock) that start-up grace lasts; over (NOBODY)
        once a reading showed a primary."""
        self.begun = False
        self.due = NOBODY
        """When the own registration must be refreshed next."""
        self.tried = NOBODY
        """When the last reading (or failed try) was sent."""

    def begin(self, now: float) -> None:
        """The worker starts serving at ``now`` (its own clock; the first call only):
        its start-up grace runs from here.

        A backup and a primary started at the same moment (as supervisord starts its
        programs) would otherwise race: the backup's first reading, taken before the
        primary registered, shows none, and it would compete for the first jobs until
        the primary's ``joined`` reached it. For ``grace`` seconds it defers as if a
        primary served; without a reading that shows one it competes at the grace's
        end. A reading that shows a primary ends the grace: from then on the readings
        alone decide (a primary that leaves is competed for at once). A backup alone
        pays the grace once, at its start."""
        if not self.begun:
            self.begun = True
            if self.primary_until == NOBODY:  # none seen yet
                self.grace_until = now + self.grace

    @property
    def defer_until(self) -> float:
        """Until when the worker's contests defer to a primary: for ever while the last
        reading showed one registered, else until the start-up grace's end
        (:meth:`begin`; never for a primary).

        Not until that registration's end: a backup whose own loop ran late (a loaded
        machine) would then compete beside a primary that serves. The loop reads again
        at that end instead, and only a reading says a primary is gone."""
        return math.inf if self.primary_until != NOBODY else self.grace_until

    @property
    def hold_until(self) -> float:
        """Until when a fan-out serving holds its deliveries back: as :attr:`defer_until`,
        for a primary or a backup ranked before this one."""
        return math.inf if self.acting_until != NOBODY else self.grace_until

    def primary_serving(self) -> bool:
        """Whether the last reading showed a primary."""
        return self.primary_until != NOBODY

    def read(self, found: Iterable[Registered], at: float) -> bool:
        """Apply a reading taken at ``at`` (the own registration refreshed then): True
        if it shows no primary, or no member to hold back for, where the last one
        showed one (the worker's waiting contests and held-back deliveries should look
        again at once)."""
        found = list(found)
        before = (self.primary_until, self.acting_until)
        me = self.me if self.watch else None
        self.primary_until = primary_until(found, at)
        self.acting_until = acting_until(found, at, me)
        if self.primary_until != NOBODY:
            self.grace_until = NOBODY  # the race is over: a primary was heard of
        self.primary_runs = frozenset(
            r.member.run for r in found if r.member.role is Role.PRIMARY
        )
        self.acting_runs = frozenset(r.member.run for r in acting(found, me))
        self.due = at + self.ttl / 3
        self.tried = at
        return (before[0] != NOBODY and self.primary_until == NOBODY) or (
            before[1] != NOBODY and self.acting_until == NOBODY
        )

    def failed(self, at: float) -> None:
        """A refresh sent at ``at`` failed: try again soon (the view stays, and lapses
        by itself when the registrations it saw end)."""
        self.due = at + min(RETRY_PAUSE, self.ttl / 3)
        self.tried = at

    def next_read(self) -> float:
        """When to read next: the own refresh, or for a backup the end of the
        registration of the last primary it saw (its contests defer to primaries), or
        else of the last backup ranked before it, whichever comes first."""
        ends = [t for t in (self.primary_until, self.acting_until) if t > self.tried]
        if self.watch and ends:
            return min(self.due, min(ends) + READ_MARGIN)
        return self.due
