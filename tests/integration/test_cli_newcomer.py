"""What a newcomer meets first, through the real ``lockworker`` command: the README's
daemon walk-through as written, a mistyped URL, a pipe into ``head``, ``--help``, a
misplaced option; and names with braces in them.

Every case runs the command as a subprocess against the suite's own server.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

import pytest
import redis
from helpers import wait_for
from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot
from server_process import ServerProcess

import lockworker
from lockworker.daemons.sources import stream_keys
from lockworker.model.keys import JobKeys, Space, escape
from lockworker.model.state import JobStatus
from lockworker.protocol import inspect
from lockworker.testing import RedisServer
from lockworker.testing.server import free_port

PASSWORD = "s3cr3t-pw"
BAD_URLS = [
    f"redis://:{PASSWORD}@127.0.0.1:notaport/0",
    f"redis://:{PASSWORD}@[::1/0",
    f"redis://:{PASSWORD}@127.0.0.1:6379/zero",
    f"redis://:{PASSWORD}@127.0.0.1:6379/0?frobnicate=1",
]
COMMANDS = [
    ["run", "lockworker.cli.demo_worker:DemoWorker", "--namespace", "n"],
    ["submit", "s", "j"],
    ["status"],
    ["status", "--json"],
    ["reset", "j", "--namespace", "n", "--yes"],
    ["demo", "--jobs", "3"],
]


def lockworker_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "lockworker", *args]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        lockworker_cmd(*args), capture_output=True, text=True, timeout=60, check=False,
        stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})},
    )


# -- the README's daemon walk-through, as written ---------------------------------------------

README = Path(__file__).resolve().parents[2] / "README.md"


def walkthrough() -> tuple[str, list[list[str]]]:
    """The README's daemon walk-through: the source of ``myapp/jobs.py`` and the shell
    commands (continuation lines joined, comments dropped), as written there."""
    text = README.read_text()
    code = re.search(r"```python\n(# myapp/jobs\.py\n.*?)```", text, re.S)
    shell = re.search(r"```sh\n(lockworker server\b.*?)```", text, re.S)
    assert code and shell, "the README's daemon walk-through is not where this test looks"
    lines = shell.group(1).replace("\\\n", " ").splitlines()
    return code.group(1), [cmd for line in lines if (cmd := shlex.split(line, comments=True))]


def option(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


class Walk:
    """The walk-through's processes and what it learnt so far, command by command."""

    def __init__(self, where: Path) -> None:
        self.where = where
        self.env = {k: v for k, v in os.environ.items() if k != "LOCKWORKER_REDIS_URL"}
        self.server: ServerProcess | None = None
        self.client: redis.Redis | None = None
        self.daemons: dict[str, tuple[subprocess.Popen[str], Path]] = {}
        self.files: list[IO[str]] = []
        self.stream = self.namespace = self.job_id = ""
        self.payload: object = None
        self.status = self.submitted = ""
        self.statuses: list[str] = []

    def do(self, cmd: list[str]) -> None:
        if cmd[0] == "export":
            assert self.server is not None
            name, _, value = cmd[1].partition("=")
            # what the server printed, but for the port this test gave it
            port = self.server.port
            assert (name, value) == ("LOCKWORKER_REDIS_URL",
                                     self.server.url.replace(f":{port}/", ":6379/"))
            self.env[name] = self.server.url
            self.client = redis.Redis.from_url(self.server.url, decode_responses=True)
        elif cmd[1] == "server":
            self.server = ServerProcess(self.where, *cmd[2:], "--port", str(free_port()))
        elif cmd[1] == "run":
            owner = option(cmd, "--owner")
            out = self.where / f"{owner}.out"
            self.files.append(out.open("w"))
            proc = subprocess.Popen(
                [sys.executable, "-m", *cmd], cwd=self.where, env=self.env,
                stdout=self.files[-1], stderr=self.files[-1], stdin=subprocess.DEVNULL, text=True,
            )
            self.daemons[owner] = (proc, out)
            self.stream, self.namespace = option(cmd, "--stream"), option(cmd, "--namespace")
        elif cmd[1] == "submit":  # once the daemons read the stream, as a user would wait
            self.job_id, self.payload = cmd[3], json.loads(cmd[4])
            wait_for(self.daemons_read, timeout=30)
            self.submitted = self.command(cmd)
        else:  # status, once the job is done
            wait_for(self.job_done, timeout=30)
            self.statuses.append(self.command(cmd))

    def daemons_read(self) -> bool:
        assert self.client is not None
        readers = stream_keys(self.stream).extra("readers")
        return all(self.client.zscore(readers, owner) is not None for owner in self.daemons)

    def job_done(self) -> bool:
        assert self.client is not None
        keys = JobKeys.of(self.namespace, self.job_id)
        return inspect(self.client, keys).status is JobStatus.DONE

    def command(self, cmd: list[str]) -> str:
        done = subprocess.run(
            [sys.executable, "-m", *cmd], cwd=self.where, env=self.env, capture_output=True,
            text=True, timeout=60, check=False, stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def close(self) -> None:
        for proc, _out in self.daemons.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        for file in self.files:
            file.close()
        if self.client is not None:
            self.client.close()
        if self.server is not None:
            self.server.kill()


@pytest.mark.processes
def test_the_readme_walkthrough_works_as_written(tmp_path: Path) -> None:
    """Each command of the walk-through in turn, from the directory that holds
    ``myapp/``: ``lockworker server`` (on a free port rather than 6379, which the machine
    may use), the export of the URL it printed, the primary and the backup, a submit,
    ``status`` (the primary and the backup listed), ``status --state done``. The job is
    done once, by the daemon ``status --state done`` names, with the token it shows;
    SIGTERM ends every process with exit 0."""
    source, commands = walkthrough()
    assert [cmd[:2] for cmd in commands] == [
        ["lockworker", "server"], ["export", commands[1][1]], ["lockworker", "run"],
        ["lockworker", "run"], ["lockworker", "submit"], ["lockworker", "status"],
        ["lockworker", "status"],
    ]
    assert commands[-2:] == [["lockworker", "status"],
                             ["lockworker", "status", "--state", "done"]]
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "jobs.py").write_text(source)
    walk = Walk(tmp_path)
    try:
        for cmd in commands:
            walk.do(cmd)
        plain, done = walk.statuses
        workers = [line.split()[:3] for line in plain.splitlines()
                   if line.split()[1:2] == [walk.namespace]]
        assert workers == [["host-a", walk.namespace, "primary"],
                           ["host-b", walk.namespace, "backup"]], plain
        row = next(line.split() for line in done.splitlines() if walk.job_id in line)
        walk.status = done
        assert row[:4] == ["job", walk.namespace, walk.job_id, "done"], walk.status
        assert row[5] == "1", walk.status  # one attempt
        holder, token = row[4], row[6]
        assert holder in walk.daemons
        # submit said what it added and how to follow the job: that command works.
        said, follow = walk.submitted.splitlines()
        assert said.startswith(f"submitted job '{walk.job_id}' to stream '{walk.stream}' ")
        assert follow.startswith("follow it: lockworker status --job ")
        command = shlex.split(follow.removeprefix("follow it: ").split(" (")[0])
        followed = walk.command(command).splitlines()
        assert followed[1].split()[2:5] == [walk.job_id, "done", holder], followed
        for owner, (proc, out) in walk.daemons.items():
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0, out.read_text()
            mailed = [line for line in out.read_text().splitlines() if "mailing" in line]
            expected = [f"mailing {walk.payload} with fencing token {token}"]
            assert mailed == (expected if owner == holder else []), out.read_text()
        assert walk.server is not None
        assert walk.server.stop() == (0, "")
    finally:
        walk.close()


