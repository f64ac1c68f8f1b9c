"""Checks of constructor arguments shared by every product, and the default owner id.

A leaf module: each check raises :class:`~lockworker.errors.InvalidConfig` naming the
argument, the value given and what was expected, before any Redis call.

Every numeric setting goes through :func:`number`, so they all refuse the same things:
booleans (``True`` is an ``int`` to Python, never a duration to lockworker), values
that are not real numbers (strings, ``None`` where None means nothing), NaN, the
infinities (no setting has a use for them: a wait for ever is ``timeout=None``), and
values out of the setting's range, including the absolute caps :data:`MAX_SECONDS`
and :data:`MAX_COUNT`, past which timers and Redis expiry times overflow.
"""

from __future__ import annotations

import inspect
import math
import numbers
import operator
import os
import random
import secrets
import socket
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from functools import partial
from typing import Any, TypeAlias, cast

import tenacity

from lockworker import redispy
from lockworker.errors import InvalidConfig

MAX_SECONDS = 1e9
"""The longest duration a setting accepts (about 31 years). Longer ones overflow the
waits of :mod:`threading` and Redis expiry times, so they are refused up front."""

MAX_COUNT = 2**53
"""The largest count a setting accepts: the largest integer Redis's Lua counts exactly."""


_HOST = socket.gethostname()


def default_owner() -> str:
    """``host:pid:random``: unique per object, readable in logs and status."""
    return f"{_HOST}:{os.getpid()}:{secrets.token_hex(4)}"


def this_process() -> tuple[str, int]:
    """``(host name, pid)`` of the calling process (the pid read now: a forked child
    has its own)."""
    return _HOST, os.getpid()


def _bound(limit: float) -> str:
    return str(int(limit)) if float(limit).is_integer() else repr(limit)


