"""The file tree is the architecture: these rules keep it so.

Layers import only downwards (see docs/protocol.md and the module docstrings): leaf
modules import nothing of lockworker's but the leaf layer; the protocol knows nothing of
threads, waiting or hooks; decisions (policy) know nothing of Redis; nothing in the
library imports the CLI or the test helpers, and only the CLI configures logging. Time
and signals each come through one module, so tests can control them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "lockworker"
MODULES = sorted(p for p in PACKAGE.rglob("*.py"))

LEAF = {"errors", "clock", "keys", "codec", "state", "config"}
CORE = {"protocol", "scripts", "luacall", "txn", "policy"}
MECHANISMS = {"lease", "wake", "retry", "hooks", "job", "events", "signals", "term"}
PRODUCTS = {"worker", "jobrun", "serve", "sources", "leader", "primitives"}
MAX_LINES = 400


def name_of(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def lockworker_modules(path: Path) -> set[str]:
    return {
        m.split(".")[1] for m in imports(path) if m.startswith("lockworker.") and m.count(".") >= 1
    }


@pytest.mark.parametrize("path", MODULES, ids=name_of)
def test_no_module_is_too_long(path: Path) -> None:
    assert len(path.read_text().splitlines()) <= MAX_LINES


@pytest.mark.parametrize("path", MODULES, ids=name_of)
def test_only_the_clock_reads_time_and_only_signals_handles_signals(path: Path) -> None:
    if "testing" in path.parts:
        return  # the test helpers may wait for real processes
    found = {m.split(".")[0] for m in imports(path)}
    if path.name != "clock.py":
        assert "time" not in found
    if path.name != "signals.py":
        assert "signal" not in found


@pytest.mark.parametrize("path", [p for p in MODULES if p.stem in LEAF and p.parent == PACKAGE],
                         ids=name_of)
def test_leaf_modules_import_only_leaf_modules(path: Path) -> None:
    assert lockworker_modules(path) <= LEAF


@pytest.mark.parametrize("path", [p for p in MODULES if p.stem in CORE and p.parent == PACKAGE],
                         ids=name_of)
def test_the_core_knows_no_threads_waiting_or_hooks(path: Path) -> None:
    assert lockworker_modules(path) <= LEAF | CORE
    assert "threading" not in imports(path)


@pytest.mark.parametrize(
    "path", [p for p in MODULES if p.stem in MECHANISMS and p.parent == PACKAGE], ids=name_of
)
def test_mechanisms_never_import_the_products_built_on_them(path: Path) -> None:
    assert not lockworker_modules(path) & PRODUCTS


def test_the_layer_tables_name_modules_that_exist() -> None:
    """A renamed module must not silently drop out of the layer rules."""
    present = {p.stem for p in MODULES if p.parent == PACKAGE}
    assert (LEAF | CORE | MECHANISMS) - present == set()


def test_decisions_know_nothing_of_redis() -> None:
    assert not any(m.split(".")[0] == "redis" for m in imports(PACKAGE / "policy.py"))


EDGES = [p for p in MODULES if {"cli", "testing"} & set(p.parts) or p.name == "__main__.py"]


@pytest.mark.parametrize("path", [p for p in MODULES if p not in EDGES], ids=name_of)
def test_the_library_never_imports_the_cli_or_the_test_helpers(path: Path) -> None:
    assert not lockworker_modules(path) & {"cli", "testing"}


CONFIGURES_LOGGING = (
    "structlog.configure(", "basicConfig(", "dictConfig(", "addHandler(", "setLevel("
)


@pytest.mark.parametrize("path", [p for p in MODULES if "cli" not in p.parts], ids=name_of)
def test_only_the_cli_configures_logging(path: Path) -> None:
    """A library leaves ``logging`` and structlog to the application."""
    text = path.read_text()
    assert not [call for call in CONFIGURES_LOGGING if call in text]
