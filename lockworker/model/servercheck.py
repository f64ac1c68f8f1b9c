"""What a server's settings and permissions mean for lockworker's guarantees: pure verdicts.

Each function here takes plain values read from a server (``CONFIG GET``, ``INFO``,
``TIME``, a permission probe) and returns one :class:`Finding`: ok, warning, failure or
unknown, what it means, and how to fix it. Reading the values is
:mod:`lockworker.runtime.servercheck`'s; printing them is the CLI's (``lockworker
check``). No I/O here, so every verdict is tested with plain values.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from lockworker.model.footprint import size


class Status(str, enum.Enum):
    OK = "ok"
    WARNING = "warning"
    FAILURE = "failure"
    UNKNOWN = "unknown"
    """The server answered neither way (a managed server refusing CONFIG and INFO)."""


@dataclass(frozen=True)
class Finding:
    """One check of one server: its verdict, the value seen, what it means, the fix."""

    check: str
    status: Status
    value: str
    meaning: str
    fix: str = ""
    server: str = ""
    measure: float | None = None
    """The figure judged, where a metric shows it (``memory``: used / limit)."""

    def on(self, server: str) -> Finding:
        return Finding(self.check, self.status, self.value, self.meaning, self.fix, server,
                       self.measure)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "status": self.status.value}


EVICTION = "eviction"
PERSISTENCE = "persistence"
VERSION = "version"
EVICTED_KEYS = "evicted_keys"
CLOCK = "clock"
REPLICAS = "replicas"
PERMISSIONS = "permissions"
MEMORY = "memory"
MEMORY_GROWTH = "memory_growth"
CHECKS = (EVICTION, PERSISTENCE, VERSION, EVICTED_KEYS, CLOCK, REPLICAS, PERMISSIONS,
          MEMORY, MEMORY_GROWTH)

MIN_VERSION = (6, 2)
"""The oldest server the protocol is run against: Lua scripting with effect
replication, ``SET ... PX``, ACL users, and the pub/sub channel permissions of Redis 7
where present."""
MEMORY_HIGH = 0.8
"""The share of the memory limit past which ``memory`` warns."""
DAY = 86400.0
"""The horizon of ``memory_growth``: the workers' default retention."""
CLOCK_TOLERANCE = 0.01
"""Leases are judged by each side's own clock: the guarantees assume rates within 1 %."""

_NOEVICTION_FIX = (
    "set maxmemory-policy noeviction (redis.conf, or CONFIG SET maxmemory-policy "
    "noeviction; on a managed service, its parameter group's maxmemory-policy), and "
    "keep the application's cache on another server or database instance"
)


def _unknown(check: str, what: str) -> Finding:
    return Finding(check, Status.UNKNOWN, "unknown", f"the server reports neither {what}",
                   "ask the service which value it uses (CONFIG GET and INFO were refused)")


def eviction(policy: str | None, maxmemory: int | None) -> Finding:
    """``maxmemory-policy`` and ``maxmemory``: anything but ``noeviction`` under a memory
    limit deletes lockworker's keys under pressure (a failure)."""
    if policy is None:
        return _unknown(EVICTION, "maxmemory-policy (CONFIG GET) nor INFO memory")
    value = f"maxmemory-policy={policy}" + (
        "" if maxmemory is None else f", maxmemory={maxmemory}"
    )
    if policy == "noeviction":
        return Finding(EVICTION, Status.OK, value,
                       "nothing is evicted: under memory pressure writes are refused instead")
    if maxmemory == 0:
        return Finding(EVICTION, Status.OK, value,
                       "no memory limit, so nothing is evicted (the policy would apply "
                       "if a limit were set)", "set maxmemory-policy noeviction as well")
    if policy.startswith("volatile"):
        meaning = (
            "under memory pressure the server deletes keys with a time to live first: "
            "leases (a second holder enters while the first still runs) and DONE "
            "records (finished jobs run again)"
        )
    else:
        meaning = (
            "under memory pressure the server deletes any key, lockworker's included: "
            "DONE records (finished jobs run again), leases (a second holder enters "
            "while the first still runs), attempt counts and tokens"
        )
    return Finding(EVICTION, Status.FAILURE, value, meaning, _NOEVICTION_FIX)


