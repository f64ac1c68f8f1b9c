"""The fenced store: a downstream resource that rejects stale holders.

It lives on a server of its own, which no fault touches, so a crash of lockworker's
server cannot erase what it recorded. A write for a key is accepted only with a token at
least as high as the highest accepted so far for that key, and every accepted write is
appended, in the store's order, to a list that the checker reads back as
:class:`~faults.history.Effect` records.

Sync children write through :class:`FencedStore`, asyncio children through
:class:`AsyncFencedStore` (the same script on a ``redis.asyncio`` client), so that an
asyncio holder's write is awaited as any asynchronous downstream call would be: its
heartbeat task runs while the write is on the wire, and the event loop is blocked only
by the hook's own code between two awaits, never by the store.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import redis
import redis.asyncio

from .history import Effect

# KEYS[1] hash key -> highest accepted token   KEYS[2] list of accepted writes
# KEYS[3] hash of counters
# ARGV[1] kind:key   ARGV[2] token   ARGV[3] the write, as JSON
# returns 1 accepted, 0 refused (a higher token was accepted before)
FENCED_WRITE = """
local top = redis.call('HGET', KEYS[1], ARGV[1])
if top and tonumber(ARGV[2]) < tonumber(top) then
  redis.call('HINCRBY', KEYS[3], 'refused', 1)
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('RPUSH', KEYS[2], ARGV[3])
return 1
"""


@dataclass(frozen=True)
class Write:
    """One write of a critical section, as the store records it."""

    kind: str
    key: str
    token: int
    run: str
    sid: int
    op: str
    """``write``, ``commit`` (the last write of finished work) or ``late``."""
    t: float

    def args(self) -> list[str | int]:
        """The script's arguments: the fenced key, the token, the record."""
        record = json.dumps(asdict(self), separators=(",", ":"))
        return [f"{self.kind}:{self.key}", self.token, record]


def keys_of(namespace: str) -> list[str]:
    return [f"{namespace}:top", f"{namespace}:effects", f"{namespace}:stats"]


class FencedStore:
    """Client of the fenced store, in one namespace (one scenario)."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self._keys = keys_of(namespace)
        self._write = client.register_script(FENCED_WRITE)

    def write(self, write: Write) -> bool:
        """Accepted (True) or refused because a higher token already wrote (False)."""
        return int(self._write(keys=self._keys, args=write.args())) == 1

    def effects(self) -> list[Effect]:
        raw = self.client.lrange(self._keys[1], 0, -1)
        out = []
        for seq, item in enumerate(raw):
            e = json.loads(item)
            out.append(Effect(e["kind"], e["key"], e["token"], e["run"], e["sid"], e["op"], seq))
        return out

    def refused(self) -> int:
        return int(self.client.hget(self._keys[2], "refused") or 0)


class AsyncFencedStore:
    """:class:`FencedStore`'s writes on a ``redis.asyncio`` client, for asyncio children."""

    def __init__(self, client: redis.asyncio.Redis, namespace: str) -> None:
        self.client = client
        self._keys = keys_of(namespace)
        self._write = client.register_script(FENCED_WRITE)

    async def write(self, write: Write) -> bool:
        """Accepted (True) or refused because a higher token already wrote (False)."""
        return int(await self._write(keys=self._keys, args=write.args())) == 1
