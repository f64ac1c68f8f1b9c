"""The folders are the architecture: these rules keep it so.

Each folder of the package is a layer and imports only from the layers below it
(docs/protocol.md has the map)::

    errors clock config     leaves: exceptions, time, every validator, the loops' drivers,
    steps redispy           the redis-py release a client needs
    model/                  values, the codec, keys, pure decisions (no Redis)
    protocol/               the interface, decoding, Lua, script and txn implementations
    runtime/                leases and heartbeats, wake-ups, retries, signals, events
    serving/                what the sync and asyncio sides share, without I/O of its own:
                            the contender loop, jobs, terms, hooks, settings, deliveries,
                            a backup's held-back decisions, the serving rules
    daemons/                the sync side: the worker, the leader, serve, sources, threads
    primitives/             lock, semaphore, redlock, compute_once
    aio/                    the asyncio twins: the same steps, loop and decisions, awaited;
                            built on serving/, never on the sync side's daemons/
    cli/  testing/ metrics  the edges: nothing in the library imports them
    cli/web/                the dashboard's web page (only the CLI's command imports it)

No module imports another in a cycle, whether at run time or only for type checking
(``TYPE_CHECKING`` blocks are imports too). Time and signals each come through one
module, so tests can control them; only the CLI configures logging.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "lockworker"
MODULES = sorted(PACKAGE.rglob("*.py"))
MAX_LINES = 400

LEAVES = {"errors", "clock", "config", "steps", "redispy"}
ORDER = ["leaf", "model", "protocol", "runtime", "serving", "daemons", "primitives", "aio"]
"""The layers from the bottom up; a module may import its own layer and those below."""
EDGES = {"cli", "testing", "metrics"}
"""``metrics`` is the one importer of prometheus_client (an extra), which the library
must never import. ``cli.web`` is the one importer of the
web libraries (the ``dashboard`` extra)."""
WEB_PAGE = "lockworker.cli.web"


def is_web(module: str) -> bool:
    """A module of the dashboard's web page."""
    return module == WEB_PAGE or module.startswith(WEB_PAGE + ".")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


NAMES = {module_name(p) for p in MODULES}


def layer(module: str) -> str:
    """``leaf``, a folder's name, or ``top`` (the package's own ``__init__``/``__main__``)."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "__main__":
        return "top"
    if len(parts) == 2 and parts[1] in LEAVES:
        return "leaf"
    return parts[1]


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def depends_on(path: Path) -> set[str]:
    """The lockworker modules ``path`` imports (a name imported from a package is the
    submodule when one has that name, else the package itself)."""
    wanted: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            wanted.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                wanted.add(sub if sub in NAMES else node.module)
    found = set()
    for name in wanted:
        if name == "lockworker" or name.startswith("lockworker."):
            known = name
            while known not in NAMES:
                known = known.rsplit(".", 1)[0]
            found.add(known)
    found.discard(module_name(path))
    return found


GRAPH = {module_name(p): depends_on(p) for p in MODULES}


@pytest.mark.parametrize("path", MODULES, ids=module_name)
def test_no_module_is_too_long(path: Path) -> None:
    assert len(path.read_text().splitlines()) <= MAX_LINES


@pytest.mark.parametrize("path", MODULES, ids=module_name)
def test_each_layer_imports_only_itself_and_the_layers_below(path: Path) -> None:
    own = layer(module_name(path))
    if own in EDGES or own == "top":
        return
    allowed = set(ORDER[: ORDER.index(own) + 1])
    wrong = {m for m in GRAPH[module_name(path)] if layer(m) not in allowed}
    assert not wrong, f"{module_name(path)} ({own}) imports {sorted(wrong)}"


def test_no_import_cycles() -> None:
    """Depth-first search over the whole package; a cycle is reported as its path."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            cycle = [*path[path.index(module):], module]
            pytest.fail("import cycle: " + " -> ".join(cycle))
        if module in done:
            return
        for dep in sorted(GRAPH.get(module, ())):
            visit(dep, [*path, module])
        done.add(module)

    for module in sorted(GRAPH):
        visit(module, [])


def test_every_module_belongs_to_a_layer() -> None:
    """A new top-level module must be placed in a folder (or be a leaf) on purpose."""
    known = {"leaf", "top", *ORDER, *EDGES}
    assert {m for m in NAMES if layer(m) not in known} == set()


@pytest.mark.parametrize("path", MODULES, ids=module_name)
def test_only_the_clock_reads_time_and_only_signals_handles_signals(path: Path) -> None:
    if "testing" in path.parts:
        return  # the test helpers may wait for real processes
    found = {m.split(".")[0] for m in imports(path)}
    if path.name != "clock.py":
        assert "time" not in found
    if path.name != "signals.py":
        assert "signal" not in found


