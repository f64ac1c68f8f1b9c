"""How a ``lockworker run`` process ends on a signal before its daemon runs, and how it
ends at once.

A supervisor may stop a program that is still starting (supervisord stopping one in
its ``STARTING`` state): the SIGTERM can come while the application's module is being
imported, while Redis is connected to and checked, before the daemon's own handlers
(:func:`lockworker.cli.run_common.session`) are in place. Without handlers of its own
the process would die of the signal (exit -15). :class:`StartUp` holds handlers from
just after the command line is read until the daemon's replace them:

- the first signal raises :class:`StoppedWhileStarting` in the main thread, wherever
  it is (as Ctrl-C raises KeyboardInterrupt), so the start-up unwinds, closing what it
  opened; the command logs ``run.stopped_while_starting`` and exits 0, as a stop does.
  Nothing was taken yet, so there is nothing to hand over. Inside the event loop of an
  asyncio class the signal cancels the start-up's task instead (:meth:`StartUp.cancelling`),
  which unwinds at its next ``await``, and ends the same way.
- a second signal while that unwinds (or a first one that application code swallowed,
  if the start-up is still held up) ends the process at once, exit 130 and
  ``run.interrupted``, as a second signal does later.
- a signal swallowed by application code (an ``except BaseException`` around the
  import) is not lost: the daemon is not started, and the command stops as above.
- once the daemon's handlers were removed again (the daemon stopped, the process is
  closing its clients), a signal ends the process at once, as a second one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

from lockworker.cli.common import EXIT_INTERRUPTED, EXIT_OK
from lockworker.runtime import events
from lockworker.runtime.signals import raise_on_signals, waking

LAST_WORDS = 1.0
"""Seconds the last log line of an exit may take before the process exits anyway."""

UNWIND = 2.0
"""Seconds an asyncio start-up cancelled by a stop has to unwind before the process
ends anyway, exit 0 (nothing was taken yet): a library call that does not honour the
cancel (redis-py's connect waiting for an answer, in some of its states) cannot hold a
stopped process up to its socket timeout, or for ever."""

STOPPED_WHILE_STARTING = "run.stopped_while_starting"
INTERRUPTED = "run.interrupted"


class StoppedWhileStarting(BaseException):
    """A stop signal came before the daemon ran. A BaseException, as KeyboardInterrupt
    is: an ``except Exception`` in the application's module must not swallow it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class StartUp:
    """The stop signals of ``lockworker run`` before (and after) the daemon's own."""

    def __init__(self) -> None:
        self.signals: list[int] = []
        self.running = False
        self.unwound = threading.Event()
        """Set once a cancelled start-up has unwound (the command ends as a stop)."""
        self._cancel: Callable[[], object] | None = None

    def on_signal(self, signum: int) -> None:
        """The handler (in the main thread): raise the first (or, in an event loop,
        cancel the start-up's task), end at once on another."""
        self.signals.append(signum)
        if len(self.signals) == 1 and not self.running:
            if self._cancel is not None:
                self._cancel()
                self._deadline(signum)
                return
            raise StoppedWhileStarting(signum)
        exit_now(EXIT_INTERRUPTED, lambda: _log().warning(
            INTERRUPTED, signal=signum, exit_code=EXIT_INTERRUPTED,
            starting=not self.running,
        ))

    def _deadline(self, signum: int) -> None:
        """End the process, as a stop while starting, if the cancelled start-up has not
        unwound within :data:`UNWIND` seconds (and the daemon not started meanwhile)."""

        def overdue() -> None:
            if not self.running and not self.unwound.wait(UNWIND):
                exit_now(EXIT_OK, lambda: _log().info(
                    STOPPED_WHILE_STARTING, signal=signum, exit_code=EXIT_OK,
                    unwound=False,
                ))

        threading.Thread(target=overdue, name="lockworker-stopping", daemon=True).start()

    @contextlib.contextmanager
    def cancelling(self, task: asyncio.Task[Any]) -> Iterator[None]:
        """While the start-up runs as ``task`` in an event loop: a signal cancels the
        task, which unwinds at its next ``await`` (an exception raised in the loop's
        own machinery would leave the task's clean-up to the loop's shutdown)."""
        loop = task.get_loop()
        self._cancel = lambda: loop.call_soon_threadsafe(task.cancel)
        try:
            with waking(loop):  # a signal that lands in another thread wakes the loop
                yield
        finally:
            self._cancel = None

    def stopped(self, cancelled: asyncio.CancelledError) -> BaseException:
        """What a start-up cancelled by :meth:`cancelling` ends with: the stop, or
        ``cancelled`` itself if no signal cancelled it."""
        if self.signals:
            self.unwound.set()
            return StoppedWhileStarting(self.signals[0])
        return cancelled

    def handed_over(self) -> None:
        """The daemon's handlers are in place: from now on they stop it. A signal that
        came before and was swallowed on the way stops the command here, before the
        daemon runs."""
        if self.signals and not self.running:
            raise StoppedWhileStarting(self.signals[0])
        self.running = True


@contextlib.contextmanager
def guarded(enabled: bool) -> Iterator[StartUp | None]:
    """:class:`StartUp`'s handlers for the block (``enabled``: the ``run`` command)."""
    if not enabled:
        yield None
        return
    startup = StartUp()
    with raise_on_signals(startup.on_signal):
        yield startup


def stopped_while_starting(stop: StoppedWhileStarting, args: Any) -> int:
    """Log the stop the start-up ended with; the exit code of a stop."""
    _log(target=getattr(args, "target", None)).info(
        STOPPED_WHILE_STARTING, signal=stop.signum, exit_code=EXIT_OK,
    )
    return EXIT_OK


def _log(**context: Any) -> Any:
    return events.logger(events.CLI, None, **context)


def exit_now(code: int, last_words: Callable[[], None]) -> NoReturn:
    """Log ``last_words``, flush, and end the process with ``code`` without waiting for
    the threads (or the event loop) still running jobs (their leases run out; others
    take the jobs over).

    The line is written from a thread given :data:`LAST_WORDS` seconds, so a stalled
    stderr (a full pipe) cannot keep the process alive.
    """

    def say() -> None:
        last_words()
        for stream in (sys.stderr, sys.stdout):
            with contextlib.suppress(Exception):  # a closed stream: nothing more to say
                stream.flush()

    speaker = threading.Thread(target=say, name="lockworker-exit", daemon=True)
    speaker.start()
    speaker.join(LAST_WORDS)
    os._exit(code)
