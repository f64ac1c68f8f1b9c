"""The server of section 10 (:mod:`benchmarks.views`): many finished jobs, a few held
and given up, several namespaces.

- ``jobs`` finished jobs in :data:`NAMESPACE`: their DONE state keys written directly,
  in pipelines of :data:`BATCH` commands sent as raw RESP over one socket (the fill is
  set-up, not a figure), each ``SET <state key> <value> PX <ttl>`` with the key
  :class:`~lockworker.model.keys.JobKeys` names and the value and time to live a clean
  completion writes (:class:`~lockworker.model.codec.StateValue`, rebuilt from one job
  first completed through the protocol, and checked against it): one key per finished
  job, as the protocol leaves it;
- :data:`HELD` jobs held through the protocol (``ScriptProtocol.acquire``, a lease of
  an hour) and :data:`GAVE_UP` given up through it (an attempt failed with
  ``max_attempts=1``), so the index holds them as the workers' steps write it;
- :data:`OTHERS`: more namespaces with a few jobs of each state, so that the views over
  every namespace have several to read; every namespace registered, as a worker's first
  registration registers it.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import redis

from lockworker.model.codec import Holder, StateValue, decode_state, new_run
from lockworker.model.keys import JobKeys
from lockworker.model.registry import namespace as registered_namespace
from lockworker.model.state import Grant, JobStatus, Settle
from lockworker.protocol import ScriptProtocol
from lockworker.protocol.registry import register
from lockworker.serving.settings import DONE_RETENTION
from lockworker.testing.server import RedisServer

NAMESPACE = "orders"
OTHERS = ("billing", "mail")
HELD = 1_000
GAVE_UP = 10
OTHER_JOBS = (20, 5, 2)
"""Finished, held and given-up jobs of each of :data:`OTHERS`."""
BATCH = 10_000
LEASE_MS = 3_600_000
RETENTION_MS = 86_400_000
DONE_MS = int(DONE_RETENTION * 1000)


def done_value(client: redis.Redis) -> tuple[StateValue, int]:
    """The DONE value a clean completion writes, and its state key's time to live (ms),
    from one job completed through the protocol (then deleted)."""
    protocol = ScriptProtocol(client)
    keys = JobKeys("bench-views-probe", "probe")
    who = Holder("bench-views", new_run())
    grant = protocol.acquire(keys, who, LEASE_MS, 5, RETENTION_MS)
    assert isinstance(grant, Grant)
    done = protocol.complete(keys, who.value(grant.token, grant.attempt), DONE_MS)
    assert done is Settle.DONE
    raw = client.get(keys.state)
    ttl = int(client.pttl(keys.state))
    text = raw.decode() if isinstance(raw, bytes) else ""
    value = decode_state(text) if text else None
    if value is None or value.status is not JobStatus.DONE or value.encode() != text:
        raise RuntimeError(f"a DONE state the codec does not rebuild: {raw!r}")
    if not DONE_MS - 5_000 < ttl <= DONE_MS:
        raise RuntimeError(f"a DONE state kept for {ttl} ms, not done_retention's {DONE_MS}")
    if client.exists(keys.history):
        raise RuntimeError("a clean completion kept a history key: the fill would be short")
    client.delete(keys.state, keys.lock, keys.history, keys.index)
    return value, DONE_MS


def _resp(*parts: bytes) -> bytes:
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        out.append(b"$%d\r\n%s\r\n" % (len(part), part))
    return b"".join(out)


def fill(port: int, namespace: str, jobs: int, template: StateValue, ttl_ms: int) -> None:
    """``jobs`` DONE state keys, ``done-<n>``, in pipelines of :data:`BATCH` commands
    over one socket; every reply checked (``+OK``)."""
    px = str(ttl_ms).encode()
    sample = JobKeys(namespace, "done-0").state
    head, tail = sample.split("done-0")
    assert JobKeys(namespace, f"done-{jobs - 1}").state == f"{head}done-{jobs - 1}{tail}"
    base = template.token - template.token % 1000
    with socket.create_connection(("127.0.0.1", port)) as sock:
        for start in range(0, jobs, BATCH):
            chunk = []
            for n in range(start, min(jobs, start + BATCH)):
                value = StateValue(
                    JobStatus.DONE, 1, base + n, template.run, template.owner,
                    took_ms=template.took_ms,
                ).encode()
                chunk.append(_resp(b"SET", f"{head}done-{n}{tail}".encode(),
                                   value.encode(), b"PX", px))
            sock.sendall(b"".join(chunk))
            want = b"+OK\r\n" * len(chunk)
            got = bytearray()
            while len(got) < len(want):
                data = sock.recv(1 << 20)
                if not data:
                    raise RuntimeError("the server closed the fill's connection")
                got += data
            if bytes(got) != want:
                raise RuntimeError(f"the fill was refused: {bytes(got)[:200]!r}")


def give_up(protocol: ScriptProtocol, namespace: str, count: int, who: Holder) -> list[str]:
    """``count`` jobs given up: an attempt each, failed with ``max_attempts=1``."""
    ids = []
    for n in range(count):
        job_id = f"gave-up-{n}"
        keys = JobKeys(namespace, job_id)
        grant = protocol.acquire(keys, who, LEASE_MS, 1, RETENTION_MS)
        if not isinstance(grant, Grant):
            raise RuntimeError(f"{job_id} was not granted: {grant}")
        ended = protocol.fail(keys, who.value(grant.token, grant.attempt), 1, RETENTION_MS)
        if ended is not Settle.GAVE_UP:
            raise RuntimeError(f"{job_id} did not give up: {ended}")
        ids.append(job_id)
    return ids


def hold(protocol: ScriptProtocol, namespace: str, count: int, who: Holder) -> None:
    for n in range(count):
        grant = protocol.acquire(JobKeys(namespace, f"held-{n}"), who, LEASE_MS, 5,
                                 RETENTION_MS)
        if not isinstance(grant, Grant):
            raise RuntimeError(f"held-{n} was not granted: {grant}")


def finish(protocol: ScriptProtocol, namespace: str, count: int, who: Holder) -> None:
    for n in range(count):
        keys = JobKeys(namespace, f"done-{n}")
        grant = protocol.acquire(keys, who, LEASE_MS, 5, RETENTION_MS)
        assert isinstance(grant, Grant)
        protocol.complete(keys, who.value(grant.token, grant.attempt),
                          DONE_MS)


def populate(server: RedisServer, run: Any) -> None:
    """The server's jobs: ``run.jobs`` finished, :data:`HELD` held, :data:`GAVE_UP`
    given up in :data:`NAMESPACE`; a few of each in :data:`OTHERS`."""
    client = server.client()
    try:
        template, ttl = done_value(client)
        before = int(client.info("memory")["used_memory"])
        started = time.monotonic()
        fill(server.port, NAMESPACE, run.jobs, template, ttl)
        run.fill_seconds = time.monotonic() - started
        run.fill_memory = int(client.info("memory")["used_memory"]) - before
        started = time.monotonic()
        protocol = ScriptProtocol(client)
        who = Holder("bench-views", new_run())
        hold(protocol, NAMESPACE, HELD, who)
        give_up(protocol, NAMESPACE, GAVE_UP, who)
        done, held, gave_up = OTHER_JOBS
        for ns in OTHERS:
            finish(protocol, ns, done, who)
            hold(protocol, ns, held, who)
            give_up(protocol, ns, gave_up, who)
        register(client, *(registered_namespace(ns) for ns in (NAMESPACE, *OTHERS)))
        run.setup_seconds = time.monotonic() - started
        memory: dict[str, Any] = client.info("memory")
        run.used_memory = int(memory["used_memory"])
        run.keys = int(client.dbsize())
    finally:
        client.close()
