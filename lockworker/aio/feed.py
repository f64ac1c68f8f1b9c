"""A source's deliveries on the event loop, for ``aio`` serving
(:mod:`lockworker.aio.serve`): an async source awaited, a collection in memory read
on the loop, any other sync source (a generator, a stream) read in a worker thread,
:data:`CHUNK` deliveries per hop at most, so a blocking read never stalls the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncGenerator, Iterator
from typing import Any, Protocol

from lockworker.serving.delivery import Delivery, as_source


class Feeder(Protocol):
    """What reading a source needs of the worker; :class:`lockworker.aio.Worker` is one."""

    _source_stops: set[threading.Event]
    _stop_events: set[asyncio.Event]

    @property
    def stopping(self) -> bool: ...

    def _stop_event(self) -> asyncio.Event: ...


async def deliveries(
    source: object, worker: Feeder, blocking: bool
) -> AsyncGenerator[Delivery, None]:
    """The deliveries of ``source``; a ``blocking`` source is read in a worker thread.

    A sync source gets a stop flag of its own, set by the worker's stop and when the
    serving ends: a cancelled ``serve`` waits for the read in flight to see it, then
    closes the source, so no reader thread goes on reading.
    """
    if hasattr(source, "__aiter__"):
        async for item in _until_stopped(source, worker):
            yield item if isinstance(item, Delivery) else Delivery(*item)
        return
    stop = threading.Event()
    worker._source_stops.add(stop)
    if worker.stopping:
        stop.set()
    sync = as_source(source).deliveries(stop)
    hint = source if hasattr(source, "buffered") else None
    reading: asyncio.Future[tuple[list[Delivery], bool]] | None = None
    try:
        while True:
            if blocking:
                reading = asyncio.ensure_future(asyncio.to_thread(_take, sync, hint))
                chunk, ended = await asyncio.shield(reading)
            else:
                delivery = next(sync, None)
                chunk, ended = ([], True) if delivery is None else ([delivery], False)
            for delivery in chunk:
                yield delivery
            if ended:
                return
    finally:
        stop.set()
        worker._source_stops.discard(stop)
        if reading is not None and not reading.done():
            await asyncio.wait([reading])  # the source ends its read now it is stopped
            if not reading.cancelled():
                reading.exception()  # read, so never reported as unretrieved
        close = getattr(sync, "close", None)
        if close is not None:
            await asyncio.to_thread(close)


CHUNK = 64
"""Deliveries a blocking source hands over in one hop to the loop's thread, at most."""


def _take(sync: Iterator[Delivery], hint: Any) -> tuple[list[Delivery], bool]:
    """In a worker thread: the next delivery (waiting for it if need be), and those the
    source already holds (``hint.buffered``: entries read, not yet delivered), up to
    :data:`CHUNK`; and whether the source ended. One thread hop per chunk, not per
    delivery."""
    taken: list[Delivery] = []
    while len(taken) < CHUNK and (not taken or (hint is not None and hint.buffered > 0)):
        delivery = next(sync, None)
        if delivery is None:
            return taken, True
        taken.append(delivery)
    return taken, False


async def _until_stopped(source: Any, worker: Feeder) -> AsyncGenerator[Any, None]:
    """The items of an async iterable until it ends or the worker is stopped, even while
    it waits for its next item (an idle queue): the wait is cancelled then."""
    items = source.__aiter__()
    stopped = worker._stop_event()
    try:
        while not stopped.is_set():
            following = asyncio.ensure_future(items.__anext__())
            stopping = asyncio.ensure_future(stopped.wait())
            await asyncio.wait({following, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if not following.done():
                following.cancel()
                await asyncio.wait({following})
                return
            try:
                item = following.result()
            except StopAsyncIteration:
                return
            if stopped.is_set():
                return
            yield item
    finally:
        worker._stop_events.discard(stopped)
        close = getattr(items, "aclose", None)
        if close is not None:
            with contextlib.suppress(Exception):
                await close()
