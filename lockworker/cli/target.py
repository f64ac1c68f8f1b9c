"""Turning ``MODULE:CLASS`` into a daemon class (a Worker or Leader subclass, sync or
asyncio), or one clear error."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from lockworker.aio.leader import Leader as AsyncLeader
from lockworker.aio.worker import Worker as AsyncWorker
from lockworker.cli.common import CliError
from lockworker.daemons.leader import Leader
from lockworker.daemons.worker import Worker

DaemonClass = type[Worker] | type[Leader] | type[AsyncWorker] | type[AsyncLeader]
KINDS = (Worker, Leader, AsyncWorker, AsyncLeader)
KIND_NAMES = (
    "lockworker.Worker, lockworker.Leader, lockworker.aio.Worker or lockworker.aio.Leader"
)


def load(target: str, app_dir: str = ".") -> DaemonClass:
    """The class named by ``target`` (``package.module:Class``), checked for its kind.

    ``app_dir`` goes first on ``sys.path`` (as the current directory does for
    ``python -m``), so ``lockworker run jobs:Mailer`` finds ``./jobs.py`` whether the
    command was started as a console script or as a module.
    """
    obj = resolve(target, app_dir)
    if isinstance(obj, type) and issubclass(obj, KINDS):
        return obj
    raise CliError(f"{target} is {_describe(obj)}, not a subclass of {KIND_NAMES}")


def resolve(target: str, app_dir: str = ".") -> object:
    """The object ``target`` (``package.module:Name``) names, imported with ``app_dir``
    first on ``sys.path``; a clear one-line error if there is none."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr or ":" in attr:
        raise CliError(f"expected MODULE:CLASS (e.g. myapp.jobs:Mailer), got {target!r}")
    path = os.path.abspath(app_dir)
    if path not in sys.path:
        sys.path.insert(0, path)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise CliError(f"cannot import module {module_name!r}: {exc}") from exc
    except Exception as exc:  # the module itself is broken: say how, in one line
        raise CliError(
            f"importing module {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise CliError(f"module {module_name!r} has no attribute {attr!r}") from None
    return obj


def is_leader(cls: Any) -> bool:
    """A Leader of either kind: it campaigns for a name rather than serving a stream."""
    return issubclass(cls, (Leader, AsyncLeader))


def is_asyncio(cls: Any) -> bool:
    """A ``lockworker.aio`` class: run under ``asyncio.run`` on a ``redis.asyncio`` client."""
    return issubclass(cls, (AsyncWorker, AsyncLeader))


def describe_kind(cls: Any) -> str:
    """``lockworker.aio.Leader`` and so on: the kind a class was accepted as."""
    base = next(kind for kind in KINDS if issubclass(cls, kind))
    return f"lockworker.{'aio.' if is_asyncio(cls) else ''}{base.__name__}"


def _describe(obj: object) -> str:
    if isinstance(obj, type):
        return f"the class {obj.__module__}.{obj.__qualname__}"
    return f"a {type(obj).__name__}"
