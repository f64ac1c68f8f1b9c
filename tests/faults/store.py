"""The fenced store: a downstream resource that rejects stale holders.

It lives on a server of its own, which no fault touches, so a crash of lockworker's
server cannot erase what it recorded. A write for a key is accepted only with a token at
least as high as the highest accepted so far for that key, and every accepted write is
appended, in the store's order, to a list that the checker reads back as
:class:`~faults.history.Effect` records.
"""

from __future__ import annotations

import json

import redis

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


class FencedStore:
    """Client of the fenced store, in one namespace (one scenario)."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self._keys = [f"{namespace}:top", f"{namespace}:effects", f"{namespace}:stats"]
        self._write = client.register_script(FENCED_WRITE)

    def write(
        self, kind: str, key: str, token: int, *, run: str, sid: int, op: str, t: float
    ) -> bool:
        """Accepted (True) or refused because a higher token already wrote (False)."""
        record = json.dumps(
            {"kind": kind, "key": key, "token": token, "run": run, "sid": sid, "op": op, "t": t},
            separators=(",", ":"),
        )
        return int(self._write(keys=self._keys, args=[f"{kind}:{key}", token, record])) == 1

    def effects(self) -> list[Effect]:
        raw = self.client.lrange(self._keys[1], 0, -1)
        out = []
        for seq, item in enumerate(raw):
            e = json.loads(item)
            out.append(Effect(e["kind"], e["key"], e["token"], e["run"], e["sid"], e["op"], seq))
        return out

    def refused(self) -> int:
        return int(self.client.hget(self._keys[2], "refused") or 0)
