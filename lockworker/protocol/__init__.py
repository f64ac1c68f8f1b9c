"""The lock protocol: the interface, pure decoding, Lua sources and two implementations.

- :mod:`~lockworker.protocol.interface`: :class:`LockProtocol`, the atomic steps every
  implementation offers, and the steps they share;
- :mod:`~lockworker.protocol.decode`: what each reply means (pure, no I/O);
- :mod:`~lockworker.protocol.lua`: the Lua sources; :mod:`~lockworker.protocol.luacall`
  calls a script in one EVALSHA;
- :mod:`~lockworker.protocol.script` (:class:`ScriptProtocol`, the default) and
  :mod:`~lockworker.protocol.txn` (:class:`TxnProtocol`, WATCH/MULTI/EXEC).

Nothing in this package knows threads, sleeping, hooks, logging or retries.
"""

from lockworker.protocol.decode import snapshot_from, text
from lockworker.protocol.interface import LockProtocol, SettleSteps, inspect
from lockworker.protocol.script import ScriptProtocol
from lockworker.protocol.txn import TxnProtocol

__all__ = [
    "LockProtocol",
    "ScriptProtocol",
    "SettleSteps",
    "TxnProtocol",
    "inspect",
    "snapshot_from",
    "text",
]
