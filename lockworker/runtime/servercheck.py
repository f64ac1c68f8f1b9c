"""Reading a server's settings and the connected user's permissions, and judging them
(the verdicts are :mod:`lockworker.model.servercheck`'s).

Used by ``lockworker check`` (every check), by the daemons at start and every
:data:`RECHECK_EVERY` seconds while they run (eviction, persistence, evicted keys,
memory; and, from two readings, memory growth: :class:`Watch`), and by a worker's
first job (permissions: :func:`require_permissions`, before any handler runs). A
cluster is checked master by master, each finding naming its master; a Sentinel
group's client is its master's.

Managed servers often refuse ``CONFIG GET``: the values then come from ``INFO`` (which
reports ``maxmemory_policy``), and a value neither gives is "unknown", never a crash.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from lockworker.clock import Clock, SystemClock
from lockworker.errors import PermissionDenied
from lockworker.model import servercheck as verdicts
from lockworker.model.keys import JobKeys
from lockworker.model.servercheck import Denied, Finding, Status
from lockworker.protocol import permissions
from lockworker.protocol.decode import text
from lockworker.runtime import events

RECHECK_EVERY = 300.0
"""Seconds between a running daemon's checks of the eviction and persistence settings."""
FIRST_RECHECK = 60.0
"""Seconds from a daemon's start to its first recheck: the first memory growth seen."""
CONFIG_NAMES = ("maxmemory", "maxmemory-policy", "appendonly", "appendfsync", "save")
ERRORS = (redis.RedisError, OSError, RedisClusterException)


def address(client: Any) -> str:
    """``host:port`` of a single-server client (its pool's), or ``?``."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", {})
    if "path" in kwargs:
        return str(kwargs["path"])
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"


def masters(client: Any) -> list[tuple[str, redis.Redis]]:
    """Every master behind ``client``: a cluster's primaries by ``host:port``, else the
    client itself."""
    primaries = getattr(client, "get_primaries", None)
    if primaries is None:
        return [(address(client), client)]
    return [(node.name, client.get_redis_connection(node)) for node in primaries()]


def read_config(node: redis.Redis) -> dict[str, str]:
    """The settings of :data:`CONFIG_NAMES` that ``CONFIG GET`` gives (none if refused)."""
    found: dict[str, str] = {}
    for name in CONFIG_NAMES:
        try:
            reply = node.config_get(name)
        except redis.ResponseError:
            return found  # CONFIG renamed away or refused: INFO must do
        found.update({text(k): text(v) for k, v in reply.items()})
    return found


def read_info(node: redis.Redis) -> dict[str, Any]:
    """``INFO`` (its default sections merged), or nothing if refused."""
    try:
        info: dict[str, Any] = node.info()
    except redis.ResponseError:
        return {}
    return info


def settings(node: redis.Redis) -> dict[str, Any]:
    return verdicts.settings(read_config(node), read_info(node))


Readings = dict[str, dict[str, Any]]
"""Each master's :func:`settings`, by ``host:port``."""


def readings(client: Any) -> Readings:
    return {name: settings(node) for name, node in masters(client)}


def settings_findings(client: Any, values: Readings | None = None) -> list[Finding]:
    """Eviction, persistence, evicted keys and memory of every master (what daemons
    check), from ``values`` if already read."""
    found: list[Finding] = []
    for name, v in (readings(client) if values is None else values).items():
        found += [
            verdicts.eviction(v["policy"], v["maxmemory"]).on(name),
            verdicts.persistence(v["appendonly"], v["appendfsync"], v["save"]).on(name),
            verdicts.evicted_keys(v["evicted"]).on(name),
            verdicts.memory_use(v["used"], v["maxmemory"], v["system"]).on(name),
        ]
    return found


def growth_findings(before: Readings, after: Readings, seconds: float) -> list[Finding]:
    """Each master's memory growth between two readings ``seconds`` apart (a master
    that was not read both times is left out)."""
    return [
        verdicts.memory_growth(
            keys_before=before[name]["keys"], keys_after=v["keys"], seconds=seconds,
            used=v["used"], dataset=v["dataset"], maxmemory=v["maxmemory"],
            system=v["system"],
        ).on(name)
        for name, v in after.items() if name in before
    ]


def scripting(node: redis.Redis) -> str | None:
    """None if the server runs a Lua script, else its error."""
    try:
        node.eval("return 1", 0)
    except redis.ResponseError as exc:
        return str(exc)
    return None


def clock_findings(
    nodes: list[tuple[str, redis.Redis]], interval: float, clock: Clock
) -> list[Finding]:
    """Each master's clock rate against this host's over ``interval`` seconds (one
    interval for all of them)."""

    def sample(node: redis.Redis) -> tuple[float, float, float]:
        before = clock.monotonic()
        seconds, micros = node.time()
        return before, seconds + micros / 1e6, clock.monotonic()

    first = [sample(node) for _, node in nodes]
    clock.sleep(interval)
    found = []
    for (name, node), (b1, s1, a1) in zip(nodes, first, strict=True):
        b2, s2, a2 = sample(node)
        found.append(verdicts.clock_rate(s2 - s1, b2 - a1, a2 - b1).on(name))
    return found


def user(client: redis.Redis) -> str | None:
    try:
        return text(client.execute_command("ACL", "WHOAMI"))  # type: ignore[no-untyped-call]
    except ERRORS:
        return None