def persistence(appendonly: str | None, appendfsync: str | None, save: str | None) -> Finding:
    """``appendonly``, ``appendfsync`` and ``save``: what a restart of the server loses."""
    if appendonly is None:
        return _unknown(PERSISTENCE, "appendonly (CONFIG GET) nor INFO persistence")
    fix = "set appendonly yes and appendfsync everysec (or always)"
    if appendonly == "yes":
        value = f"appendonly=yes, appendfsync={appendfsync or 'unknown'}"
        if appendfsync == "always":
            return Finding(PERSISTENCE, Status.OK, value, "every step is on disk before it "
                           "is acknowledged: a restart loses nothing")
        if appendfsync is None:
            return Finding(PERSISTENCE, Status.OK, value, "every step is appended to a "
                           "log on disk; how often it is synced is not reported",
                           "check that appendfsync is everysec or always")
        if appendfsync == "everysec":
            return Finding(PERSISTENCE, Status.OK, value, "a crash of the server's host "
                           "may lose the last second of steps (a job finished in it may "
                           "run again); a restart of the server alone loses nothing")
        return Finding(PERSISTENCE, Status.WARNING, value, "the operating system decides "
                       "when steps reach the disk: a crash of the host may lose the last "
                       "tens of seconds (finished jobs run again, leases vanish)",
                       "set appendfsync everysec")
    if save is None:
        return Finding(PERSISTENCE, Status.WARNING, "appendonly=no", "no append-only log: "
                       "a restart loses every step since the last snapshot, if snapshots "
                       "are taken at all (finished jobs run again, held leases vanish)", fix)
    snapshots = save.strip()
    if snapshots:
        return Finding(PERSISTENCE, Status.WARNING, f"appendonly=no, save={snapshots!r}",
                       "RDB snapshots only: a restart loses every step since the last "
                       "snapshot (jobs finished since then run again, held leases vanish "
                       "so a second holder may enter)", fix)
    return Finding(PERSISTENCE, Status.WARNING, "appendonly=no, save=''",
                   "nothing is persisted: a restart loses every lease and DONE record "
                   "(every finished job still within its retention may run again)", fix)


def parse_version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def version(server_version: str | None, scripting: str | None) -> Finding:
    """The server's version, and whether it runs Lua scripts (``scripting``: None if it
    does, else the server's error)."""
    if server_version is None:
        return _unknown(VERSION, "its version")
    value = f"version {server_version}"
    if scripting is not None:
        return Finding(VERSION, Status.FAILURE, value,
                       f"the server refuses Lua scripts, which every step is: {scripting}",
                       "use a server that allows EVAL/EVALSHA (or grant +@scripting)")
    if parse_version(server_version) < MIN_VERSION:
        wanted = ".".join(map(str, MIN_VERSION))
        return Finding(VERSION, Status.FAILURE, value,
                       f"older than {wanted}, which the protocol needs",
                       f"upgrade to {wanted} or later")
    return Finding(VERSION, Status.OK, value, "runs Lua scripts, as every step needs")


def evicted_keys(count: int | None) -> Finding:
    """``INFO stats`` ``evicted_keys``: keys the server deleted for memory since it started."""
    if count is None:
        return _unknown(EVICTED_KEYS, "evicted_keys (INFO stats)")
    if count == 0:
        return Finding(EVICTED_KEYS, Status.OK, "0", "no key was evicted since the server started")
    return Finding(EVICTED_KEYS, Status.WARNING, str(count),
                   f"the server evicted {count} keys since it started: if lockworker's were "
                   "among them, finished jobs may have run again and leases may have had two "
                   "holders", _NOEVICTION_FIX)


def clock_rate(server_elapsed: float, local_low: float, local_high: float) -> Finding:
    """The server's clock against this host's over one interval: the server's elapsed
    time (``TIME`` twice) and this host's, bounded by the round trips (``local_low``
    from the end of the first to the start of the second, ``local_high`` from the start
    of the first to the end of the second)."""
    low, high = server_elapsed / local_high, server_elapsed / local_low
    value = f"rate {low:.4f}..{high:.4f} over {local_low:.2f} s"
    if low >= 1 - CLOCK_TOLERANCE and high <= 1 + CLOCK_TOLERANCE:
        return Finding(CLOCK, Status.OK, value, "the server's clock runs at this host's "
                       "rate within 1 %, as leases assume")
    if high < 1 - CLOCK_TOLERANCE or low > 1 + CLOCK_TOLERANCE:
        return Finding(CLOCK, Status.FAILURE, value, "the server's clock and this host's "
                       "run at rates more than 1 % apart: a lease may end on the server "
                       "before its holder's own clock says so",
                       "run NTP (chrony) on both hosts; never step or slew clocks faster")
    return Finding(CLOCK, Status.UNKNOWN, value, "the round trips were too slow to tell "
                   "whether the rates agree within 1 %", "run the check again, or for longer")


