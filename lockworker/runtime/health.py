"""The readings behind a daemon's probes (``/healthz``, ``/readyz``), apart from any
HTTP: a cached PING of Redis and the daemon's heartbeat and state, judged by the pure
decisions of :mod:`lockworker.model.health`.

Probes come often (Kubernetes every few seconds, each load balancer on its own), so the
PING's answer is kept for :data:`PING_TTL` seconds and one PING at most is in flight:
a probe that comes meanwhile waits for it and takes its answer. The PING's client is
the caller's: give it a short socket timeout and no retries of its own, so a probe
answers within its own timeout (Kubernetes: one second by default).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from lockworker.clock import Clock
from lockworker.model.health import Bounds, Pulse, Verdict, alive, ready

PING_TTL = 1.0
"""Seconds a PING's answer is kept for the next probes."""


class RedisPing:
    """``ping()`` (a client's PING), its answer kept for ``ttl`` seconds."""

    def __init__(self, ping: Callable[[], object], clock: Clock, ttl: float = PING_TTL) -> None:
        self._ping = ping
        self._clock = clock
        self._ttl = ttl
        self._lock = threading.Lock()
        self._answer: tuple[float, Verdict] | None = None
        self.pings = 0
        """PINGs sent so far (for tests and curious operators)."""

    def reading(self) -> Verdict:
        """Whether Redis answered the last PING, sent at most ``ttl`` seconds ago."""
        with self._lock:  # one PING in flight; the others wait for its answer
            answer = self._answer
            if answer is not None and self._clock.monotonic() - answer[0] < self._ttl:
                return answer[1]
            sent_at = self._clock.monotonic()
            self.pings += 1
            try:
                self._ping()
            except Exception as exc:  # any failure of a PING is an unreachable Redis
                said = " ".join(str(exc).split())  # one line, whatever the error says
                verdict = Verdict(False, f"Redis unreachable: {type(exc).__name__}: {said}")
            else:
                verdict = Verdict(True, "Redis answered PING")
            self._answer = (sent_at, verdict)
            return verdict


class Probes:
    """One daemon's liveness and readiness.

    ``pulse``: its heartbeat's (``Heartbeat.pulse``); ``stopping``: whether it was asked
    to stop; ``redis``: the cached PING; ``bounds``: how late is too late. The daemon
    counts as started once :meth:`started` was called (by whoever runs it, when it
    begins to serve or to campaign).
    """

    def __init__(
        self, *, pulse: Callable[[], Pulse], stopping: Callable[[], bool], redis: RedisPing,
        clock: Clock, bounds: Bounds,
    ) -> None:
        self._pulse = pulse
        self._stopping = stopping
        self.redis = redis
        self._clock = clock
        self.bounds = bounds
        self._started = False

    def started(self) -> None:
        """The daemon serves (or campaigns) from now on."""
        self._started = True

    def healthz(self) -> Verdict:
        return alive(self._pulse(), self._clock.monotonic(), self.bounds)

    def readyz(self) -> Verdict:
        stopping = self._stopping()
        # Nothing to ask Redis while stopping or starting: the answer is no anyway.
        redis = self.redis.reading() if self._started and not stopping else Verdict(True, "")
        return ready(self.healthz(), redis, started=self._started, stopping=stopping)
