"""Graceful stop on SIGTERM/SIGINT: the handler only sets a flag.

The first signal calls ``on_stop`` (which sets the worker's stop event) and puts the
previous handlers back, so a second signal does what it did before: SIGINT raises
KeyboardInterrupt, SIGTERM ends the process. The loop notices the stop at safe points
(between protocol steps, while waiting), never in the middle of a transaction or a hook.
Handlers are installed only for the duration of the ``with`` block, only from the main
thread (Python allows no other), and the previous ones are always restored.

The only module of lockworker that imports :mod:`signal`.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def stop_on_signals(on_stop: Callable[[int], None], *, enabled: bool = True) -> Iterator[bool]:
    """Call ``on_stop(signum)`` on the first SIGTERM/SIGINT inside the block.

    Yields whether handlers were installed (False off the main thread or if disabled).
    """
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield False
        return
    previous: dict[int, Any] = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    def handler(signum: int, frame: FrameType | None) -> None:
        restore()  # a second signal escalates to the previous behaviour
        on_stop(signum)

    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)
    try:
        yield True
    finally:
        restore()
