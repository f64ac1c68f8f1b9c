"""The asyncio twins take the same arguments as the sync classes: names, order, kinds
and defaults."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import lockworker
from lockworker import aio

TWINS: list[tuple[Any, Any]] = [
    (lockworker.Worker, aio.Worker),
    (lockworker.Leader, aio.Leader),
    (lockworker.Lock, aio.Lock),
    (lockworker.Semaphore, aio.Semaphore),
    (lockworker.Redlock, aio.Redlock),
    (lockworker.compute_once, aio.compute_once),
]


@pytest.mark.parametrize(("sync", "asyncio"), TWINS, ids=lambda t: t.__qualname__)
def test_an_asyncio_twin_takes_the_same_arguments(sync: Any, asyncio: Any) -> None:
    def shape(fn: Any) -> list[tuple[str, Any, Any]]:
        return [
            (p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()
        ]

    assert shape(asyncio) == shape(sync)


@pytest.mark.parametrize(
    ("sync", "asyncio"), [t for t in TWINS if inspect.isclass(t[0])],
    ids=lambda t: t.__qualname__,
)
def test_every_public_method_of_a_sync_class_has_its_twin(sync: Any, asyncio: Any) -> None:
    public = {name for name in dir(sync) if not name.startswith("_")}
    assert public <= {name for name in dir(asyncio) if not name.startswith("_")}