def replicas(connected: int | None, wanted: int | None) -> Finding:
    """Replicas connected to a master (``INFO replication``), against the ``replicas``
    that ``durability="replicated"`` waits for (``wanted``; None: not asked)."""
    if connected is None:
        return _unknown(REPLICAS, "connected_slaves (INFO replication)")
    value = f"{connected} connected"
    if wanted is None:
        return Finding(REPLICAS, Status.OK, value,
                       f"durability='replicated' can wait for up to {connected} replicas")
    if connected >= wanted:
        return Finding(REPLICAS, Status.OK, value,
                       f"durability='replicated' with replicas={wanted} can be met")
    return Finding(REPLICAS, Status.FAILURE, value,
                   f"durability='replicated' with replicas={wanted} cannot be met: every "
                   "step would be retried until it gives up", f"connect {wanted} replicas "
                   "to every master, or lower replicas")


@dataclass(frozen=True)
class Denied:
    """One thing the connected user may not do: the command, what on, the server's words."""

    command: str
    target: str
    error: str


def grant(denied: Denied, user: str = "<user>") -> str:
    """The ACL rule that allows ``denied``, for ``ACL SETUSER``: a channel pattern, a key
    pattern, or the command."""
    error = denied.error.lower()
    if "channel" in error:
        return f"&{_pattern(denied.target)}"
    if "key" in error:
        return f"~{_pattern(denied.target)}"
    return f"+{denied.command.lower()}"


def _pattern(name: str) -> str:
    """``lw:*`` for a lockworker key or channel (the pattern the deployment docs give)."""
    return "lw:*" if name.startswith("lw:") else name


def permissions(denied: Iterable[Denied], user: str | None) -> Finding:
    """What a probe of the protocol's commands, keys and channels found refused."""
    refused = list(denied)
    who = user or "the connected user"
    if not refused:
        return Finding(PERMISSIONS, Status.OK, f"user {who}",
                       "may run every command, key and channel the protocol needs")
    grants = sorted({grant(d) for d in refused})
    what = "; ".join(f"{d.command} {d.target}: {d.error}".strip() for d in refused)
    return Finding(PERMISSIONS, Status.FAILURE, f"user {who}",
                   f"refused: {what}",
                   f"ACL SETUSER {user or '<user>'} {' '.join(grants)}")


_MEMORY_FIX = (
    "see what holds it (lockworker status: keys and bytes per namespace by kind); raise "
    "maxmemory, or shorten the workers' retention (a finished job's records are kept "
    "that long: a day by default)"
)


def memory_limit(maxmemory: int | None, system: int | None) -> tuple[int, str] | None:
    """What used memory is judged against: ``maxmemory`` if set, else the host's memory
    (``total_system_memory``), else None."""
    if maxmemory:
        return maxmemory, "maxmemory"
    if maxmemory == 0 and system:
        return system, "host memory"
    return None


def memory_use(used: int | None, maxmemory: int | None, system: int | None) -> Finding:
    """``used_memory`` against the limit: a warning past :data:`MEMORY_HIGH` of it."""
    if used is None:
        return _unknown(MEMORY, "used_memory (INFO memory)")
    limit = memory_limit(maxmemory, system)
    if limit is None:
        return Finding(MEMORY, Status.UNKNOWN, f"used {size(used)}", "no maxmemory is "
                       "known and the host's memory is not reported: how much more fits "
                       "is unknown", "ask the service for its memory limit")
    bound, what = limit
    ratio = used / bound
    value = f"used {size(used)} of {size(bound)} {what} ({ratio:.0%})" + (
        ", no maxmemory set" if what == "host memory" else "")
    if ratio > MEMORY_HIGH:
        return Finding(MEMORY, Status.WARNING, value, f"more than {MEMORY_HIGH:.0%} of "
                       f"the {what} is used: once it is full, every step is refused (or, "
                       "under an eviction policy, keys are deleted)", _MEMORY_FIX,
                       measure=ratio)
    return Finding(MEMORY, Status.OK, value, f"below {MEMORY_HIGH:.0%} of the {what}",
                   measure=ratio)


