"""The parent's side of the fault battery: servers, child processes, live histories.

A :class:`Fleet` starts child processes (:mod:`faults.child`), each with its own history
file, and follows those files as they grow (:class:`Tail`) so a scenario can pick its
fault moments: who holds a section right now. Servers are always started here
(``RedisServer`` on free loopback ports), never found.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import redis

import lockworker
from lockworker.testing import RedisServer

from .history import Final, History, Violation, load
from .index import Checked, check_servers
from .store import FencedStore

T = TypeVar("T")

TESTS_DIR = Path(__file__).resolve().parent.parent
LIBRARY_ROOT = Path(lockworker.__file__).resolve().parent.parent
"""Where the parent's ``lockworker`` comes from: children import the same one."""
DURABLE = ("--appendonly", "yes", "--appendfsync", "always")
"""Server arguments under which every acknowledged write survives a SIGKILL."""
TWINS = {"worker": "aworker", "lock": "alock", "leader": "aleader", "redlock": "aredlock"}
"""Each sync child kind and its asyncio twin (:mod:`faults.child`)."""
WORKERS = ("worker", "aworker")


def kind_of(mode: str, asynchronous: bool) -> str:
    """The child kind of ``mode``'s role on the sync or the asyncio side."""
    sync = next((s for s, a in TWINS.items() if mode in (s, a)), mode)
    return TWINS[sync] if asynchronous else sync


def is_async(mode: str) -> bool:
    return mode in TWINS.values()


def wait_for(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.01) -> T:
    """Poll ``predicate`` until it is truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"not within {timeout} s: {what}")
        time.sleep(interval)


def restart(server: RedisServer, down_for: float = 0.0) -> None:
    """SIGKILL ``server`` and start it again on the same port (same data directory)."""
    port = server.port
    server.kill()
    if down_for > 0:
        time.sleep(down_for)
    server.start(port=port)


ASYNCIO_DEATHS = ("Task exception was never retrieved", "Exception in callback")
"""How an event loop reports, on stderr, a task or callback that died of an exception."""


def deaths(lines: Sequence[str]) -> list[tuple[str, str]]:
    """Threads (``thread_died``) and asyncio tasks or callbacks (``task_died``) that died
    of an exception, as a process's stderr reports them: (kind, which and why)."""
    out = []
    for n, line in enumerate(lines):
        if line.startswith("Exception in thread"):
            out.append(("thread_died", f"{line.rstrip(':')}: {exception_line(lines[n + 1:])}"))
        elif line.startswith(ASYNCIO_DEATHS):
            # after the loop's "future: <Task ...>" or "handle: <Handle ...>" line
            out.append(("task_died", f"{line}: {exception_line(lines[n + 2:])}"))
    return out


def exception_line(lines: Sequence[str]) -> str:
    """The first ``SomeError: message`` line of a traceback."""
    for line in lines:
        if line[:1].isspace() or line.startswith(("Traceback", "During", "The above")):
            continue
        return line
    return "no exception line"


@dataclass
class Child:
    name: str
    mode: str
    config: dict[str, Any]
    path: Path
    proc: subprocess.Popen[bytes]
    killed: bool = False
    python: Path | None = None
    """The interpreter it runs on, if not the parent's (another release's, with its own
    ``lockworker``)."""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None