def subscribe_denied(client: Any, channel: str) -> list[Denied]:
    """Whether the user may SUBSCRIBE to ``channel``: subscribe and leave at once, on a
    connection of its own."""
    pubsub = client.pubsub()
    try:
        pubsub.subscribe(channel)
        for _ in range(3):  # the confirmation, or the refusal
            if pubsub.get_message(timeout=1.0) is not None:
                break
        pubsub.unsubscribe(channel)
    except redis.ResponseError as exc:
        return permissions.refused("SUBSCRIBE", channel, exc)
    finally:
        with contextlib.suppress(*ERRORS):
            pubsub.close()
    return []


def denied(client: Any, keys: JobKeys) -> list[Denied]:
    """Everything of the job protocol the connected user may not do, on ``keys``'
    namespace: the steps' commands, keys and channel, and SUBSCRIBE to it."""
    refusals = permissions.probe(client, keys)
    return refusals + subscribe_denied(client, permissions.probe_keys(keys).wake)


def permission_finding(client: Any, keys: JobKeys) -> Finding:
    return verdicts.permissions(denied(client, keys), user(client))


def require_permissions(client: Any, keys: JobKeys) -> bool:
    """Raise :class:`~lockworker.PermissionDenied` naming the grants the user lacks
    for ``keys``' namespace; nothing else happens (checked before any handler runs).
    True if checked, False if the server could not be asked (try again later)."""
    try:
        finding = permission_finding(client, keys)
    except ERRORS:
        # Not a refusal (no scripting at all, Redis unreachable): the steps themselves
        # report it, naming the step and the job.
        return False
    refuse_if_denied(finding, keys)
    return True


def refuse_if_denied(finding: Finding, keys: JobKeys) -> None:
    """Raise :class:`~lockworker.PermissionDenied` if the permissions ``finding`` is a
    failure, naming the grants (both sides' first-use checks end here)."""
    if finding.status is Status.FAILURE:
        raise PermissionDenied(
            f"Redis {finding.value} may not use what lockworker needs for "
            f"{keys.namespace!r}: {finding.meaning}; grant it: {finding.fix}"
        )


def check_all(
    client: Any, keys: JobKeys, *, replicas: int | None = None,
    clock_interval: float = 1.0, clock: Clock | None = None,
) -> list[Finding]:
    """Every check of every master (``lockworker check``); memory growth is measured
    over the clock's interval (and the checks around it)."""
    clock = clock or SystemClock()
    nodes = masters(client)
    started, before = clock.monotonic(), readings(client)
    found = settings_findings(client, before)
    for name, node in nodes:
        found.append(verdicts.version(before[name]["version"], scripting(node)).on(name))
        found.append(verdicts.replicas(before[name]["replicas"], replicas).on(name))
    found += clock_findings(nodes, clock_interval, clock)
    after = readings(client)
    found += growth_findings(before, after, clock.monotonic() - started)
    found.append(permission_finding(client, keys))
    return found


def log_findings(log: events.EventLog, findings: Iterable[Finding]) -> None:
    """One :data:`~lockworker.runtime.events.SERVER_CHECK` event per finding: ERROR for a
    failure, WARNING for a warning or an unknown, DEBUG when all is well."""
    for f in findings:
        level = {Status.FAILURE: log.error, Status.OK: log.debug}.get(f.status, log.warning)
        measured = {} if f.measure is None else {"measure": round(f.measure, 4)}
        level(events.SERVER_CHECK, check=f.check, status=f.status.value, server=f.server,
              value=f.value, consequence=f.meaning, fix=f.fix, **measured)


class Watch:
    """A daemon's checks of the server's settings: once at start (:meth:`start`
    returns the findings), then every ``every`` seconds in a thread of its own until
    :meth:`stop` (the first recheck sooner, :data:`FIRST_RECHECK`). Each recheck also
    judges the memory growth since the check before. A check that cannot reach the
    server is skipped: the daemon's own steps report that."""

    def __init__(
        self, client: Any, log: events.EventLog, clock: Clock, every: float | None = None,
    ) -> None:
        self.client = client
        self.log = log
        self.clock = clock
        self.every = RECHECK_EVERY if every is None else every
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: tuple[float, Readings] | None = None

    def check(self) -> list[Finding]:
        try:
            now, values = self.clock.monotonic(), readings(self.client)
        except ERRORS:
            return []
        found = settings_findings(self.client, values)
        if self._last is not None:
            found += growth_findings(self._last[1], values, now - self._last[0])
        self._last = (now, values)
        log_findings(self.log, found)
        return found

    def start(self) -> list[Finding]:
        found = self.check()
        self._thread = threading.Thread(
            target=self._repeat, name="lockworker-servercheck", daemon=True
        )
        self._thread.start()
        return found

    def _repeat(self) -> None:
        wait = min(self.every, FIRST_RECHECK)
        while not self.clock.wait(self._stop, wait):
            self.check()
            wait = self.every

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()


def watching(client: Any, log: events.EventLog, clock: Clock) -> Callable[[], None]:
    """Start a :class:`Watch` and return what stops it. Daemons pass the real clock,
    whatever clock they were given: the repeat is a schedule of checks, not a lease, and
    a fake clock that a test steps by hand must not be moved by a thread's long wait."""
    watch = Watch(client, log, clock)
    watch.start()
    return watch.stop
