"""The hook contract shared by :class:`~lockworker.Worker` and its subclasses.

======================  ================================================================
hook                    when, and in which thread
======================  ================================================================
``on_acquired(job)``    this process holds the job's lease for ``job.attempt``; runs in
                        the thread that called ``process``. Return normally: the job is
                        marked DONE. Raise: the attempt fails (the next process takes
                        the next attempt). Raise ``StopRequested``: handed over, no
                        attempt spent. Required.
``on_locked(job)``      another process holds the job; ``job.holder``/``job.attempt``
                        describe it. Once per attempt seen, in the ``process`` thread.
``on_failed(job, e)``   this process's attempt raised ``e``; before the lease is released.
``on_lost(job)``        this process can no longer be sure it holds the lease; exactly
                        once per attempt that ends other than cleanly, never after a
                        clean end (:mod:`lockworker.runtime.lease`). Runs in the
                        heartbeat thread, possibly *while* ``on_acquired`` still runs,
                        or in the ``process`` thread when ``on_acquired`` returns after
                        the lease ran out or the server refuses to settle. Keep it
                        short: set a flag, cancel work.
``on_gave_up(job)``     ``max_attempts`` were used up; once per ``process`` call that
                        ends in ``GAVE_UP``, in every process that sees it.
======================  ================================================================

On the asyncio side (:mod:`lockworker.aio`) an ``async def`` hook is awaited on the
event loop, and a plain function (passed, or a plain ``def`` override) runs in a worker
thread, as ``asyncio.to_thread`` would run it, so a blocking hook never stalls the loop.

Not guaranteed: that ``on_lost`` is only called after ``on_acquired`` started (a loss can
be found the moment a lease is granted, if the process was paused); that ``on_locked``
sees every attempt (a short attempt can start and end between two looks). An exception
raised by any hook other than ``on_acquired`` is logged as ``hook.error`` and ignored.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

from lockworker.errors import InvalidConfig, InvalidHook
from lockworker.runtime.events import HOOK_ERROR, EventLog, describe

HOOK_NAMES = ("on_acquired", "on_locked", "on_failed", "on_lost", "on_gave_up")


class Hooks:
    """The hooks of one Worker or Leader: built and checked once, called one way.

    A hook is either a function passed to the constructor or a method a subclass
    overrides; ``owner`` (the Worker or Leader) is where overrides live. Both classes
    use this one set, so they check, look up and guard their hooks alike.
    """

    def __init__(self, owner: object, base: type, given: dict[str, Any]) -> None:
        self._owner = owner
        self._base = base
        self._given = check_hooks(given)
        overridden = getattr(type(owner), "on_acquired", None) is not getattr(
            base, "on_acquired", None
        )
        self._missing = "on_acquired" not in self._given and not overridden

    def require(self, doing: str = "") -> None:
        """Raise :class:`~lockworker.InvalidConfig` if no ``on_acquired`` was given or
        overridden. A Worker checks it when it is asked to run jobs (``process``,
        ``serve``), not when it is built, so that an operator's script may build one
        without a hook to inspect and reset jobs; a Leader, which only leads, when it is
        built."""
        if self._missing:
            raise InvalidConfig(
                f"on_acquired is required{doing}: override it in a subclass or pass "
                "on_acquired=fn"
            )

    def given(self, name: str, *args: Any) -> Any:
        """Call the function passed as hook ``name``, if any (the base class's method);
        its result (an awaitable, for an ``async def`` hook of an asyncio object)."""
        fn = self._given.get(name)
        return None if fn is None else fn(*args)

    def guarded(self, log: EventLog, name: str, *args: Any) -> None:
        """Call hook ``name`` (the override, or the function given); its exceptions are
        logged as ``hook.error``, not raised (every hook but ``on_acquired``)."""
        try:
            getattr(self._owner, name)(*args)
        except Exception as exc:
            log.error(HOOK_ERROR, hook=name, error=describe(exc))


    async def given_async(self, name: str, *args: Any) -> None:
        """:meth:`given` for the asyncio objects: the function passed as hook ``name``,
        if any, run by :func:`run_hook` (on the loop if ``async def``, else in a thread)."""
        fn = self._given.get(name)
        if fn is not None:
            await run_hook(fn, *args)

    async def call_async(self, name: str, *args: Any) -> None:
        """Call hook ``name`` of an asyncio object: a subclass's override if there is
        one, else the function passed; each by :func:`run_hook`. Its exceptions
        propagate (``on_acquired``'s decide the attempt)."""
        if getattr(type(self._owner), name, None) is getattr(self._base, name, None):
            await self.given_async(name, *args)
        else:
            await run_hook(getattr(self._owner, name), *args)

    async def guarded_async(self, log: EventLog, name: str, *args: Any) -> None:
        """:meth:`guarded` for the asyncio objects (:meth:`call_async`)."""
        try:
            await self.call_async(name, *args)
        except Exception as exc:
            log.error(HOOK_ERROR, hook=name, error=describe(exc))


async def run_hook(fn: Callable[..., Any], *args: Any) -> None:
    """Run one hook of an asyncio object: a coroutine function is awaited on the loop; a
    plain function runs in a worker thread of the loop's default executor
    (``asyncio.to_thread``: the caller's context variables go with it), and an
    awaitable it returns is then awaited on the loop. Exceptions propagate either way.
    A cancelled caller stops waiting at once; the thread cannot be stopped, it runs to
    its end and its result is discarded."""
    if inspect.iscoroutinefunction(fn):
        await fn(*args)
        return
    result = await asyncio.to_thread(fn, *args)
    if inspect.isawaitable(result):
        await result


def check_hooks(given: dict[str, Any]) -> dict[str, Callable[..., Any]]:
    """The hooks passed as arguments, each checked to be callable (or left out if None)."""
    hooks: dict[str, Callable[..., Any]] = {}
    for name, fn in given.items():
        if fn is None:
            continue
        if not callable(fn):
            raise InvalidHook(f"{name} must be callable, got {type(fn).__name__}: {fn!r}")
        hooks[name] = fn
    return hooks
