"""The contender loop driven by an asyncio task: :func:`lockworker.serving.contend.contest_steps`,
each of its calls awaited. The loop itself is the sync side's, to the line."""

from __future__ import annotations

from typing import Any

from lockworker.serving.contend import contest_steps


async def run(contest: Any) -> Any:
    """Run ``contest`` (whose I/O methods are coroutines) to its end."""
    steps = contest_steps(contest)
    reply: Any = None
    while True:
        try:
            name, args, kwargs = steps.send(reply)
        except StopIteration as end:
            return end.value
        reply = await getattr(contest, name)(*args, **kwargs)
