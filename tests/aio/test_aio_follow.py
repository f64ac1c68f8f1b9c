"""An asyncio backup follows its namespace's progress as the sync side does
(lockworker.serving.follow, lockworker.aio.defer): behind a live primary on a fan-out
stream it looks at next to no job, and a job given up is still looked at and reported
given up."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis
import redis.asyncio as aredis

import lockworker
from lockworker import GiveUp, aio
from lockworker.aio import defer as aio_defer
from lockworker.aio.defer import AsyncDeferrals
from lockworker.daemons.sources import stream_keys
from lockworker.runtime import events
from lockworker.serving import follow, rules
from lockworker.testing.server import RedisServer
from tests.helpers import until

N = 300


class Recording(lockworker.StreamSource):
    """A fan-out reader that records the jobs it hands ``serve``."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.handed: list[str] = []

    def _decode(self, entry_id: str, fields: dict[str, str], urgent: bool = False) -> Any:
        delivery = super()._decode(entry_id, fields, urgent)
        if delivery is not None:
            self.handed.append(delivery.job_id)
        return delivery


class Counted:
    """The backup's looks (INSPECT steps) and progress reads (FOLLOW calls)."""

    def __init__(self, backup_client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.looks = 0
        self.reads = 0
        real_send, real_follow = aio_defer.send, aio_defer.FOLLOW
        counted = self

        async def send(client: Any, steps: Any) -> Any:
            if client is backup_client:
                self.looks += len(steps)
            return await real_send(client, steps)

        class Read:
            async def acall(self, *args: Any, **kw: Any) -> Any:
                counted.reads += 1
                return await real_follow.acall(*args, **kw)

        monkeypatch.setattr(aio_defer, "send", send)
        monkeypatch.setattr(aio_defer, "FOLLOW", Read())


def run_pair(
    url: str, namespace: str, counted_of: Any, *, give_up: frozenset[str] = frozenset(),
    names: list[str],
) -> tuple[dict[str, list[str]], dict[str, bool], list[str], list[str], list[str]]:
    """An asyncio primary and backup (``backup_delay`` 0.3 s) serving one stream while
    ``names`` are submitted: what each ran, what the backup reported done elsewhere
    (followed or not), gave up, its ``on_gave_up`` calls, and the jobs its reader
    handed it (not those it skipped, the progress past them when it read them)."""
    stream = f"{namespace}-jobs"
    ran: dict[str, list[str]] = {}
    done: dict[str, bool] = {}
    gave_up: list[str] = []
    hooked: list[str] = []
    handed: list[str] = []

    def on_acquired(owner: str) -> Any:
        def hook(job: Any) -> None:
            ran.setdefault(job.id, []).append(owner)
            if job.id in give_up:  # after the backup read it: it is handed over
                time.sleep(0.2)
                raise GiveUp("a job that cannot succeed")
        return hook

    async def scenario() -> None:
        client = aredis.Redis.from_url(url)
        backup_client = aredis.Redis.from_url(url)
        sync = redis.Redis.from_url(url)
        counted_of(backup_client)
        primary = aio.Worker(client, namespace=namespace, owner="p",
                             on_acquired=on_acquired("p"), handle_signals=False)
        backup = aio.Worker(backup_client, namespace=namespace, owner="b", role="backup",
                            backup_delay=0.3, on_acquired=on_acquired("b"),
                            on_gave_up=lambda job: hooked.append(job.id),
                            handle_signals=False)

        def observe(logger: str, event: str, fields: dict[str, Any]) -> None:
            if fields.get("run") != backup.run_id:
                return
            if event == events.DONE_ELSEWHERE:
                done[fields["job_id"]] = bool(fields.get("followed"))
            elif event == events.GAVE_UP:
                gave_up.append(fields["job_id"])

        events.add_observer(observe)
        source_p = lockworker.StreamSource(sync, stream, owner="p", block=0.05)
        source_b = Recording(sync, stream, owner="b", block=0.05)
        try:
            serving_p = asyncio.ensure_future(primary.serve(source_p, concurrency=8))
            await primary._presence.start()
            await backup._presence.start()
            await until(lambda: rules.deferring(backup), timeout=10)
            serving_b = asyncio.ensure_future(backup.serve(source_b, concurrency=8))
            readers = stream_keys(stream).extra("readers")  # it reads every job, then
            await until(lambda: sync.zscore(readers, "b") is not None, timeout=10)
            ids: list[str] = []
            for start in range(0, len(names), 20):  # a stream served live
                ids += [lockworker.submit(sync, stream, name) for name in names[start:start + 20]]
                await asyncio.sleep(0.02)
            await until(lambda: source_p.position() == ids[-1]
                        and source_b.position() == ids[-1]
                        and set(source_b.handed) <= set(done) | set(gave_up), timeout=60)
            handed.extend(source_b.handed)
            backup.stop()
            primary.stop()
            await asyncio.wait_for(asyncio.gather(serving_b, serving_p), 20)
        finally:
            events.remove_observer(observe)
            await backup.close()
            await primary.close()
            await client.aclose()
            await backup_client.aclose()
            sync.close()

    asyncio.run(scenario())
    return ran, done, gave_up, hooked, handed


@pytest.mark.parametrize("following", [True, False], ids=["following", "looking"])
def test_an_asyncio_backup_behind_a_live_primary_looks_at_next_to_no_job(
    redis_server: RedisServer, namespace: str, monkeypatch: pytest.MonkeyPatch,
    following: bool,
) -> None:
    box: dict[str, Counted] = {}
    if not following:
        monkeypatch.setattr(follow, "follows", lambda worker: False)
    names = [f"j{i}" for i in range(N)]
    ran, done, _, _, handed = run_pair(
        redis_server.url, namespace,
        lambda c: box.setdefault("c", Counted(c, monkeypatch)), names=names,
    )
    counted = box["c"]
    assert ran == {name: ["p"] for name in names}
    assert sorted(done) == sorted(handed) and set(done) <= set(names)
    followed = sum(done.values())
    print(f"\nasyncio looks per job handed: {counted.looks / max(1, len(done)):.3f} "
          f"({counted.looks} looks, "
          f"{counted.reads} progress reads, {len(done)} handed over, {followed} followed)")
    if following:  # it trails the primary: it reads next to no entry, looks at none
        assert len(handed) <= N // 10, handed
        assert counted.looks <= N // 10 and counted.reads <= N // 10
        assert followed >= len(done) - counted.looks
    else:
        assert counted.looks >= len(done) and followed == 0 and counted.reads == 0


def test_an_asyncio_backup_reports_a_job_given_up_as_given_up(
    redis_server: RedisServer, namespace: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A backup that reads the entries (here one that does not trail the primary, as
    one does while the primary stalls) looks at the job given up, and reports it so."""
    monkeypatch.setattr(AsyncDeferrals, "trail", lambda self, source: None)
    names = [f"a{i}" for i in range(20)] + ["bad"] + [f"c{i}" for i in range(40)]
    ran, done, gave_up, hooked, handed = run_pair(
        redis_server.url, namespace, lambda c: None, give_up=frozenset({"bad"}), names=names,
    )
    assert ran == {name: ["p"] for name in names}
    assert "bad" in handed and sorted(done) == sorted(set(handed) - {"bad"})
    assert hooked == ["bad"] and gave_up == ["bad"]
    assert not any(done.get(f"a{i}") for i in range(20))  # at or before the mark: looked at
