"""Graceful stop on SIGTERM/SIGINT: the handler only sets a flag.

The first signal sets a flag and puts the previous handlers back, so a second signal
does what it did before: SIGINT raises KeyboardInterrupt, SIGTERM ends the process.
A caller that passes ``on_again`` (the ``lockworker`` command) keeps the handlers
instead, and a second signal calls ``on_again`` (which may end the process at once).
A small courier thread then calls ``on_stop`` (which stops the worker and wakes its
waiters), and another ``on_again``, outside the signal handler, where taking locks is
safe. The loop notices the
stop at safe points (between protocol steps, while waiting), never in the middle of a
transaction or a hook.
Handlers are installed only for the duration of the ``with`` block, only from the main
thread (Python allows no other), and the previous ones are always restored.

:func:`raise_on_signals` is for a phase with no loop to stop yet: its callback runs in
the handler itself and may raise there.

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
def stop_on_signals(
    on_stop: Callable[[int], None], *, enabled: bool = True,
    on_again: Callable[[int], None] | None = None,
) -> Iterator[bool]:
    """Call ``on_stop(signum)`` on the first SIGTERM/SIGINT inside the block, and
    ``on_again(signum)``, if given, on the second.

    A KeyboardInterrupt raised by a second SIGINT lands wherever the main thread is,
    and the threads still running jobs keep the process alive until they end: a caller
    that must end at once passes ``on_again`` (and calls ``os._exit`` in it).
    Yields whether handlers were installed (False off the main thread or if disabled).
    """
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield False
        return
    previous: dict[int, Any] = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    received: list[int] = []
    fired = threading.Event()
    again = threading.Event()

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    def handler(signum: int, frame: FrameType | None) -> None:
        # Only a flag: the main thread may be interrupted while it holds any lock
        # (a client's connection pool, a waiter registry), so calling into them here
        # could deadlock. ``on_stop`` runs in the thread below instead.
        received.append(signum)
        if on_again is None:
            restore()  # a second signal escalates to the previous behaviour
        elif len(received) > 1:
            again.set()
        fired.set()

    def deliver() -> None:
        fired.wait()
        if received:
            on_stop(received[0])

    def escalate() -> None:
        again.wait()
        if on_again is not None and len(received) > 1:
            on_again(received[1])

    courier = threading.Thread(target=deliver, name="lockworker-signals", daemon=True)
    courier.start()
    escalator: threading.Thread | None = None
    if on_again is not None:  # its own thread: on_stop may still be running
        escalator = threading.Thread(target=escalate, name="lockworker-signals-2", daemon=True)
        escalator.start()
    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)
    try:
        yield True
    finally:
        restore()
        fired.set()  # let the courier end (it calls on_stop only if a signal came)
        again.set()  # and the escalator (it calls on_again only if two came)
        for thread in (courier, escalator):
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout=5.0)


@contextlib.contextmanager
def raise_on_signals(on_signal: Callable[[int], None]) -> Iterator[bool]:
    """Call ``on_signal(signum)`` inside the handler itself on every SIGTERM/SIGINT in the
    block, so that it may raise, as SIGINT raises KeyboardInterrupt, wherever the main
    thread is: for a phase with no loop to stop yet, which ends by unwinding (the
    ``lockworker`` command's start-up, while it imports the application's module or
    connects). Installed only from the main thread; the previous handlers restored.
    """
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    previous: dict[int, Any] = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}

    def handler(signum: int, frame: FrameType | None) -> None:
        on_signal(signum)

    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)
    try:
        yield True
    finally:
        for stop_signal, before in previous.items():
            signal.signal(stop_signal, before)


@contextlib.contextmanager
def waking(loop: Any) -> Iterator[None]:
    """While the block runs ``loop`` in the main thread: a signal wakes the loop, so the
    Python handler runs at once, whichever thread the operating system delivered the
    signal to.

    Why: CPython runs a signal's Python handler in the main thread, but only once the
    main thread runs again. A signal the kernel delivers to another thread (asyncio's
    executor resolving a host name, a library's thread) does not interrupt the loop's
    ``select``, which then sleeps to its next timer (a socket timeout, seconds away)
    before the handler can cancel anything. A wake-up fd read by the loop ends that
    sleep. Nothing is done outside the main thread (``set_wakeup_fd`` refuses it)."""
    import socket  # noqa: PLC0415 (only here: the wake-up pair)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)

    def drain() -> None:
        with contextlib.suppress(OSError):
            reader.recv(4096)

    previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    loop.add_reader(reader.fileno(), drain)
    try:
        yield
    finally:
        loop.remove_reader(reader.fileno())
        signal.set_wakeup_fd(previous)
        reader.close()
        writer.close()
