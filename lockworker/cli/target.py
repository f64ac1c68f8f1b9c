"""Turning ``MODULE:CLASS`` into a daemon class (a Worker or Leader subclass, sync or
asyncio), or one clear error."""

from __future__ import annotations

import difflib
import importlib
import os
import pkgutil
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
    first on ``sys.path``; a clear one-line error if there is none: where Python looked
    for a module it could not find, and the near names of a misspelt one or attribute."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr or ":" in attr:
        raise CliError(f"expected MODULE:CLASS (e.g. myapp.jobs:Mailer), got {target!r}")
    path = os.path.abspath(app_dir)
    if path not in sys.path:
        sys.path.insert(0, path)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise CliError(not_found(module_name, exc, path)) from exc
    except Exception as exc:  # the module itself is broken: say how, in one line
        raise CliError(
            f"importing module {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    obj: object = module
    for depth, part in enumerate(attr.split(".")):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            what = (f"module {module_name!r}{_file_of(module)}" if depth == 0
                    else repr(module_name + ":" + ".".join(attr.split(".")[:depth])))
            raise CliError(
                f"{what} has no attribute {part!r}{near_attribute(obj, part)}"
            ) from None
    return obj


def not_found(module_name: str, exc: ModuleNotFoundError, app_dir: str) -> str:
    """Why ``module_name`` could not be imported, in one line.

    ``exc.name`` tells which module was missing: the target itself or one of its
    parent packages (then: where Python looked, and ``--app-dir``), or something the
    target imports (then: which one, and which Python did not find it).
    """
    missing = exc.name or module_name
    parts = module_name.split(".")
    prefixes = [".".join(parts[: i + 1]) for i in range(len(parts))]
    head = f"cannot import module {module_name!r}"
    if missing not in prefixes:
        return (f"{head}: it imports {missing!r}, which this Python ({sys.executable}) "
                f"cannot find: {exc}")
    parent, _, leaf = missing.rpartition(".")
    if parent:  # the package was found; the module in it was not
        package = sys.modules.get(parent)
        where = list(getattr(package, "__path__", []))
        shown = f" ({', '.join(where)})" if where else ""
        names = [m.name for m in pkgutil.iter_modules(where)]
        near = _did_you_mean(leaf, names, parent + ".")
        return f"{head}: package {parent!r}{shown} has no module {leaf!r}{near}"
    near = _did_you_mean(missing, [m.name for m in pkgutil.iter_modules([app_dir])],
                         suffix=module_name[len(missing):])
    return (f"{head}: no module named {missing!r} in {_app_dir(app_dir)} nor elsewhere "
            f"on sys.path ({', '.join(_others(app_dir))}){near or '; '}"
            f"{'' if near else _elsewhere(missing, app_dir)}")


def _app_dir(path: str) -> str:
    here = " (the current directory)" if path == os.getcwd() else ""
    return f"--app-dir {path}{here}"


def _others(app_dir: str) -> list[str]:
    """The other entries of ``sys.path`` that exist, in the order they are searched."""
    seen = {app_dir}
    shown = []
    for entry in sys.path:
        name = os.path.abspath(entry) if entry else os.getcwd()
        if name not in seen and os.path.exists(name):  # not a path hook's marker
            seen.add(name)
            shown.append(name)
    return shown


def _elsewhere(top: str, app_dir: str) -> str:
    """The hint: a directory below ``app_dir`` that holds ``top`` (``src/``, say), else
    where to run from."""
    try:
        children = sorted(e.path for e in os.scandir(app_dir)
                          if e.is_dir() and not e.name.startswith("."))
    except OSError:
        children = []
    for child in children[:MAX_LOOKED_AT]:
        if os.path.isdir(os.path.join(child, top)) or os.path.isfile(
            os.path.join(child, top + ".py")
        ):
            return f"it is in {child}: pass --app-dir {os.path.relpath(child)}"
    return (f"run lockworker from the directory that holds {top}/ (or {top}.py), or "
            "pass --app-dir DIR")


MAX_LOOKED_AT = 100
"""Subdirectories of ``--app-dir`` looked into for a module not found (a hint only)."""


def near_attribute(obj: object, name: str) -> str:
    """``; did you mean 'Digest'?``: the Worker and Leader classes of ``obj`` (a module)
    first, then its other public names; else the classes it has, if any."""
    public = [n for n in dir(obj) if not n.startswith("_")]
    classes = [n for n in public if _is_daemon_class(getattr(obj, n, None))]
    for pool in (classes, public):
        hint = _did_you_mean(name, pool)
        if hint:
            return hint
    if classes:
        return f"; its Worker and Leader classes: {', '.join(classes)}"
    return ""


def _is_daemon_class(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, KINDS) and value not in KINDS


def _did_you_mean(name: str, candidates: list[str], prefix: str = "", suffix: str = "") -> str:
    """``; did you mean 'X'?`` for the candidate closest to ``name`` (spelling, or case
    alone), shown between ``prefix`` and ``suffix``; empty if none is close."""
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    if not close:
        lowered = {c.lower(): c for c in candidates}
        close = [lowered[name.lower()]] if name.lower() in lowered else []
    return f"; did you mean {prefix + close[0] + suffix!r}?" if close else ""


def _file_of(module: object) -> str:
    where = getattr(module, "__file__", None)
    return f" ({where})" if where else ""


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
