"""What the server holds, by namespace and kind: classifying keys, and estimating totals
from a sample. Pure: no Redis, no clock (the sampling is
:mod:`lockworker.runtime.footprint`'s).

Every lockworker key is ``lw:<product>:<namespace>:{<name>}:<suffix>``, namespace and
name escaped so that the namespace holds no ``{`` and the name no ``}``
(:mod:`lockworker.model.keys`): so the first ``:{`` ends the namespace, the next ``}``
ends the name, whatever characters either holds. A key is counted under the namespace
its key names (a worker's namespace for its jobs; ``streams``, ``leaders``, ``locks``,
``semaphores``, ``once``, ``redlocks`` for the others, unless a caller chose another),
except a worker's presence, counted under the worker's namespace it registers.

Why a sample: a finished job leaves its records for ``retention`` (a day by default),
so a busy server holds millions of keys; walking them all would take seconds and load
the server. A sample of the keyspace in SCAN order (a hash order: unrelated to names)
is a fair one, and each class's share of it, times the server's key count (DBSIZE), is
its estimated count; its bytes are the mean ``MEMORY USAGE`` of the class's sampled
keys times that count.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from lockworker.model.keys import PREFIX, Space, unescape
from lockworker.model.registry import INDEXED, REGISTRY


def size(count: float | None) -> str:
    """``205 B``, ``12.3 KiB``, ``16.5 GiB``; ``?`` when unknown."""
    if count is None:
        return "?"
    value, unit = float(count), "B"
    for unit in ("B", "KiB", "MiB", "GiB"):  # the unit reached is the one shown
        if abs(value) < 1024 or unit == "GiB":
            break
        value /= 1024
    return f"{value:.0f} B" if unit == "B" else f"{value:.1f} {unit}"


class Kind(str, enum.Enum):
    """What a key is for, as ``lockworker status`` and the dashboard count it."""

    JOB_LEASE = "job_lease"
    """``lw:job:...:lock``: a running attempt's lease (lives a lease)."""
    JOB_STATE = "job_state"
    """``lw:job:...:state``: every job's status, kept for ``retention``."""
    JOB_HISTORY = "job_history"
    """``lw:job:...:history``: the attempts of a job that needed more than one, or
    failed (kept with the state)."""
    STREAM_ENTRIES = "stream_entries"
    """``lw:stream:...:entries`` and ``...:delayed``: a stream's jobs, in it and
    waiting off it until due."""
    STREAM_READERS = "stream_readers"
    """``lw:stream:...:positions`` and ``...:readers``: who read a stream how far."""
    LEADER = "leader"
    """``lw:leader:...``: a leader's lease, token counter and term."""
    PRIMITIVE = "primitive"
    """Locks, semaphores, ``compute_once`` values and Redlocks."""
    PRESENCE = "presence"
    """``lw:presence:...``: the workers registered in a namespace (and what they did
    per minute)."""
    INDEX = "index"
    """``lw:index:...``: a namespace's index of its held, backing-off, pending and
    given-up jobs (:mod:`lockworker.model.index`)."""
    SCHEDULE = "schedule"
    """``lw:schedule:...``: a schedule's ticks."""
    REGISTRY = "registry"
    """``lw:registry`` and ``lw:registry:indexed``: what the views list (no namespace)."""
    OTHER = "other"
    """A key of no lockworker product (another application's, or unparsable)."""

    @property
    def label(self) -> str:
        return LABELS[self]


LABELS = {
    Kind.JOB_LEASE: "job leases", Kind.JOB_STATE: "job states",
    Kind.JOB_HISTORY: "job histories", Kind.STREAM_ENTRIES: "stream entries",
    Kind.STREAM_READERS: "stream readers", Kind.LEADER: "leaders",
    Kind.PRIMITIVE: "locks/semaphores", Kind.PRESENCE: "presence", Kind.OTHER: "other",
    Kind.INDEX: "job index", Kind.SCHEDULE: "schedules", Kind.REGISTRY: "registry",
}
PRIMITIVES = {Space.LOCK.value, Space.SEMAPHORE.value, Space.ONCE.value, Space.REDLOCK.value}
JOB_SUFFIXES = {"lock": Kind.JOB_LEASE, "state": Kind.JOB_STATE, "history": Kind.JOB_HISTORY}
STREAM_SUFFIXES = {"entries": Kind.STREAM_ENTRIES, "delayed": Kind.STREAM_ENTRIES,
                   "positions": Kind.STREAM_READERS, "readers": Kind.STREAM_READERS}

INDEX_HEAD = f"{PREFIX}:index:"

Class = tuple["str | None", Kind]
"""(namespace, kind): a namespace of None is no lockworker namespace."""