def memory_growth(
    *, keys_before: int | None, keys_after: int | None, seconds: float, used: int | None,
    dataset: int | None, maxmemory: int | None, system: int | None,
) -> Finding:
    """Whether a day (:data:`DAY`) more at the rate the key count grew over ``seconds``
    would fit: each new key at the dataset's mean bytes a key (``used_memory_dataset``
    / keys), added to what is used now. Key counts, not ``used_memory``, measure the
    rate: they move only with data, not with clients' buffers. An upper bound while old
    records are not yet expiring (the first ``retention`` of a new load); at a steady
    state they expire as fast as they come, the count stops growing, and so does this."""
    if keys_before is None or keys_after is None or used is None or seconds <= 0:
        return _unknown(MEMORY_GROWTH, "key counts (INFO keyspace) nor used_memory")
    added = keys_after - keys_before
    if added <= 0:
        return Finding(MEMORY_GROWTH, Status.OK, f"{added:+d} keys in {_secs(seconds)}",
                       "the key count is not growing: records expire as fast as they come")
    per_key = (dataset if dataset else used) / keys_after
    day = added / seconds * DAY * per_key
    value = (f"{added:+d} keys in {_secs(seconds)} at {size(per_key)} a key: a day adds "
             f"{size(day)} to {size(used)}")
    limit = memory_limit(maxmemory, system)
    if limit is None:
        return Finding(MEMORY_GROWTH, Status.UNKNOWN, value, "no maxmemory is known and "
                       "the host's memory is not reported: whether that fits is unknown",
                       "ask the service for its memory limit")
    bound, what = limit
    if used + day > bound:
        return Finding(MEMORY_GROWTH, Status.WARNING, f"{value}, over {size(bound)} {what}",
                       "a day at this rate would not fit: finished jobs' records are kept "
                       "for the workers' retention, so the server fills before the first "
                       "of them expire", _MEMORY_FIX + ", or measure over a longer time",
                       measure=(used + day) / bound)
    return Finding(MEMORY_GROWTH, Status.OK, f"{value}, within {size(bound)} {what}",
                   "a day at this rate fits", measure=(used + day) / bound)


def _secs(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"


def worst(findings: Iterable[Finding]) -> Status:
    """The least safe status among ``findings`` (failure, unknown, warning, ok)."""
    order = (Status.OK, Status.WARNING, Status.UNKNOWN, Status.FAILURE)
    return max((f.status for f in findings), key=order.index, default=Status.OK)


def settings(config: Mapping[str, str], info: Mapping[str, Any]) -> dict[str, Any]:
    """The values the checks read, from ``CONFIG GET`` (``config``, empty if refused),
    else ``INFO`` (``info``: its sections merged, empty if refused)."""

    def number(raw: Any) -> int | None:
        try:
            return int(raw)
        except (TypeError, ValueError):
            return None

    aof = config.get("appendonly")
    if aof is None and "aof_enabled" in info:
        aof = "yes" if str(info["aof_enabled"]) == "1" else "no"
    return {
        "policy": config.get("maxmemory-policy") or info.get("maxmemory_policy"),
        "maxmemory": number(config.get("maxmemory", info.get("maxmemory"))),
        "appendonly": aof,
        "appendfsync": config.get("appendfsync"),
        "save": config.get("save"),
        "evicted": number(info.get("evicted_keys")),
        "version": info.get("valkey_version") or info.get("redis_version"),
        "replicas": number(info.get("connected_slaves")),
        "used": number(info.get("used_memory")),
        "dataset": number(info.get("used_memory_dataset")),
        "system": number(info.get("total_system_memory")),
        "keys": keyspace(info),
    }


def keyspace(info: Mapping[str, Any]) -> int | None:
    """The keys of every database (``INFO keyspace``: ``db0: {keys: ...}``); 0 when
    INFO shows none, None if INFO was refused."""
    if not info:
        return None
    return sum(int(v.get("keys", 0)) for k, v in info.items()
               if k.startswith("db") and k[2:].isdigit() and isinstance(v, Mapping))
