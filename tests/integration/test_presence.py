"""The presence steps on a real server: register, refresh, leave, read."""

from __future__ import annotations

import redis
from helpers import wait_for

from lockworker.model.presence import JOINED, LEFT, Member, presence_keys
from lockworker.model.state import Role
from lockworker.protocol import presence

PRIMARY = Member(Role.PRIMARY, "host-a", "r1", "a.example", 11, 5000)
BACKUP = Member(Role.BACKUP, "host-b", "r2", "b.example", 22, 300)


def test_register_refresh_read_and_leave(redis_client: redis.Redis, namespace: str) -> None:
    keys = presence_keys(namespace)
    members = keys.extra("members")
    listener = redis_client.pubsub()
    listener.subscribe(keys.wake)
    assert listener.get_message(timeout=5)["type"] == "subscribe"

    found = presence.touch(redis_client, keys, PRIMARY, JOINED)
    assert [(r.member, round(r.left)) for r in found] == [(PRIMARY, 5)]
    assert listener.get_message(timeout=5)["data"] == JOINED
    found = presence.touch(redis_client, keys, BACKUP, "")  # a backup tells nobody
    assert {r.member for r in found} == {PRIMARY, BACKUP}
    # the set lives as long as its longest registration, and no longer
    assert 4000 < redis_client.pttl(members) <= 5000
    assert {r.member for r in presence.read(redis_client, keys)} == {PRIMARY, BACKUP}

    # a registration that is not refreshed ends by itself (a crash)
    wait_for(lambda: [r.member for r in presence.read(redis_client, keys)] == [PRIMARY],
             timeout=10)
    presence.leave(redis_client, keys, PRIMARY, LEFT)
    assert presence.read(redis_client, keys) == []
    message = listener.get_message(timeout=5)
    assert message is not None and message["data"] == LEFT
    assert listener.get_message(timeout=0.05) is None  # the backup's touch said nothing
    listener.close()


def test_reading_writes_nothing_and_foreign_members_are_not_listed(
    redis_client: redis.Redis, namespace: str
) -> None:
    keys = presence_keys(namespace)
    assert presence.read(redis_client, keys) == []
    assert not redis_client.exists(keys.extra("members"))
    redis_client.zadd(keys.extra("members"), {"not lockworker's": 2**50})
    presence.touch(redis_client, keys, PRIMARY, "")
    assert [r.member for r in presence.read(redis_client, keys)] == [PRIMARY]