@pytest.mark.parametrize(
    "path", [p for p in MODULES if layer(module_name(p)) in ("model", "protocol")],
    ids=module_name,
)
def test_the_protocol_and_the_model_know_no_threads_or_waiting(path: Path) -> None:
    assert not {"threading", "concurrent.futures"} & imports(path)


@pytest.mark.parametrize(
    "path", [p for p in MODULES if layer(module_name(p)) == "model"], ids=module_name
)
def test_the_model_knows_nothing_of_redis(path: Path) -> None:
    """Values, keys and decisions are pure: testable without a server or a client."""
    assert not any(m.split(".")[0] == "redis" for m in imports(path))


@pytest.mark.parametrize(
    "path", [p for p in MODULES if layer(module_name(p)) not in EDGES | {"top"}],
    ids=module_name,
)
def test_the_library_never_imports_the_cli_or_the_test_helpers(path: Path) -> None:
    assert not {layer(m) for m in GRAPH[module_name(path)]} & EDGES


@pytest.mark.parametrize("path", MODULES, ids=module_name)
def test_only_the_metrics_package_imports_prometheus_client(path: Path) -> None:
    """An optional extra: the library and the CLI work without it installed."""
    if layer(module_name(path)) != "metrics":
        assert "prometheus_client" not in {m.split(".")[0] for m in imports(path)}


WEB = {"starlette", "uvicorn", "jinja2"}


@pytest.mark.parametrize("path", MODULES, ids=module_name)
def test_only_the_dashboard_imports_the_web_libraries(path: Path) -> None:
    """The ``dashboard`` extra: the library and the other commands work without it;
    the CLI's ``dashboard`` command imports it (and uvicorn) only when it runs."""
    if not is_web(module_name(path)) and module_name(path) != "lockworker.cli.dashboard":
        assert not WEB & {m.split(".")[0] for m in imports(path)}


def test_nothing_but_the_dashboard_command_imports_the_dashboard() -> None:
    importers = {
        name for name, deps in GRAPH.items()
        if not is_web(name) and any(is_web(d) for d in deps)
    }
    assert importers <= {"lockworker.cli.dashboard"}


CONFIGURES_LOGGING = (
    "structlog.configure(", "basicConfig(", "dictConfig(", "addHandler(", "setLevel("
)


@pytest.mark.parametrize("path", [p for p in MODULES if "cli" not in p.parts], ids=module_name)
def test_only_the_cli_configures_logging(path: Path) -> None:
    """A library leaves ``logging`` and structlog to the application."""
    text = path.read_text()
    assert not [call for call in CONFIGURES_LOGGING if call in text]


AIO = [p for p in MODULES if layer(module_name(p)) == "aio"]
REPEATS = {
    "redis.call(": "Lua source (the scripts live in protocol/lua.py and primitives/)",
    "LuaScript(": "a script object of its own (import the sync side's)",
    "re.compile(": "a value grammar of its own (the codec owns it)",
    '"lw2': "a value format of its own (the codec owns it)",
    '"lw:': "a key layout of its own (model/keys.py owns it)",
    "def contest_steps": "a contender loop of its own (serving/contend.py owns it)",
}


@pytest.mark.parametrize("path", AIO, ids=module_name)
def test_aio_repeats_no_protocol_codec_or_decision(path: Path) -> None:
    """The asyncio side differs only in its I/O: it imports the scripts, the codec, the
    keys, the decisions and the contender loop and never writes its own."""
    text = path.read_text()
    assert not {marker: why for marker, why in REPEATS.items() if marker in text}


def test_aio_builds_on_the_shared_protocol_model_and_loop() -> None:
    """Positively: the asyncio side's steps, loop and decisions come from below."""
    used = set().union(*(GRAPH[module_name(p)] for p in AIO))
    for shared in (
        "lockworker.protocol.script", "lockworker.serving.contend", "lockworker.serving.runbase",
        "lockworker.serving.leadership", "lockworker.runtime.lease", "lockworker.runtime.retry",
        "lockworker.model.codec", "lockworker.primitives.common",
        "lockworker.primitives.redlockcore", "lockworker.primitives.masters",
    ):
        assert shared in used, f"lockworker.aio does not use {shared}"


@pytest.mark.parametrize("path", AIO, ids=module_name)
def test_no_aio_module_imports_the_sync_daemons(path: Path) -> None:
    """What the asyncio side shares with the sync side lies below both (``serving/``);
    ``daemons/`` is the sync side's own I/O (threads, the sync client), which the
    asyncio side never needs, not even for type checking."""
    assert not {m for m in GRAPH[module_name(path)] if layer(m) == "daemons"}