def parse(key: str) -> tuple[str, str, str, str] | None:
    """``(product, namespace, name, suffix)`` of a lockworker key (namespace and name
    unescaped), or None if ``key`` is not one."""
    head = PREFIX + ":"
    if not key.startswith(head):
        return None
    product, colon, rest = key[len(head):].partition(":")
    namespace, brace, rest = rest.partition(":{")
    name, close, suffix = rest.partition("}")
    if not (colon and brace and close and namespace and name) or "{" in namespace:
        return None
    if not suffix.startswith(":") or len(suffix) < 2:
        return None
    return product, unescape(namespace), unescape(name), suffix[1:]


def classify(key: str) -> Class:
    """The namespace a key is counted under and its :class:`Kind` (see the module
    docstring); ``(None, OTHER)`` for a key of no lockworker product."""
    if key in (REGISTRY, INDEXED):
        return None, Kind.REGISTRY
    if key.startswith(INDEX_HEAD):
        namespace, brace, _ = key[len(INDEX_HEAD):].partition(":{")
        if brace and namespace and "{" not in namespace:
            return unescape(namespace), Kind.INDEX
    parts = parse(key)
    if parts is None:
        return None, Kind.OTHER
    product, namespace, name, suffix = parts
    if product == Space.JOB.value:
        return namespace, JOB_SUFFIXES.get(suffix, Kind.OTHER)
    if product == Space.STREAM.value:
        return namespace, STREAM_SUFFIXES.get(suffix, Kind.OTHER)
    if product == Space.LEADER.value:
        return namespace, Kind.LEADER
    if product == Space.PRESENCE.value:
        return name, Kind.PRESENCE
    if product in PRIMITIVES:
        return namespace, Kind.PRIMITIVE
    if product == Space.SCHEDULE.value:
        return namespace, Kind.SCHEDULE
    return namespace, Kind.OTHER


@dataclass(frozen=True)
class Share:
    """One (namespace, kind): its estimated keys and bytes, and what they rest on."""

    namespace: str | None
    kind: Kind
    keys: int
    bytes: int | None
    """None when none of its sampled keys could be sized (the sizing budget ran out)."""
    sampled: int
    """Its keys in the sample."""


@dataclass
class Sample:
    """What one master's sample saw: every class's keys, and the sizes of some."""

    total: int
    """The master's key count (DBSIZE) when sampled."""
    complete: bool = False
    """The scan went round the whole keyspace: the counts are exact, not estimates."""
    seen: Counter[Class] = field(default_factory=Counter)
    sizes: dict[Class, list[int]] = field(default_factory=dict)

    @property
    def sampled(self) -> int:
        return sum(self.seen.values())

    def add(self, keys: Iterable[str]) -> None:
        self.seen.update(classify(k) for k in keys)

    def factor(self) -> float:
        """Keys on the master per key seen."""
        if self.complete or not self.sampled:
            return 1.0
        return max(self.total, self.sampled) / self.sampled


@dataclass(frozen=True)
class Footprint:
    """The estimate: shares by namespace and kind, largest first, and the figures
    behind it."""

    shares: tuple[Share, ...]
    total_keys: int
    sampled: int
    exact: bool
    """Every key was seen (the sizes are still sampled, as MEMORY USAGE is)."""
    seconds: float
    used_memory: int | None = None
    maxmemory: int | None = None

    def by_namespace(self) -> dict[str | None, list[Share]]:
        grouped: dict[str | None, list[Share]] = {}
        for share in self.shares:
            grouped.setdefault(share.namespace, []).append(share)
        return grouped

    def of(self, namespace: str | None) -> Footprint:
        """Only the shares of ``namespace`` (all of them if None)."""
        if namespace is None:
            return self
        shares = tuple(s for s in self.shares if s.namespace == namespace)
        return Footprint(shares, self.total_keys, self.sampled, self.exact, self.seconds,
                         self.used_memory, self.maxmemory)


def estimate(
    samples: Iterable[Sample], seconds: float, memory: Mapping[str, int | None] | None = None
) -> Footprint:
    """Each class's keys (its sampled count times its master's :meth:`Sample.factor`)
    and bytes (its sized keys' mean times that), summed over the masters."""
    counts: dict[Class, float] = {}
    sized: dict[Class, list[int]] = {}
    sampled: Counter[Class] = Counter()
    done = list(samples)
    for sample in done:
        factor = sample.factor()
        for cls, seen in sample.seen.items():
            counts[cls] = counts.get(cls, 0.0) + seen * factor
            sampled[cls] += seen
        for cls, sizes in sample.sizes.items():
            sized.setdefault(cls, []).extend(sizes)
    shares = []
    for cls, count in counts.items():
        known = sized.get(cls)
        size = round(sum(known) / len(known) * count) if known else None
        shares.append(Share(cls[0], cls[1], round(count), size, sampled[cls]))
    shares.sort(key=lambda s: (-(s.bytes or 0), -s.keys, s.namespace or "", s.kind.value))
    memory = memory or {}
    return Footprint(
        tuple(shares), sum(s.total for s in done), sum(s.sampled for s in done),
        all(s.complete for s in done), seconds, memory.get("used_memory"),
        memory.get("maxmemory"),
    )
