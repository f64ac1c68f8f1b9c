"""Key names: every key of one job under the worker's namespace and one hash tag.

Layout, for namespace ``digest`` and job ``2026-11-22``::

    lw:digest:{2026-11-22}:lock    the lease: who holds which attempt, with a TTL
    lw:digest:{2026-11-22}:state   status, attempt count, last token; outlives leases
    lw:digest:{2026-11-22}:wake    pub/sub channel that wakes waiting processes

All keys of a job share the hash tag ``{<job id>}``, so Redis Cluster puts them in one
slot and the protocol's scripts and transactions run unchanged there. Whatever
characters the namespace or id contain, the tag is the same for every key of one job,
because the keys differ only after the closing brace.
"""

from __future__ import annotations

from dataclasses import dataclass

from lockworker.errors import InvalidConfig

PREFIX = "lw"
MAX_NAME_LENGTH = 1024


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
    return value


@dataclass(frozen=True)
class JobKeys:
    """The keys of one job (or one lock, leader or semaphore: any named resource)."""

    namespace: str
    job_id: str

    @classmethod
    def of(cls, namespace: str, job_id: str) -> JobKeys:
        """Validated keys for ``job_id`` under ``namespace``."""
        return cls(check_name(namespace, "namespace"), check_name(job_id, "job_id"))

    # Plain properties, not functools.cached_property: before Python 3.12 that takes a
    # lock on every first access, which cost more than the f-strings it saves (the
    # job-cycle benchmark builds keys for every job).
    @property
    def base(self) -> str:
        return f"{PREFIX}:{self.namespace}:{{{self.job_id}}}"

    @property
    def lock(self) -> str:
        return f"{PREFIX}:{self.namespace}:{{{self.job_id}}}:lock"

    @property
    def state(self) -> str:
        return f"{PREFIX}:{self.namespace}:{{{self.job_id}}}:state"

    @property
    def wake(self) -> str:
        return f"{PREFIX}:{self.namespace}:{{{self.job_id}}}:wake"

    def extra(self, suffix: str) -> str:
        """Another key in the same slot, for primitives that need more than three."""
        return f"{self.base}:{suffix}"


def namespace_pattern(namespace: str) -> str:
    """A SCAN pattern matching the state keys of every job in ``namespace``."""
    escaped = "".join("\\" + c if c in "*?[]\\" else c for c in namespace)
    return f"{PREFIX}:{escaped}:{{*}}:state"


def parse_state_key(key: str, namespace: str) -> str | None:
    """The job id of a state key of ``namespace``, or None if it is not one."""
    head = f"{PREFIX}:{namespace}:{{"
    tail = "}:state"
    if key.startswith(head) and key.endswith(tail) and len(key) > len(head) + len(tail):
        return key[len(head) : -len(tail)]
    return None