@dataclass
class _FileState:
    offset: int = 0
    buffer: bytes = b""
    run: str | None = None
    ready: bool = False
    exited: bool = False
    open: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Sections started and not ended: sid -> start event."""


class Tail:
    """Follows history files as they grow: who is ready, who holds what now."""

    def __init__(self) -> None:
        self._files: dict[Path, _FileState] = {}

    def poll(self, path: Path) -> _FileState:
        state = self._files.setdefault(path, _FileState())
        try:
            with path.open("rb") as f:
                f.seek(state.offset)
                data = f.read()
        except FileNotFoundError:
            return state
        state.offset += len(data)
        lines = (state.buffer + data).split(b"\n")
        state.buffer = lines.pop()
        for line in lines:
            if not line.strip():
                continue
            event = json.loads(line)
            state.run = event["run"]
            if event["ev"] == "start":
                state.open[event["sid"]] = event
            elif event["ev"] == "end":
                state.open.pop(event["sid"], None)
            elif event["ev"] == "note" and event["what"] == "ready":
                state.ready = True
            elif event["ev"] == "note" and event["what"] == "exit":
                state.exited = True
        return state


class Fleet:
    """The child processes of one scenario, and their history files."""

    def __init__(self, workdir: Path, **defaults: Any) -> None:
        self.workdir = workdir.resolve()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.stop_file = self.workdir / "stop"
        self.defaults = defaults
        self.children: list[Child] = []
        self.tail = Tail()
        self._seq = itertools.count()

    def spawn(
        self, mode: str, *, name: str | None = None, python: Path | None = None, **config: Any
    ) -> Child:
        """Start a child of kind ``mode``; on ``python`` (another release's interpreter,
        whose ``lockworker`` it then imports instead of the parent's), if given."""
        n = next(self._seq)
        label = name or f"{mode}{n}"
        path = self.workdir / f"{n:04d}-{label}.jsonl"
        full = {
            **self.defaults, **config, "mode": mode, "history": str(path),
            "stop_file": str(self.stop_file),
        }
        # Run in the work directory (not the current one, which may hold another
        # lockworker tree) with the parent's lockworker first on the path (another
        # release's interpreter: only the battery's modules, its own lockworker).
        env = dict(os.environ)
        paths = (str(TESTS_DIR),) if python else (
            str(TESTS_DIR), str(LIBRARY_ROOT), env.get("PYTHONPATH", ""))
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        with path.with_suffix(".err").open("wb") as err:
            proc = subprocess.Popen(
                [str(python or sys.executable), "-m", "faults.child", json.dumps(full)],
                cwd=self.workdir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=err,
            )
        child = Child(label, mode, full, path, proc, python=python)
        self.children.append(child)
        return child

    def respawn(self, child: Child, mode: str | None = None, **changes: Any) -> Child:
        """A new process with ``child``'s settings (and ``changes``), of ``child``'s kind
        unless ``mode`` is given (its twin on the other side, say)."""
        config = {k: v for k, v in child.config.items()
                  if k not in ("mode", "history", "stop_file")}
        config.update(changes)
        return self.spawn(mode or child.mode, name=child.name, python=child.python, **config)

    def live(self, *modes: str) -> list[Child]:
        """The children alive now (of ``modes`` only, if given)."""
        return [c for c in self.children if c.alive() and (not modes or c.mode in modes)]

    def modes(self) -> dict[str, str]:
        """The kind of every process that recorded anything: run -> mode."""
        out = {}
        for child in self.children:
            run = self.state(child).run
            if run is not None:
                out[run] = child.mode
        return out

    def state(self, child: Child) -> _FileState:
        return self.tail.poll(child.path)

    def holding(self, child: Child) -> list[dict[str, Any]]:
        """Sections ``child`` has started and not ended (as far as its file shows)."""
        if not child.alive():
            return []
        return list(self.state(child).open.values())

    def holders(
        self, candidates: Sequence[Child] | None = None
    ) -> list[tuple[Child, dict[str, Any]]]:
        found = []
        for child in candidates if candidates is not None else self.live():
            for section in self.holding(child):
                found.append((child, section))
        return found

    def wait_holder(
        self, candidates: Callable[[], Sequence[Child]] | None = None, timeout: float = 15.0
    ) -> tuple[Child, dict[str, Any]]:
        """A live child holding a section now, the most recently started first."""
        def pick() -> tuple[Child, dict[str, Any]] | None:
            found = self.holders(candidates() if candidates is not None else None)
            return max(found, key=lambda cs: cs[1]["t"]) if found else None
        found = wait_for(pick, timeout, "a child holding a section")
        assert found is not None
        return found

    def wait_ready(self, child: Child, timeout: float = 20.0) -> None:
        wait_for(lambda: self.state(child).ready or not child.alive(), timeout,
                 f"{child.name} ready")

    def kill(self, child: Child) -> None:
        if child.alive():
            child.proc.send_signal(signal.SIGKILL)
        child.proc.wait(10)
        child.killed = True

    def stop(self) -> None:
        """Ask every looping child (locks, leaders, redlocks) to end."""
        self.stop_file.touch()

    def wait_exit(self, children: Sequence[Child], timeout: float) -> None:
        wait_for(lambda: not any(c.alive() for c in children), timeout,
                 f"{[c.name for c in children if c.alive()]} to exit")

    def failures(self, allowed: Sequence[int] = ()) -> list[Violation]:
        """What the children's stderr shows went wrong inside them.

        ``crashed``: a child died on its own with an error, an exception having escaped
        the library's API (say, a raw connection error where ``RedisUnavailable`` is
        promised). ``thread_died``: a background thread died of an exception (the
        process lives on without it). ``task_died``: the same for an asyncio task (a
        task whose exception nobody retrieved, or a callback that raised), as the event
        loop reports it. The exception's line says which.
        """
        out = []
        for child in self.children:
            err = child.path.with_suffix(".err")
            lines = [ln for ln in err.read_text(errors="replace").splitlines() if ln.strip()]
            for kind, what in deaths(lines):
                out.append(Violation(kind, child.name, f"{child.mode} process {child.pid}: {what}"))
            code = child.proc.poll()
            if child.killed or code is None or code == 0 or code in allowed:
                continue
            out.append(Violation(
                "crashed", child.name,
                f"{child.mode} process {child.pid} exited with status {code}: "
                f"{lines[-1] if lines else 'no output'}",
            ))
        return out

    def history(self) -> History:
        return load(c.path for c in self.children if c.path.exists())

    def count_notes(self, what: str) -> int:
        return sum(1 for n in self.history().notes if n.get("what") == what)

    def close(self) -> None:
        self.stop()
        for child in self.children:
            if child.alive():
                child.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.proc.wait(10)


@dataclass
class Env:
    """Servers and clients of one scenario."""

    workdir: Path
    servers: list[RedisServer]
    store_server: RedisServer
    store: FencedStore
    namespace: str
    fleet: Fleet
    forgotten: set[tuple[str, str]] = field(default_factory=set)
    """(namespace, job id) of jobs whose keys the scenario deleted (their records'
    expiry, done by hand): their index entries may outlive them (:mod:`faults.index`)."""
    indexed: Checked = field(default_factory=Checked)
    """What the index check compared, once run."""

    @property
    def server(self) -> RedisServer:
        return self.servers[0]

    def client(self, index: int = 0) -> redis.Redis:
        return self.servers[index].client(socket_timeout=5.0)

    def index_check(self) -> list[Violation]:
        """The index of every namespace against its job states, on every server
        (:mod:`faults.index`): run once every process has stopped."""
        self.indexed = check_servers(
            [self.client(i) for i in range(len(self.servers))], self.forgotten
        )
        return self.indexed.violations

    def finals(self, jobs: Sequence[str]) -> dict[str, Final]:
        """Each job's state at the end, read through the public API."""
        with lockworker.Worker(
            self.client(), namespace=self.namespace, on_acquired=lambda _job: None,
            handle_signals=False,
        ) as reader:
            out = {}
            for job in jobs:
                snap = reader.inspect(job)
                out[job] = Final(snap.status.value, snap.token, snap.attempt)
            return out


@contextlib.contextmanager
def environment(
    workdir: Path, *, masters: int = 1, server_args: tuple[str, ...] = (), **defaults: Any
) -> Iterator[Env]:
    """Start the servers (lockworker's and the store's) and a fleet using them."""
    started: list[RedisServer] = []
    try:
        store_server = RedisServer().start()
        started.append(store_server)
        servers = []
        for _ in range(masters):
            server = RedisServer(extra_args=server_args).start()
            started.append(server)
            servers.append(server)
        namespace = f"faults-{uuid.uuid4().hex[:10]}"
        fleet = Fleet(
            workdir,
            urls=[s.url for s in servers],
            store_url=store_server.url,
            store_ns=namespace,
            namespace=namespace,
            **defaults,
        )
        store = FencedStore(store_server.client(socket_timeout=10.0), namespace)
        try:
            yield Env(workdir, servers, store_server, store, namespace, fleet)
        finally:
            fleet.close()
    finally:
        for server in started:
            server.close()
