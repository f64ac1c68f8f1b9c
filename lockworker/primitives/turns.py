"""One primitive object, many threads: whose turn it is to use it.

A ``Lock``, ``Semaphore`` or ``Redlock`` object is one holder: its state (the value
it holds, the token, the renewal) is that of one acquisition. Two threads acquiring
through one object at once would each get a run of their own from Redis, but the
second grant would overwrite the first's state: one hold would never be released
(its renewal running on), the other released twice. So an object is *used* by one
thread at a time, from the start of an acquire to the end of its hold:

- A ``Lock`` or ``Redlock`` object shared by threads is a mutex for them, as a
  ``threading.Lock`` is: an acquire while another thread is acquiring or holding
  waits its turn (first come, first served, within its own timeout; a non-blocking
  one returns False), then acquires with a run id of its own. Any thread may release.
- A ``Semaphore`` object holds one permit: taking turns would quietly make its
  threads share that one permit, so another thread's acquire is refused
  (:class:`~lockworker.errors.ConcurrentUse`).
- The thread that holds it acquiring again is refused either way
  (:class:`~lockworker.errors.AlreadyHeld`): it would wait for itself.

:class:`TurnsCore` is the bookkeeping, without waiting; :class:`Turns` waits in a
thread, :class:`lockworker.aio.turns.AsyncTurns` in a task (a task is the asyncio
side's unit of use).
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Generic, TypeVar

from lockworker.clock import Clock
from lockworker.errors import AlreadyHeld, ConcurrentUse

W = TypeVar("W")
"""What a waiter waits on: a ``threading.Event``, an ``asyncio.Event``."""


class TurnsCore(Generic[W]):
    """Who uses one object now (acquiring or holding), and who waits for it, in order.

    :param what: the object, for messages (``"Lock 'report'"``).
    :param share: wait for the user to finish (a lock); False: refuse (a semaphore).
    :param by: what a user is called in messages (``thread``, ``task``).
    """

    def __init__(self, what: str, *, share: bool, by: str) -> None:
        self.what = what
        self.share = share
        self.by = by
        self._mutex = threading.Lock()
        self._user: object = None
        """The thread (or task) using the object; None when it is free."""
        self._queue: deque[tuple[object, W]] = deque()

    def _waiter(self) -> W:
        raise NotImplementedError

    def _wake(self, waiter: W) -> None:
        raise NotImplementedError

    def _enter(self, me: object, blocking: bool) -> bool | W:
        """True: ``me`` uses the object now; False: it is busy and ``me`` does not
        wait; else what to wait on (set once the turn passes to ``me``)."""
        with self._mutex:
            if self._user is None:
                self._user = me
                return True
            if self._user == me:
                raise AlreadyHeld(
                    f"{self.what} is already held (or being acquired) by this object in "
                    f"this {self.by}: it is not re-entrant"
                )
            if not self.share:
                raise ConcurrentUse(
                    f"{self.what} is in use by another {self.by} (acquiring or holding): "
                    f"one object holds one permit at a time; make one object per "
                    f"{self.by} that takes a permit"
                )
            if not blocking:
                return False
            waiter = self._waiter()
            self._queue.append((me, waiter))
            return waiter

    def _settle(self, me: object, waiter: W) -> bool:
        """After a wait: True if the turn passed to ``me``; else ``me`` leaves the queue."""
        with self._mutex:
            for entry in self._queue:
                if entry[1] is waiter:
                    self._queue.remove(entry)
                    return False
            return True

    def give(self) -> None:
        """The user is done (released, or its acquire failed): the next waiter's turn."""
        with self._mutex:
            if self._queue:
                self._user, waiter = self._queue.popleft()
                self._wake(waiter)
            else:
                self._user = None

    def take(self, clock: Clock, blocking: bool, deadline: float | None) -> Any:
        """Use the object: True at once, or once the turn comes; False if it does not
        come by ``deadline`` (or at once, without ``blocking``). The sync side returns
        the bool, the asyncio one a coroutine."""
        raise NotImplementedError


class Turns(TurnsCore[threading.Event]):
    """The turns of an object's threads."""

    def __init__(self, what: str, *, share: bool) -> None:
        super().__init__(what, share=share, by="thread")

    def _waiter(self) -> threading.Event:
        return threading.Event()

    def _wake(self, waiter: threading.Event) -> None:
        waiter.set()

    def take(self, clock: Clock, blocking: bool, deadline: float | None) -> bool:
        me = threading.get_ident()
        got = self._enter(me, blocking)
        if isinstance(got, bool):
            return got
        try:
            if deadline is None:
                got.wait()
            else:
                clock.wait(got, deadline - clock.monotonic())
        except BaseException:  # an interrupt: a turn that came meanwhile passes on
            if self._settle(me, got):
                self.give()
            raise
        return self._settle(me, got)