def _shown(value: object) -> str:
    """``repr(value)``, cut short: a message must stay one readable line."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _expected(
    *, minimum: float, strict_min: bool, maximum: float | None, strict_max: bool,
    integer: bool, unit: str, allow_none: bool,
) -> str:
    """What :func:`number` asked for, in words: ``a finite number of seconds >= 0``."""
    kind = "an int" if integer else "a finite number"
    if unit and not integer:
        kind += f" of {unit}"
    text = f"{kind} {'>' if strict_min else '>='} {_bound(minimum)}"
    if maximum is not None:
        text += f" and {'<' if strict_max else '<='} {_bound(maximum)}"
    return f"None or {text}" if allow_none else text


def number(
    value: object,
    name: str,
    *,
    minimum: float = 0.0,
    strict_min: bool = False,
    maximum: float | None = None,
    strict_max: bool = False,
    integer: bool = False,
    unit: str = "seconds",
    allow_none: bool = False,
    why: str = "",
) -> float | int | None:
    """``value`` checked as the numeric setting ``name``: the one check they all use.

    Accepted: a real number (an integer with ``integer``; never a bool), finite, at
    least ``minimum`` (above it with ``strict_min``), at most ``maximum`` (below it with
    ``strict_max``) and never above :data:`MAX_SECONDS` (:data:`MAX_COUNT` for an
    integer); ``None`` too with ``allow_none``. Returns it as a float (an int with
    ``integer``; None for None). Anything else raises
    :class:`~lockworker.errors.InvalidConfig`, e.g. ``retry_delay must be a finite
    number of seconds >= 0, got nan``.
    """
    if value is None and allow_none:
        return None

    def refused() -> InvalidConfig:
        # Built only when refusing: a valid setting (every Lock made per use) pays
        # for the check, not for the sentence.
        expected = _expected(
            minimum=minimum, strict_min=strict_min, maximum=maximum, strict_max=strict_max,
            integer=integer, unit=unit, allow_none=allow_none,
        )
        reason = f" ({why})" if why else ""
        return InvalidConfig(f"{name} must be {expected}, got {_shown(value)}{reason}")

    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind):
        raise refused()
    checked: float | int
    try:
        checked = operator.index(value) if integer else float(value)  # type: ignore[arg-type]
    except (OverflowError, TypeError, ValueError):
        raise refused() from None
    if not integer and not math.isfinite(checked):
        raise refused()
    low_ok = checked > minimum if strict_min else checked >= minimum
    high_ok = maximum is None or (checked < maximum if strict_max else checked <= maximum)
    if not (low_ok and high_ok):
        raise refused()
    cap = MAX_COUNT if integer else MAX_SECONDS
    if checked > cap:
        unit_text = f" {unit}" if unit and not integer else ""
        raise InvalidConfig(
            f"{name} must be at most {_bound(cap)}{unit_text}, got {_shown(value)}"
        )
    return checked


def seconds(value: object, name: str, *, positive: bool = True) -> float:
    """A duration: a finite number of seconds > 0 (>= 0 unless ``positive``)."""
    return cast(float, number(value, name, strict_min=positive))


MIN_LEASE = 0.1
"""The shortest lease accepted, in seconds. A lease must outlast the request that
grants it, the drift allowance (:mod:`lockworker.runtime.lease`) and a renewal sent at a third
of it; below this, a lease is as good as lost when granted and a job would run again
and again."""


def lease(value: object, name: str) -> float:
    """A lease (``ttl``, ``lock_timeout``): seconds, at least :data:`MIN_LEASE`."""
    return cast(float, number(value, name, minimum=MIN_LEASE, why=_LEASE_WHY))


_LEASE_WHY = "a lease must outlast a round trip and a renewal at a third of it"


def optional_seconds(value: object, name: str) -> float | None:
    """A timeout: None (no limit) or a finite number of seconds >= 0."""
    return cast("float | None", number(value, name, allow_none=True))


def flag(value: object, name: str) -> bool:
    """A switch: exactly True or False (``1`` or ``"yes"`` is refused, not read as one)."""
    if not isinstance(value, bool):
        raise InvalidConfig(f"{name} must be True or False, got {_shown(value)}")
    return value


def acquire_wait(blocking: object, timeout: object) -> tuple[bool, float | None]:
    """An acquisition's ``blocking`` and ``timeout``: a switch, and None or seconds >= 0.

    A ``timeout`` with ``blocking=False`` is refused rather than ignored (a try that
    never waits cannot honour it), as :meth:`threading.Lock.acquire` refuses it.
    """
    wait = flag(blocking, "blocking")
    seconds_ = optional_seconds(timeout, "timeout")
    if not wait and seconds_ is not None:
        raise InvalidConfig(
            f"timeout must be None when blocking=False (a non-blocking acquire never "
            f"waits), got {_shown(timeout)}"
        )
    return wait, seconds_


def count(value: object, name: str, *, minimum: int = 1) -> int:
    """A count: an int >= ``minimum`` (1 by default)."""
    return cast(int, number(value, name, minimum=minimum, integer=True))


def positive(value: object, name: str, *, integer: bool = False) -> float:
    """``value`` as a float if it is a finite number > 0 (an int >= 1 with ``integer``)."""
    if integer:
        return float(count(value, name))
    return seconds(value, name)


def port(value: object, name: str) -> int:
    """A TCP port to listen on: an int from 1 to 65535."""
    return cast(int, number(value, name, minimum=1, maximum=65535, integer=True))


JOB_STATES = ("pending", "held", "done", "gave_up")
"""The states a job is listed and reset by (``held``: pending under a live lease)."""


def job_state(value: object, name: str = "state") -> str:
    """``value`` if it is one of :data:`JOB_STATES`."""
    return choice(value, name, JOB_STATES)


def choice(value: object, name: str, options: tuple[str, ...]) -> str:
    """``value`` if it is one of the words ``options`` (a policy's name)."""
    if not isinstance(value, str) or value not in options:
        raise InvalidConfig(f"{name} must be one of {', '.join(options)}, got {_shown(value)}")
    return value


def local_durability(value: object, product: str, instead: str) -> str:
    """``durability`` of a product that has only the local form: ``"local"``, or an
    error naming the argument, the value, why not and what to use instead."""
    if value != "local":
        raise InvalidConfig(
            f"{product} supports durability='local' only ({instead}), got durability={value!r}"
        )
    return "local"


def client(
    value: object, argument: str = "client", *, asyncio: bool = False, pubsub: bool = False,
    twin: str = "",
) -> Any:
    """A redis-py client of the right kind, refused before any Redis call otherwise.

    A sync product (``asyncio=False``) refuses a ``redis.asyncio`` client, whose calls
    return coroutines it would never await; an asyncio product refuses a sync client,
    whose blocking calls would stall the event loop. ``pubsub``: the client must also
    offer pub/sub (the wake-ups). ``twin`` names the product on the other side, for
    the message (``Worker`` -> ``lockworker.aio.Worker``).
    """
    redispy.require(value, argument)  # a cluster client on too old a redis-py, named first
    kind = "redis.asyncio" if asyncio else "redis.Redis"
    if not hasattr(value, "register_script") or (pubsub and not hasattr(value, "pubsub")):
        raise InvalidConfig(f"{argument} must be a {kind} client, got {_shown(value)}")
    named = f"a {type(value).__module__}.{type(value).__qualname__}"
    awaited = inspect.iscoroutinefunction(getattr(type(value), "execute_command", None))
    if asyncio and not awaited:
        hint = f"; for a redis.Redis client use lockworker.{twin}" if twin else ""
        raise InvalidConfig(
            f"{argument} must be a redis.asyncio client (redis.asyncio.Redis or "
            f"RedisCluster), got {named}{hint}"
        )
    if not asyncio and awaited:
        hint = f"lockworker.aio.{twin}, or " if twin else ""
        raise InvalidConfig(
            f"{argument} must be a redis.Redis client, got {named} (an asyncio client): "
            f"use {hint}a redis.Redis client"
        )
    return value


RetryDelay: TypeAlias = "float | tenacity.wait.wait_base | Callable[[int], float] | None"
"""What ``retry_delay`` accepts (see :func:`retry_delay`)."""

RetrySchedule = Callable[[int], float]
"""A job's retry schedule: the failed attempt's number (1 for the first) to the seconds
until the job's next attempt may start."""

class JitterWait(tenacity.wait.wait_base):
    """A tenacity wait of ``low`` to ``high`` seconds at random, drawn from the operating
    system's generator: unlike ``tenacity.wait_random``, never from the global
    ``random``, which an application may seed for its own reproducible sequence and
    which a retry in one of lockworker's threads would otherwise move; and unlike a
    private ``random.Random``, different in each process a fork makes, so that forked
    workers spread their retries too."""

    def __init__(self, low: float, high: float) -> None:
        self.low, self.high = low, high

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        return _SYSTEM_RANDOM.uniform(self.low, self.high)


_SYSTEM_RANDOM = random.SystemRandom()

DEFAULT_RETRY_DELAY = tenacity.wait_chain(
    tenacity.wait_none(), tenacity.wait_exponential(max=60) + JitterWait(0, 1)
)
"""The default ``retry_delay``: the first failure hands the job over at once (another
process takes it: the failure may be its host's), then 2, 4, 8, ... seconds, at most 60,
each plus up to a second at random, so jobs that failed together do not all come back
together."""


def retry_delay(value: object, name: str = "retry_delay") -> RetrySchedule:
    """A retry schedule: None (:data:`DEFAULT_RETRY_DELAY`), seconds >= 0 (the same
    delay after every failure), a tenacity wait strategy (``wait_exponential(...)``,
    ``wait_random_exponential(...)``, ``wait_chain(...)``, ...: it is asked with the failed
    attempt's number as ``attempt_number``) or a function of the failed attempt's number
    returning seconds. A strategy or function is tried once here, on attempt 1; what it
    returns later is checked by :func:`scheduled_delay`."""
    if value is None:
        value = DEFAULT_RETRY_DELAY
    if isinstance(value, tenacity.wait.wait_base):
        schedule: RetrySchedule = partial(_tenacity_delay, value)
    elif callable(value) and not isinstance(value, (bool, numbers.Real)):
        try:
            inspect.signature(value).bind(1)
        except (TypeError, ValueError) as exc:
            if not isinstance(exc, ValueError):  # a builtin without a signature: try it
                raise InvalidConfig(
                    f"{name} must be seconds, a tenacity wait strategy or a function of "
                    f"the failed attempt's number, got {_shown(value)}, which cannot be "
                    f"called with one argument"
                ) from None
        schedule = cast(RetrySchedule, value)
    else:
        try:
            fixed = seconds(value, name, positive=False)
        except InvalidConfig as exc:
            raise InvalidConfig(
                f"{exc} (or a tenacity wait strategy, or a function of the failed "
                f"attempt's number returning seconds)"
            ) from None
        return lambda _attempt: fixed
    scheduled_delay(schedule, 1, name)
    return schedule


def _tenacity_delay(wait: Any, attempt: int) -> float:
    state = tenacity.RetryCallState(None, None, (), {})  # type: ignore[arg-type]
    state.attempt_number = attempt
    return cast(float, wait(state))


def scheduled_delay(schedule: RetrySchedule, attempt: int, name: str = "retry_delay") -> float:
    """The seconds ``schedule`` gives after failed attempt ``attempt``, checked:
    InvalidConfig if it raised or returned anything but a number of seconds >= 0."""
    try:
        delay = schedule(attempt)
    except Exception as exc:
        raise InvalidConfig(
            f"{name} failed for attempt {attempt}: {exc!r} (it must return seconds >= 0)"
        ) from exc
    return seconds(delay, f"{name} for attempt {attempt}", positive=False)


def retry_after(value: object) -> float:
    """``Retry(after=...)``: seconds >= 0."""
    return seconds(value, "Retry(after=...)", positive=False)


def give_up_on(value: object, name: str = "give_up_on") -> tuple[type[BaseException], ...]:
    """Exception types that give a job up at once: an exception class or a tuple of them
    (``()``, the default, none)."""
    types = value if isinstance(value, tuple) else (value,)
    bad = [t for t in types if not (isinstance(t, type) and issubclass(t, BaseException))]
    if bad:
        raise InvalidConfig(
            f"{name} must be an exception class or a tuple of them, got {_shown(value)}"
        )
    return cast("tuple[type[BaseException], ...]", types)


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def due(delay: object, at: object) -> tuple[int, bool] | None:
    """When a delayed job is due (``submit(..., delay=, at=)``): None if neither is
    given; else ``(ms, absolute)``: ``delay`` as whole ms from the server's now (seconds
    >= 0, rounded up, so never early), or ``at`` (an aware datetime) as epoch ms, rounded
    up. Both at once are refused: one due time, said once."""
    if delay is not None and at is not None:
        raise InvalidConfig(
            f"give delay or at, not both, got delay={_shown(delay)} and at={_shown(at)}"
        )
    if delay is not None:
        return -(-round(seconds(delay, "delay", positive=False) * 1e6) // 1000), False
    if at is None:
        return None
    if not isinstance(at, datetime) or at.utcoffset() is None:
        raise InvalidConfig(
            f"at must be an aware datetime (with a time zone, e.g. timezone.utc), got "
            f"{_shown(at)}"
        )
    return max(0, -(-((at - _EPOCH) // timedelta(microseconds=1)) // 1000)), True
