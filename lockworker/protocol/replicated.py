"""Durability ``replicated``: a step counts only once replicas acknowledged it.

Redis replicates asynchronously: a master that acknowledged a DONE or handed out a
token can fail before any replica received it, and the promoted replica then knows
nothing of it (the job runs again; a token may be handed out twice). With
``durability="replicated"`` each step of the script protocol is sent with a ``WAIT
replicas timeout`` on the same connection, in one round trip (a pipeline), and counts
only if at least ``replicas`` replicas acknowledged it. A step they did not acknowledge
raises :class:`~lockworker.errors.NotReplicated`, which the caller's retry policy
retries like a lost connection: every step is safe to repeat (a retried acquire
re-enters its own lease, a retried settle finds itself applied), so the step is sent
again, and WAITed for again, until the replicas have it or the budget ends.

WAIT makes a write durable against the failover of one master only as far as Redis
allows: a replica that acknowledged it may still not be the one promoted, and WAIT does
not make Redis strongly consistent. docs/topologies.md has the measured cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from redis.exceptions import NoScriptError

from lockworker.errors import NotReplicated
from lockworker.model.keys import JobKeys
from lockworker.protocol.decode import foreign_on_wrongtype
from lockworker.protocol.luacall import LuaScript
from lockworker.protocol.script import ScriptProtocol, script_keys


class ReplicatedScriptProtocol(ScriptProtocol):
    """:class:`ScriptProtocol` whose steps count once ``replicas`` replicas have them."""

    __slots__ = ("replicas", "timeout_ms")

    def __init__(self, client: redis.Redis, replicas: int, timeout_ms: int) -> None:
        super().__init__(client)
        self.replicas = replicas
        self.timeout_ms = timeout_ms

    def _run(self, script: LuaScript, keys: JobKeys, args: Sequence[str | int]) -> Any:
        try:
            try:
                reply, acked = self._send(script, keys, args)
            except NoScriptError:
                self.client.script_load(script.source)
                reply, acked = self._send(script, keys, args)
        except redis.ResponseError as exc:
            raise foreign_on_wrongtype(keys, exc) from exc
        if int(acked) < self.replicas:
            raise NotReplicated(
                f"{int(acked)} of the {self.replicas} replicas asked for acknowledged "
                f"the step on {keys.state} within {self.timeout_ms} ms"
            )
        return reply

    def _send(
        self, script: LuaScript, keys: JobKeys, args: Sequence[str | int]
    ) -> tuple[Any, Any]:
        # One connection for both: WAIT counts the writes of its own connection.
        pipe = self.client.pipeline(transaction=False)
        pipe.execute_command(  # type: ignore[no-untyped-call]
            "EVALSHA", script.sha, 4, *script_keys(keys), *args
        )
        pipe.execute_command("WAIT", self.replicas, self.timeout_ms)  # type: ignore[no-untyped-call]
        reply, acked = pipe.execute()
        return reply, acked
