"""Loops written once for the sync and the asyncio side, without I/O.

A loop that talks to Redis is a generator (:data:`Steps`): it yields each call that
does I/O, bound to its arguments, and is sent that call's result back. The sync side
makes the call in its thread (:func:`drive`); the asyncio side awaits the awaitable the
call returns (:func:`adrive`). So the decisions between the calls (a primitive's
acquire loop, how a batch is sent) are written once, and each side only says how a
call is made. The contender loop of a job (:mod:`lockworker.serving.contend`) follows
the same idea with named steps.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, TypeVar

R = TypeVar("R")

Steps = Generator[Callable[[], Any], Any, R]
"""A loop that yields its I/O as zero-argument calls and returns its result."""


def drive(steps: Steps[R]) -> R:
    """Run ``steps`` to its end, making each call it yields in this thread."""
    reply: Any = None
    while True:
        try:
            call = steps.send(reply)
        except StopIteration as end:
            return end.value  # type: ignore[no-any-return]
        reply = call()


async def adrive(steps: Steps[R]) -> R:
    """Run ``steps`` to its end, awaiting what each call it yields returns."""
    reply: Any = None
    while True:
        try:
            call = steps.send(reply)
        except StopIteration as end:
            return end.value  # type: ignore[no-any-return]
        reply = await call()
