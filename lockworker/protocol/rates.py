"""The rate steps: a worker adds its counts of the last seconds to its namespace's hour
hashes, and anybody reads them (:mod:`lockworker.model.rates` says what they mean).

Each is one script, so a flush is one round trip however many minutes and kinds it
carries, and runs unchanged on a cluster: every hash of a namespace has the hash tag
``{<namespace>}`` of its presence keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis

from lockworker.model import rates
from lockworker.protocol.decode import text
from lockworker.protocol.luacall import LuaScript

# RECORD: add counts to hour hashes, and set each hash's expiry.
# KEYS: the hour hashes   ARGV[1..#KEYS]: each one's expiry (Unix s)
# then groups of three: key index, field, delta      returns the fields added to
RECORD = LuaScript("""
local n = #KEYS
for i = n + 1, #ARGV, 3 do
  redis.call('HINCRBY', KEYS[tonumber(ARGV[i])], ARGV[i + 1], ARGV[i + 2])
end
for i = 1, n do redis.call('EXPIREAT', KEYS[i], ARGV[i]) end
return (#ARGV - n) / 3
""")

# READ: every field of the hour hashes, writing nothing.
# KEYS: the hour hashes   returns {HGETALL key1, HGETALL key2, ...}
READ = LuaScript("""
local out = {}
for i = 1, #KEYS do out[i] = redis.call('HGETALL', KEYS[i]) end
return out
""")


def record(client: redis.Redis, namespace: str, counts: Mapping[tuple[int, str], int]) -> None:
    """Add ``counts`` to ``namespace``'s hour hashes (nothing is sent for none)."""
    keys, args = rates.record_call(namespace, counts)
    if keys:
        RECORD(client, keys, args)


async def arecord(client: Any, namespace: str, counts: Mapping[tuple[int, str], int]) -> None:
    """:func:`record` on a ``redis.asyncio`` client."""
    keys, args = rates.record_call(namespace, counts)
    if keys:
        await RECORD.acall(client, keys, args)


def decode(reply: Any) -> rates.Counts:
    """The counts a READ reply holds (the hashes summed)."""
    found: rates.Counts = {}
    for flat in list(reply or ()):
        items = [text(item) for item in list(flat or ())]
        for key, n in rates.parse_hash(dict(zip(items[::2], items[1::2], strict=False))).items():
            found[key] = found.get(key, 0) + n
    return found


def read(client: redis.Redis, namespace: str, hours: list[int]) -> rates.Counts:
    """``namespace``'s counts of the hours starting at ``hours``."""
    keys = [rates.hour_key(namespace, hour) for hour in hours]
    return decode(READ(client, keys, [])) if keys else {}


async def aread(client: Any, namespace: str, hours: list[int]) -> rates.Counts:
    """:func:`read` on a ``redis.asyncio`` client."""
    keys = [rates.hour_key(namespace, hour) for hour in hours]
    return decode(await READ.acall(client, keys, [])) if keys else {}
