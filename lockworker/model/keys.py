"""Key names: each product has its own key space, and names map to keys one to one.

Layout, for a worker's job ``2026-11-22`` in namespace ``digest``::

    lw:job:digest:{2026-11-22}:lock    the lease: which run holds which attempt, with a TTL
    lw:job:digest:{2026-11-22}:state   status, attempt count, last token; outlives leases
    lw:job:digest:{2026-11-22}:wake    pub/sub channel that wakes waiting processes
    lw:job:digest:{2026-11-22}:history one record per attempt (lockworker.model.history);
                                       none while a new job's first attempt runs, nor
                                       for a job DONE at its first clean attempt

The second part is the product (:class:`Space`): a worker's job, a ``Lock``, a
``Semaphore``, a ``Leader``, a ``compute_once`` key, a ``Redlock``, a stream source or
the workers' presence in a namespace.
No product can reach another's keys, whatever namespace a user picks.

Names may hold any character. ``%``, ``{`` and ``}`` are written percent-encoded
(``%25``, ``%7B``, ``%7D``), so the namespace holds no brace and the first ``{`` of a
key opens the job id, whose encoded form holds no ``}``: the mapping from (product,
namespace, name) to keys is injective, and all keys of one name share the hash tag
``{<encoded name>}``, so Redis Cluster puts them in one slot.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, field

from lockworker.errors import InvalidConfig
from lockworker.model.slots import same_slot_tag, tags

PREFIX = "lw"
MAX_NAME_LENGTH = 1024

_ESCAPES = str.maketrans({"%": "%25", "{": "%7B", "}": "%7D"})
_UNESCAPES = (("%7B", "{"), ("%7D", "}"), ("%25", "%"))
_GLOB = str.maketrans({c: "\\" + c for c in "*?[]\\"})


class Space(str, enum.Enum):
    """The product a key belongs to: the second part of every key."""

    JOB = "job"
    LOCK = "lock"
    SEMAPHORE = "semaphore"
    LEADER = "leader"
    ONCE = "once"
    REDLOCK = "redlock"
    STREAM = "stream"
    PRESENCE = "presence"
    SCHEDULE = "schedule"


def check_name(value: object, argument: str) -> str:
    """Return ``value`` if it is a usable name, else raise naming ``argument``."""
    if not isinstance(value, str):
        raise InvalidConfig(f"{argument} must be a non-empty str, got {type(value).__name__}")
    if not value.strip():
        raise InvalidConfig(f"{argument} must be a non-empty str, got {value!r}")
    if len(value) > MAX_NAME_LENGTH:
        raise InvalidConfig(
            f"{argument} must be at most {MAX_NAME_LENGTH} characters, got {len(value)}"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidConfig(f"{argument} must be encodable as UTF-8, got {value!r}") from exc
    return value


def escape(name: str) -> str:
    """``name`` with ``%``, ``{`` and ``}`` percent-encoded (injective)."""
    return name.translate(_ESCAPES) if ("%" in name or "{" in name or "}" in name) else name


def unescape(text: str) -> str:
    """The inverse of :func:`escape`."""
    if "%" not in text:
        return text
    out, i = [], 0
    while i < len(text):
        for code, char in _UNESCAPES:
            if text.startswith(code, i):
                out.append(char)
                i += 3
                break
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


@dataclass(frozen=True)
class JobKeys:
    """The keys of one named resource (a job, a lock, a leader...) of one product."""

    namespace: str
    job_id: str
    space: Space = Space.JOB

    @classmethod
    def of(cls, namespace: str, job_id: str, space: Space = Space.JOB) -> JobKeys:
        """Validated keys for ``job_id`` under ``namespace`` in the key space ``space``."""
        return cls(check_name(namespace, "namespace"), check_name(job_id, "job_id"), space)

    def __post_init__(self) -> None:
        # Built once per object: the job cycle reads these on every step.
        base = f"{PREFIX}:{self.space.value}:{escape(self.namespace)}:{{{escape(self.job_id)}}}"
        object.__setattr__(self, "base", base)
        object.__setattr__(self, "lock", base + ":lock")
        object.__setattr__(self, "state", base + ":state")
        object.__setattr__(self, "wake", base + ":wake")
        object.__setattr__(self, "history", base + ":history")
        object.__setattr__(self, "index", index_key(self.namespace, escape(self.job_id))
                           if self.space is Space.JOB else base + ":lock")

    base: str = field(default="", init=False, repr=False, compare=False)
    lock: str = field(default="", init=False, repr=False, compare=False)
    state: str = field(default="", init=False, repr=False, compare=False)
    wake: str = field(default="", init=False, repr=False, compare=False)
    history: str = field(default="", init=False, repr=False, compare=False)
    index: str = field(default="", init=False, repr=False, compare=False)
    """A job's: its namespace's index key in its slot (:mod:`lockworker.model.index`);
    any other product's: its lock key, which the steps take as "no index"."""

    def extra(self, suffix: str) -> str:
        """Another key in the same slot, for primitives that need more than three."""
        return f"{self.base}:{suffix}"


def index_key(namespace: str, job_tag: str) -> str:
    """The index key (:mod:`lockworker.model.index`) of ``namespace`` in the slot of a
    job whose hash tag (its escaped id) is ``job_tag``."""
    return f"{PREFIX}:index:{escape(namespace)}:{{{same_slot_tag(job_tag)}}}"


@functools.lru_cache(maxsize=64)
def all_index_keys(namespace: str) -> tuple[str, ...]:
    """Every index key ``namespace`` can have: one per slot, in slot order (kept for
    the namespaces read last: a view reads each several times)."""
    head = index_head(namespace)
    return tuple(f"{head}{{{tag}}}" for tag in tags())


def index_head(namespace: str) -> str:
    """What every index key of ``namespace`` starts with: ``head + "{" + tag + "}"``."""
    return f"{PREFIX}:index:{escape(namespace)}:"


def state_pattern(space: Space = Space.JOB, namespace: str | None = None) -> str:
    """A SCAN pattern matching the state keys of ``space`` (and ``namespace``, if given)."""
    ns = "*" if namespace is None else escape(namespace).translate(_GLOB)
    return f"{PREFIX}:{space.value}:{ns}:{{*}}:state"


def parse_state_key(key: str, space: Space = Space.JOB) -> tuple[str, str] | None:
    """``(namespace, name)`` of a state key of ``space``, or None if it is not one."""
    head = f"{PREFIX}:{space.value}:"
    tail = "}:state"
    if not (key.startswith(head) and key.endswith(tail)):
        return None
    ns, sep, name = key[len(head) : -len(tail)].partition(":{")
    if not sep or not ns or not name or "{" in ns or "}" in name:
        return None
    return unescape(ns), unescape(name)
