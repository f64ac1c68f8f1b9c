"""lockworker.protocol.resp packs exactly the bytes redis-py would send, only cheaper."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis._parsers.encoders import Encoder
from redis.connection import PythonRespSerializer
from redis.exceptions import DataError

from lockworker.protocol import resp

ARG = st.one_of(
    st.text(),
    st.binary(max_size=300),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.floats(allow_nan=False, allow_infinity=False),
)
# Commands as the batcher sends them: a one-word name, then anything; sometimes one
# long argument or many, across redis-py's 6,000-byte buffer cut-off.
COMMAND = st.tuples(st.sampled_from(["EVALSHA", "EVAL"]), st.lists(ARG, max_size=40)).map(
    lambda c: (c[0], *c[1])
)
COMMANDS = st.lists(COMMAND, min_size=1, max_size=5)


def redis_py(commands: list[tuple[Any, ...]], encoder: Encoder) -> bytes:
    """What redis-py's own packer writes for ``commands``, joined."""
    packer = PythonRespSerializer(6000, encoder.encode)
    return b"".join(b"".join(bytes(part) for part in packer.pack(*c)) for c in commands)


@given(COMMANDS)
def test_the_pure_packer_writes_redis_pys_bytes(commands: list[tuple[Any, ...]]) -> None:
    encoder = Encoder("utf-8", "strict", False)
    assert resp.pack(commands, encoder.encode) == redis_py(commands, encoder)


@given(COMMANDS)
def test_hiredis_packs_the_same_bytes_for_a_utf8_client(commands: list[tuple[Any, ...]]) -> None:
    encoder = Encoder("utf-8", "strict", False)
    assert resp.packer(encoder) is resp.pack_hiredis
    assert resp.pack_hiredis(commands) == redis_py(commands, encoder)


@given(COMMANDS)
def test_another_encoding_packs_text_in_that_encoding(commands: list[tuple[Any, ...]]) -> None:
    """hiredis encodes text as UTF-8 only: a client that encodes otherwise (or with
    another error handler) gets the pure packer with its own encoder, as redis-py does."""
    for encoding, errors in (("latin-1", "replace"), ("utf-8", "ignore"), ("utf-16", "strict")):
        encoder = Encoder(encoding, errors, False)
        assert resp.packer(encoder) is not resp.pack_hiredis
        assert resp.packer(encoder)(commands) == redis_py(commands, encoder)


@pytest.mark.parametrize("spelling", ["utf-8", "UTF8", "utf_8", "U8"])
def test_every_spelling_of_utf8_takes_hiredis(spelling: str) -> None:
    """(hiredis is a test dependency: the [hiredis] extra.)"""
    assert resp.hiredis_packs(spelling, "strict")
    assert not resp.hiredis_packs("no-such-codec", "strict")


def test_without_hiredis_a_utf8_client_gets_the_pure_packer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(resp, "_hiredis_pack", None)
    encoder = Encoder("utf-8", "strict", False)
    assert not resp.hiredis_packs("utf-8", "strict")
    commands = [("EVALSHA", "sha", 1, "k\u00e9y", b"\x00", 7, 0.5)]
    assert resp.packer(encoder)(commands) == redis_py(commands, encoder)


@pytest.mark.parametrize("bad", [True, None, object()])
def test_an_argument_redis_py_refuses_is_refused_alike(bad: Any) -> None:
    encoder = Encoder("latin-1", "strict", False)
    with pytest.raises(DataError):
        resp.packer(encoder)([("EVALSHA", "x", bad)])
