"""Many steps of one script in one command: the per-job script, looped on the server.

A batch sent as a pipeline of EVALSHAs (:mod:`lockworker.protocol.batch`) shares the
round trip, but the client still packs, sends and parses one command per step, and on
both sides that per-command cost, not the round trip, is what limits a busy stream.
:func:`many` wraps a per-job script, unchanged, as a local function, and calls it once
per step in a loop inside one script: one command carries every step of that script.

Why this keeps every step's guarantees:

- the step's code is the per-job script's source, byte for byte: the wrapper only
  hands it its own ``KEYS`` and ``ARGV``;
- a script runs atomically, so each step still runs with nothing between its reads
  and its writes (the loop is one atomic unit, which is stronger, never weaker);
- each step runs under ``pcall``: a step that raises (WRONGTYPE on a foreign value, a
  refused PUBLISH) gives its error as its own reply and the loop goes on, exactly as
  that step's EVALSHA failing alone in a pipeline would; its writes before the error
  stay, as they would alone (a script is never rolled back), and its caller recovers
  as it would alone;
- a step's ``nil`` reply becomes ``false``, which Redis sends as the same nil reply
  (a ``nil`` would end the Lua array early).

On a cluster each job is a hash slot of its own, and a command's declared keys must
share one slot. A script without a ``#!`` line may still use keys of every slot its
node serves (the rule of scripts before Redis 7, which Redis 7 and Valkey keep), so a
cluster's steps of one script on one master go in one command sent to that node, the
keys passed among the arguments (``many(script, on_node=True)``). A step whose slot
the node no longer serves (it moved after the plan) fails at its first key, before it
writes anything (a job step reads its keys first), with an error of its own, and
:mod:`lockworker.protocol.batch` sends that step again alone, routed by key.

Arguments of the wrapper: ``ARGV[1]`` the number of steps n; ``ARGV[2..n+1]`` each
step's argument count; then every step's arguments in order. ``KEYS`` are every
step's keys in order, :data:`KEYS_PER_STEP` each; on a cluster node there are no
``KEYS``, and the keys come in ``ARGV`` after the counts, before the arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lockworker.protocol.luacall import LuaScript

KEYS_PER_STEP = 4
"""Every job step's script takes the job's lock, state, history and index keys."""

_WRAP = """
local lw_n = tonumber(ARGV[1])
local lw_all_keys, lw_all_argv = KEYS, ARGV
local function lw_step(KEYS, ARGV)
%s
end
local lw_out = {}
local lw_at = 1 + lw_n
%sfor lw_i = 1, lw_n do
  local lw_k = (lw_i - 1) * %d
  local keys = {}
  for j = 1, %d do keys[j] = lw_all_keys[lw_k + j] end
  local argv = {}
  for j = 1, tonumber(lw_all_argv[1 + lw_i]) do argv[j] = lw_all_argv[lw_at + j] end
  lw_at = lw_at + #argv
  local ok, reply = pcall(lw_step, keys, argv)
  if not ok then
    if type(reply) == 'table' and reply.err then
      reply = {err = reply.err}
    else
      reply = {err = tostring(reply)}
    end
  elseif reply == nil then
    reply = false
  end
  lw_out[lw_i] = reply
end
return lw_out
"""

_KEYS_FROM_ARGV = f"""lw_all_keys = {{}}
for j = 1, lw_n * {KEYS_PER_STEP} do lw_all_keys[j] = ARGV[lw_at + j] end
lw_at = lw_at + lw_n * {KEYS_PER_STEP}
"""

_MADE: dict[tuple[str, bool], LuaScript] = {}


def many(script: LuaScript, *, on_node: bool = False) -> LuaScript:
    """The script that runs ``script`` once per step, in one command (made once; two
    threads making it at once make the same source, and ``setdefault`` keeps one).
    ``on_node``: for a cluster node, its keys among its arguments."""
    key = (script.sha, on_node)
    found = _MADE.get(key)
    if found is None:
        keys = _KEYS_FROM_ARGV if on_node else ""
        body = _WRAP % (script.source, keys, KEYS_PER_STEP, KEYS_PER_STEP)
        found = _MADE.setdefault(key, LuaScript(body))
    return found


def arguments(
    keys: Sequence[Sequence[str]], args: Sequence[Sequence[Any]], *, on_node: bool = False
) -> tuple[list[str], list[Any]]:
    """The wrapper's KEYS and ARGV for steps with these keys and arguments (``on_node``:
    no KEYS, the keys in ARGV)."""
    flat_keys = [k for step in keys for k in step]
    flat_args: list[Any] = [len(args), *(len(a) for a in args)]
    if on_node:
        flat_args.extend(flat_keys)
        flat_keys = []
    for a in args:
        flat_args.extend(a)
    return flat_keys, flat_args