# -- a bad URL: exit 2, one line naming it, the password masked ------------------------------


def check_one_line_exit_2(out: subprocess.CompletedProcess[str], prog: str, source: str,
                          url: str) -> None:
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"{prog}: {source}: invalid Redis URL ")
    assert repr(url.replace(PASSWORD, "***")) in lines[0]
    assert PASSWORD not in out.stderr + out.stdout


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_every_command_refuses_a_bad_url_in_one_line_with_the_password_masked(
    command: list[str],
) -> None:
    url = BAD_URLS[0]
    prog = f"lockworker {command[0]}"
    check_one_line_exit_2(run(*command, "--redis", url), prog, "--redis", url)
    check_one_line_exit_2(run("--redis", url, *command), prog, "--redis", url)
    if command[0] != "demo":  # the demo reads only --redis
        out = run(*command, env={"LOCKWORKER_REDIS_URL": url})
        check_one_line_exit_2(out, prog, "$LOCKWORKER_REDIS_URL", url)


@pytest.mark.parametrize("url", BAD_URLS, ids=["port", "ipv6", "db", "option"])
def test_every_kind_of_bad_url_is_one_line_and_exit_2(url: str) -> None:
    check_one_line_exit_2(run("status", "--redis", url), "lockworker status", "--redis", url)


# -- a closed pipe: quiet ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "codes"),
    [
        (["status", "--json"], {141}),
        (["status"], {141}),
        # argparse itself drops help text it cannot write; the exit code is then its own
        (["--help"], {0, 141}),
        (["run", "--help"], {0, 141}),
    ],
    ids=["status --json", "status", "--help", "run --help"],
)
def test_output_into_a_closed_pipe_ends_quietly(
    own_server: RedisServer, args: list[str], codes: set[int]
) -> None:
    """``lockworker status --json | head -c 10``: the reader is gone before the output
    (any output: the first write fails, so a server of the module's own will do)."""
    proc = subprocess.Popen(
        lockworker_cmd(*args, "--redis", own_server.url),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # nobody reads: every write to stdout fails with EPIPE
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) in codes, err
    assert err == ""  # no traceback, no "Exception ignored ... BrokenPipeError"


def test_a_shell_pipeline_into_head_ends_quietly(redis_server: RedisServer) -> None:
    command = " ".join(lockworker_cmd("status", "--json", "--redis", redis_server.url))
    out = subprocess.run(
        ["sh", "-c", f"{command} | head -c 10"], capture_output=True, text=True, timeout=60,
        check=False,
    )
    assert out.returncode == 0
    assert out.stdout == '{\n  "worke'  # the first 10 bytes: {"workers": ...}
    assert out.stderr == ""


