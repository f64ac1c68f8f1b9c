"""Hash slots, and one short hash tag per slot: where a namespace's index lives.

A job's keys share the hash tag ``{<job id>}``, so Redis Cluster keeps them in one slot
and a job's step is one script. The namespace's index (:mod:`lockworker.model.index`)
must be written by that same script, so its entries for a job sit in a key of the
job's slot: one index key per namespace and slot, named by a *canonical tag* of that
slot (the first of ``0, 1, 2, ...`` in hex whose CRC16 falls in it). The scheme is the
same on every topology (a single server ignores slots), so the keys a step writes never
depend on where the server runs, and the views read the index keys that exist.

Cluster's slot of a key: CRC16 (XMODEM, as ``binascii.crc_hqx`` computes it) of its
hash tag, modulo 16384 (https://redis.io/docs/latest/operate/oss_and_stack/reference/cluster-spec/).
Every tag is at most 5 characters. Building the table of canonical tags takes some
315,000 CRCs of short strings (about 50 ms of CPU, paid by every process, the CLI's
included, at its first job key), so the package ships it, built by the same rule:
``slottags.txt`` (one tag per line, by slot), read once on first use. The test suite
checks the file against :func:`build`; a package without it builds the table instead.
"""

from __future__ import annotations

import binascii
import functools
from importlib import resources

SLOTS = 16384


def slot_of(tag: str) -> int:
    """The hash slot of a key whose hash tag is ``tag`` (non-empty)."""
    return binascii.crc_hqx(tag.encode("utf-8"), 0) % SLOTS


TABLE = "slottags.txt"
"""The shipped table of canonical tags (beside this module)."""


@functools.cache
def tags() -> tuple[str, ...]:
    """The canonical tag of every slot, by slot: the shipped table, or built if it is
    missing or not whole (read once; two threads that read it at once read the same
    table, and the cache keeps one, whole)."""
    try:
        shipped = tuple(resources.files(__package__).joinpath(TABLE).read_text("ascii").split())
    except (OSError, ValueError):
        shipped = ()
    return shipped if len(shipped) == SLOTS else build()


def build() -> tuple[str, ...]:
    """The canonical tag of every slot, by slot, computed: for each slot the first of
    ``0, 1, 2, ...`` in hex whose CRC16 falls in it."""
    table: list[str | None] = [None] * SLOTS
    left, i, crc = SLOTS, 0, binascii.crc_hqx
    while left:
        text = b"%x" % i
        slot = crc(text, 0) % SLOTS
        if table[slot] is None:
            table[slot] = text.decode("ascii")
            left -= 1
        i += 1
    return tuple(t for t in table if t is not None)


def tag_of_slot(slot: int) -> str:
    """The canonical tag of ``slot``: ``slot_of(tag_of_slot(s)) == s``."""
    return tags()[slot]


def same_slot_tag(tag: str) -> str:
    """The canonical tag of the slot that ``tag`` hashes to."""
    return tags()[slot_of(tag)]
