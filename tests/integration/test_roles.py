"""Primary and backup workers in one process: who competes when."""

from __future__ import annotations

import threading
import time
from typing import Any

import redis
from helpers import wait_for

from lockworker import Job, Outcome, Worker
from lockworker.model.keys import JobKeys


def worker(client: redis.Redis, namespace: str, owner: str, **kwargs: Any) -> Worker:
    kwargs.setdefault("lock_timeout", 2.0)
    return Worker(client, namespace=namespace, owner=owner, handle_signals=False, **kwargs)


def run(w: Worker, job_id: str, results: dict[str, Outcome]) -> threading.Thread:
    thread = threading.Thread(
        target=lambda: results.__setitem__(w.owner, w.process(job_id)), daemon=True
    )
    thread.start()
    return thread


def test_a_live_primary_wins_although_the_backup_looked_first(
    redis_client: redis.Redis, namespace: str
) -> None:
    did: list[str] = []
    backup = worker(redis_client, namespace, "backup", role="backup", backup_delay=10.0,
                    on_acquired=lambda job: did.append("backup"))
    primary = worker(redis_client, namespace, "primary",
                     on_acquired=lambda job: did.append("primary"))
    assert primary.process("warm-up") is Outcome.DONE  # serving: registered
    did.clear()
    results: dict[str, Outcome] = {}
    started = time.monotonic()
    tb = run(backup, "job", results)
    tp = run(primary, "job", results)
    for thread in (tb, tp):
        thread.join(timeout=10)
    # The backup was woken by the DONE message: it did not sit out its 10 s delay.
    assert time.monotonic() - started < 5.0
    assert did == ["primary"]
    assert results == {"primary": Outcome.DONE, "backup": Outcome.DONE_ELSEWHERE}
    backup.close()
    primary.close()


def test_a_backup_defers_while_a_primary_serves(
    redis_client: redis.Redis, namespace: str
) -> None:
    primary = worker(redis_client, namespace, "primary", on_acquired=lambda job: None)
    assert primary.process("warm-up") is Outcome.DONE  # registered, busy elsewhere
    did: list[float] = []
    backup = worker(redis_client, namespace, "backup", role="backup", backup_delay=0.3,
                    on_acquired=lambda job: did.append(time.monotonic()))
    started = time.monotonic()
    assert backup.process("job") is Outcome.DONE
    assert 0.3 <= did[0] - started < 2.0
    backup.close()
    primary.close()


def test_a_backup_with_no_primary_competes_at_once(
    redis_client: redis.Redis, namespace: str
) -> None:
    did: list[float] = []
    backup = worker(redis_client, namespace, "backup", role="backup", backup_delay=3.0,
                    on_acquired=lambda job: did.append(time.monotonic()))
    assert backup.process("warm-up") is Outcome.DONE  # its start-up grace, once
    started = time.monotonic()
    assert backup.process("job") is Outcome.DONE
    assert did[1] - started < 2.0  # not its 3 s delay: nobody to defer to
    backup.close()


def test_a_waiting_backup_competes_as_soon_as_the_primary_closes(
    redis_client: redis.Redis, namespace: str
) -> None:
    primary = worker(redis_client, namespace, "primary", on_acquired=lambda job: None)
    assert primary.process("warm-up") is Outcome.DONE
    did: list[float] = []
    backup = worker(redis_client, namespace, "backup", role="backup", backup_delay=30.0,
                    on_acquired=lambda job: did.append(time.monotonic()))
    results: dict[str, Outcome] = {}
    thread = run(backup, "job", results)
    # It saw the job free and waits out its delay, listening on the job's channel.
    wait_for(lambda: backup._hub.subscribed(JobKeys.of(namespace, "job").wake))
    closed = time.monotonic()
    primary.close()  # a clean stop: the registration goes, and the backup is told
    thread.join(timeout=10)
    assert results == {"backup": Outcome.DONE}
    assert did[0] - closed < 2.0  # a round trip, with room for a busy machine; not 30 s
    backup.close()


def test_a_backup_takes_over_a_failed_primary_attempt(
    redis_client: redis.Redis, namespace: str
) -> None:
    did: list[str] = []

    def primary_hook(job: Job) -> None:
        did.append("primary")
        wait_for(backup_waiting.is_set, timeout=10)
        raise RuntimeError("primary failed")

    backup_waiting = threading.Event()
    backup = worker(redis_client, namespace, "backup", role="backup", backup_delay=0.2,
                    on_acquired=lambda job: did.append("backup"),
                    on_locked=lambda job: backup_waiting.set())
    # The default schedule hands a first failure over at once; the process that failed
    # steps back min(1 s, lock_timeout / 4) so that another takes it.
    primary = worker(redis_client, namespace, "primary", on_acquired=primary_hook,
                     lock_timeout=8.0)
    results: dict[str, Outcome] = {}
    tp = run(primary, "job", results)
    wait_for(lambda: did == ["primary"])
    tb = run(backup, "job", results)
    for thread in (tb, tp):
        thread.join(timeout=10)
    # The primary stepped back after failing; the backup took attempt 2.
    assert did == ["primary", "backup"]
    assert results == {"primary": Outcome.DONE_ELSEWHERE, "backup": Outcome.DONE}
    backup.close()
    primary.close()
