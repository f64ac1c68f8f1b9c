"""Imported by the ``--quick`` run's fork server (:data:`benchmarks.common.CHILD_MODULES`):
the worker frameworks of :mod:`benchmarks.peer_frameworks` that import here, loaded
once, so that each of their worker processes forked from it starts without paying for
the imports. A framework that fails to import is skipped (its row says why)."""

from __future__ import annotations

import contextlib
import importlib

from benchmarks.peer_frameworks import MODULES

for _module in (*MODULES.values(), "taskiq", "taskiq.api", "arq.connections",
                "dramatiq.brokers.redis"):
    with contextlib.suppress(Exception):
        importlib.import_module(_module)
