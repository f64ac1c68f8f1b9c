"""Commands packed into the Redis wire format, all of a batch in one buffer.

redis-py's asyncio connections pack every argument in Python, and grow one buffer by
copying it once per argument until it reaches 6,000 bytes. A looped batch command
(:mod:`lockworker.protocol.many`) carries hundreds of arguments, so on a busy asyncio
stream that packing was the largest single cost of the client per job (a sixth of its
CPU, measured). :func:`pack` writes the same bytes in one pass: with hiredis's C packer
when it is installed and the client encodes text as strict UTF-8 (hiredis's own
encoding), else with redis-py's own ``Encoder`` of the connection, each argument
encoded once and the buffer joined once.

The bytes are exactly those redis-py would send for the same commands (a property
test compares them), so nothing but the cost changes. Command names are single words
(``EVALSHA``, ``EVAL``): redis-py's splitting of ``"CONFIG GET"`` is not repeated.

Pure: no I/O. The asyncio side writes the buffer (:mod:`lockworker.aio.wire`).
"""

from __future__ import annotations

import codecs
import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

_hiredis_pack: Callable[[tuple[Any, ...]], bytes] | None
try:  # optional, as it is for redis-py: the fast path when present
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pragma: no cover - exercised by the pure path's own test
    _hiredis_pack = None

_CRLF = b"\r\n"


def hiredis_packs(encoding: str, errors: str) -> bool:
    """Whether hiredis packs text as this encoder would: strict UTF-8 only."""
    return _hiredis_pack is not None and errors == "strict" and _utf8(encoding)


@functools.lru_cache(maxsize=64)
def _utf8(encoding: str) -> bool:
    """Whether ``encoding`` names UTF-8 (asked of every command sent: remembered)."""
    try:
        return codecs.lookup(encoding).name == "utf-8"
    except LookupError:
        return False


def packer(encoder: Any) -> Callable[[Iterable[Sequence[Any]]], bytes]:
    """The packing function for connections with redis-py's ``encoder`` (its
    ``encode``, ``encoding`` and ``encoding_errors``)."""
    if hiredis_packs(encoder.encoding, encoder.encoding_errors):
        return pack_hiredis
    encode = encoder.encode
    return lambda commands: pack(commands, encode)


def pack_hiredis(commands: Iterable[Sequence[Any]]) -> bytes:
    """Every command, packed by hiredis (text as UTF-8)."""
    assert _hiredis_pack is not None
    return b"".join([_hiredis_pack(tuple(command)) for command in commands])


def pack(commands: Iterable[Sequence[Any]], encode: Callable[[Any], Any]) -> bytes:
    """Every command, each argument encoded by ``encode`` (redis-py's
    ``Encoder.encode``: bytes as they are, numbers by ``repr``, text in the client's
    encoding; anything else raises its ``DataError``)."""
    parts: list[bytes] = []
    add = parts.append
    for command in commands:
        add(b"*%d\r\n" % len(command))
        for n, arg in enumerate(command):
            # The command's name in UTF-8 whatever the client's encoding, as redis-py.
            data = arg.encode() if n == 0 and isinstance(arg, str) else encode(arg)
            if not isinstance(data, bytes):
                data = bytes(data)  # a bytearray or memoryview: its bytes
            add(b"$%d\r\n" % len(data))
            add(data)
            add(_CRLF)
    return b"".join(parts)
