"""What the connected user may do of what the protocol needs: a harmless probe.

The protocol's steps are Lua scripts (EVALSHA, SCRIPT LOAD once) that read and write a
job's keys and PUBLISH on its wake channel; waiters SUBSCRIBE to that channel. A user
refused any of these fails part way: a script that wrote DONE and then may not PUBLISH
reports an error for a step it applied. The probe asks, as the connected user, for
each of those with the same command on keys and a channel of the same names as the
daemon's own (a job id nobody uses), in a way that changes nothing: ``SET ... XX`` and
``PEXPIRE`` of a key that does not exist, ``DEL`` of one, a PUBLISH nobody listens to.
Inside the script each command runs under ``redis.pcall``, so one probe names every
refusal, not only the first.

ACL DRYRUN would answer the same questions, but only to a user allowed to run ACL,
which a least-privilege user is not; the probe needs no more than what lockworker
itself needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from lockworker.model.keys import JobKeys
from lockworker.model.servercheck import Denied
from lockworker.protocol.decode import text
from lockworker.protocol.luacall import LuaScript

PROBE_ID = "lockworker-permission-probe"
"""The job id whose keys and channel the probe uses: in the daemon's own namespace, so
the key and channel patterns are the ones its jobs need."""

# PROBE: every command the steps' scripts run, changing nothing.
# KEYS[1] lock   KEYS[2] state   KEYS[3] the namespace's index key of the probe's slot
# ARGV[1] wake channel
# returns a flat list: command, target, error for each refused command
PROBE = """
local out = {}
local tries = {
  {'GET', KEYS[2]}, {'SET', KEYS[1], 'probe', 'XX', 'PX', '1'}, {'PEXPIRE', KEYS[1], '1'},
  {'PTTL', KEYS[1]}, {'EXISTS', KEYS[2]}, {'DEL', KEYS[1]}, {'TIME'},
  {'PUBLISH', ARGV[1], 'probe'}, {'ZADD', KEYS[3], 'XX', '0', 'probe'},
  {'ZREM', KEYS[3], 'probe'}, {'ZREMRANGEBYSCORE', KEYS[3], '1', '0'},
}
for _, c in ipairs(tries) do
  local r = redis.pcall(unpack(c))
  if type(r) == 'table' and r.err then
    out[#out + 1] = c[1]
    out[#out + 1] = c[2] or ''
    out[#out + 1] = r.err
  end
end
return out
"""
_PROBE = LuaScript(PROBE)

PERMISSION_MARKS = ("noperm", "no permissions", "acl failure", "permission")


def is_permission_text(message: str) -> bool:
    lowered = message.lower()
    return any(mark in lowered for mark in PERMISSION_MARKS)


def is_permission_error(exc: BaseException) -> bool:
    """A refusal by the server's ACL (``NOPERM``, "ACL failure in script")."""
    return isinstance(exc, redis.exceptions.NoPermissionError) or is_permission_text(str(exc))


def probe_keys(keys: JobKeys) -> JobKeys:
    """The probe's keys: those of :data:`PROBE_ID` in ``keys``' namespace and space."""
    return JobKeys(keys.namespace, PROBE_ID, keys.space)


def probe_call(keys: JobKeys) -> tuple[LuaScript, list[str], list[str]]:
    """The probe script, its keys and its arguments (for either kind of client)."""
    probe = probe_keys(keys)
    return _PROBE, [probe.lock, probe.state, probe.index], [probe.wake]


def decode_probe(reply: Sequence[Any]) -> list[Denied]:
    """The probe's flat reply as the refusals it lists (an error other than a
    permission's, such as OOM on a full server, is not one)."""
    items = [text(item) for item in reply]
    found = [Denied(*items[i:i + 3]) for i in range(0, len(items) - 2, 3)]
    return [d for d in found if is_permission_text(d.error)]


def refused(command: str, target: str, exc: BaseException) -> list[Denied]:
    """``exc`` as a refusal of ``command`` on ``target`` if it is a permission error,
    else raise it (a server that cannot run the probe is not a permission problem)."""
    if is_permission_error(exc):
        message = str(exc)
        return [Denied(command_of(message, command), target if "key" in message.lower()
                       or "channel" in message.lower() else "", message)]
    raise exc


def command_of(message: str, default: str) -> str:
    """The command a NOPERM message names (``... run the 'evalsha' command``)."""
    lowered = message.lower()
    for name in ("script|load", "evalsha", "eval", "script"):
        if f"'{name}'" in lowered:
            return name.upper()
    return default


def probe(client: redis.Redis, keys: JobKeys) -> list[Denied]:
    """Every command, key and channel of the job steps the connected user may not use
    (the wake channel's SUBSCRIBE is :mod:`lockworker.runtime.servercheck`'s to try)."""
    script, names, args = probe_call(keys)
    try:
        return decode_probe(script(client, names, args))
    except redis.ResponseError as exc:
        return refused("EVALSHA", names[0], exc)
