"""Graceful stop on SIGTERM/SIGINT: the handler only sets a flag.

The first signal sets a flag and puts the previous handlers back, so a second signal
does what it did before: SIGINT raises KeyboardInterrupt, SIGTERM ends the process. A
small courier thread then calls ``on_stop`` (which stops the worker and wakes its
waiters) outside the signal handler, where taking locks is safe. The loop notices the
stop at safe points (between protocol steps, while waiting), never in the middle of a
transaction or a hook.
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
    received: list[int] = []
    fired = threading.Event()

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    def handler(signum: int, frame: FrameType | None) -> None:
        # Only a flag: the main thread may be interrupted while it holds any lock
        # (a client's connection pool, a waiter registry), so calling into them here
        # could deadlock. ``on_stop`` runs in the thread below instead.
        restore()  # a second signal escalates to the previous behaviour
        received.append(signum)
        fired.set()

    def deliver() -> None:
        fired.wait()
        if received:
            on_stop(received[0])

    courier = threading.Thread(target=deliver, name="lockworker-signals", daemon=True)
    courier.start()
    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)
    try:
        yield True
    finally:
        restore()
        fired.set()  # let the courier end (it calls on_stop only if a signal came)
        if courier is not threading.current_thread():
            courier.join(timeout=5.0)