# -- the command line ------------------------------------------------------------------------


def test_a_bad_value_of_a_global_option_before_the_command_names_the_option() -> None:
    out = run("--log-level", "nope", "status")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "lockworker: argument --log-level: invalid choice: 'nope' (choose from 'debug', "
        "'info', 'warning', 'error') (see lockworker --help)"
    ]


def test_an_unknown_argument_after_a_subcommand_is_reported_by_the_subcommand() -> None:
    out = run("run", "app:Worker", "--namespace", "n", "--bogus")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "lockworker run: unrecognized arguments: --bogus (see lockworker run --help)"
    ]


def test_help_shows_the_defaults_and_every_subcommand_describes_itself() -> None:
    expected = {
        "run": ["the lease: bounds the takeover after a crash (default: 10.0)",
                "before competing (default: 0.5)", "(default: primary)",
                "stopwaitsecs above it (default: 10.0)", "--max-attempts N Worker only: "
                "attempts before giving a job up (default: 5)", "(default: info)"],
        "status": ["(default: 86400, one day)", "(default: all)"],
        "reset": ["(default: 86400, one day)"],
        "submit": ["Add job JOB_ID"],
        "demo": ["(default: 30)", "(default: 6.0)", "(default: 1.0)", "(default: 0.3)",
                 "(default: an embedded server; $LOCKWORKER_REDIS_URL is not read)"],
        "server": ["export LOCKWORKER_REDIS_URL=...", "(default: 6379)",
                   "(default: 127.0.0.1)", "(default: a temporary directory, removed at exit)"],
        "check": ["(default: lockworker-check)", "(default: only report them)",
                  "(default: 1.0)"],
        "dashboard": ["(default: 127.0.0.1)", "(default: 8470)", "(default: read-only)",
                      "Needs pip install 'lockworker[dashboard]'"],
        "index": ["(default: all)", "(default: 86400, one day)", "safe to run again"],
    }
    # ten interpreters' starts: at most four at a time rather than one after another
    with ThreadPoolExecutor(max_workers=4) as pool:
        helps = dict(zip(expected, pool.map(lambda c: run(c, "--help"), expected), strict=True))
        out = run("--help")
    assert out.returncode == 0, out.stderr
    listed = re.findall(r"^    (\w+) ", out.stdout, re.M)
    assert listed == [
        "run", "submit", "status", "reset", "demo", "server", "check", "dashboard", "index"
    ]
    assert "a Redis-protocol server to try lockworker on" in " ".join(out.stdout.split())
    for command, fragments in expected.items():
        out = helps[command]
        assert out.returncode == 0, out.stderr
        text = " ".join(out.stdout.split())
        for fragment in fragments:
            assert fragment in text, (command, fragment)


# -- names with braces: one slot per job, whatever the braces -----------------------------------


def slot_of_job(job_id: str) -> int:
    return key_slot(("{" + escape(job_id) + "}").encode())


NAMES = st.text(
    alphabet=st.sampled_from("{}%:ab7 \u00e9"), min_size=1, max_size=12
).filter(str.strip)


@given(namespace=NAMES, job_id=NAMES)
def test_every_key_of_a_job_is_in_the_slot_of_its_escaped_id(
    namespace: str, job_id: str
) -> None:
    for space in Space:
        keys = JobKeys.of(namespace, job_id, space)
        for key in (keys.lock, keys.state, keys.wake, keys.extra("queue")):
            assert key_slot(key.encode()) == slot_of_job(job_id), key


def test_braces_in_a_namespace_and_a_job_id_on_a_real_server(
    redis_server: RedisServer,
) -> None:
    """A worker's keys in namespace ``x{y}z`` all share the job's slot; ``status``
    shows the names as given (``--state done``: from the keys a walk finds)."""
    namespace = f"x{{y}}z-{uuid.uuid4().hex[:8]}"
    job_id = "a{b}c}{"
    client = redis_server.client(decode_responses=True)
    worker = lockworker.Worker(client, namespace=namespace, on_acquired=lambda job: None)
    try:
        assert worker.process(job_id) is lockworker.Outcome.DONE
        written = list(client.scan_iter(match=f"lw:job:{escape(namespace)}:*"))
        assert JobKeys.of(namespace, job_id).state in written
        assert {key_slot(k.encode()) for k in written} == {slot_of_job(job_id)}
        lockworker.submit(client, namespace, job_id)
        stream = list(client.scan_iter(match=stream_keys(namespace).base + ":*"))
        assert stream and {key_slot(k.encode()) for k in stream} == {slot_of_job(namespace)}
        out = run("status", "--namespace", namespace, "--state", "done", "--json",
                  "--redis", redis_server.url)
        assert out.returncode == 0, out.stderr
        assert [(j["namespace"], j["id"]) for j in json.loads(out.stdout)["jobs"]] == [
            (namespace, job_id)
        ]
    finally:
        client.delete(*client.scan_iter(match=f"lw:*{escape(namespace)}*"))
        worker.close()
        client.close()
