"""examples/monitoring: the alert rules pass ``promtool check rules`` and their unit tests
(``promtool test rules``), and every metric the rules and the Grafana dashboard name is
in the exposition of real ``lockworker run --metrics-port`` daemons that did some work.

promtool comes from Debian's ``prometheus`` package: without it these tests skip,
except under ``.ci/run`` (``$LOCKWORKER_CI``), which installs it, where they fail."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import need_binary, reap, wait_for
from prometheus_client.parser import text_string_to_metric_families

import lockworker
from lockworker.daemons.sources import stream_keys
from lockworker.testing import RedisServer
from lockworker.testing.server import free_port

pytestmark = pytest.mark.processes

MONITORING = Path(__file__).resolve().parents[2] / "examples" / "monitoring"
RULES = MONITORING / "lockworker-alerts.yml"
RULE_TESTS = MONITORING / "lockworker-alerts.test.yml"
DASHBOARD = MONITORING / "lockworker-dashboard.json"
NAME = re.compile(r"\blockworker_[a-z0-9_]+")

APP = textwrap.dedent(
    """
    import lockworker

    class Picky(lockworker.Worker):
        def on_acquired(self, job):
            if (job.payload or {}).get("fail"):
                raise RuntimeError("asked to fail")

    class Boss(lockworker.Leader):
        def on_acquired(self, term):
            while not term.wait(0.05):
                pass
    """
)

SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = need_binary("promtool", "prometheus")
    return subprocess.run(
        [tool, *args], cwd=MONITORING, capture_output=True, text=True, timeout=60, check=False
    )


def test_the_alert_rules_pass_promtool_check() -> None:
    out = promtool("check", "rules", RULES.name)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_the_alert_rules_pass_their_unit_tests() -> None:
    out = promtool("test", "rules", RULE_TESTS.name)
    assert out.returncode == 0, out.stdout + out.stderr


def referenced() -> dict[str, set[str]]:
    """The metric names each file names: the rules' text, the dashboard's queries."""
    queries = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            queries.extend(str(v) for k, v in node.items() if k in ("expr", "definition"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(DASHBOARD.read_text()))
    return {
        RULES.name: set(NAME.findall(RULES.read_text())),
        DASHBOARD.name: set(NAME.findall(" ".join(queries))),
    }


def exposed(text: str) -> set[str]:
    """Every series name the exposition can hold: its samples', and each declared
    family's (a labelled metric with no child yet is declared without samples)."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.update(sample.name for sample in family.samples)
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ("",)))
    return names


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        return str(reply.read().decode())


def scrape_when_up(port: int) -> str:
    """:func:`scrape`, or nothing while the daemon's port is not listening yet (a wait's
    condition: the daemon starts in its own time)."""
    try:
        return scrape(port)
    except urllib.error.URLError:
        return ""


def sample(text: str, metric: str, /, **labels: str) -> float | None:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == metric and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return None


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    reap(started)


def test_every_metric_the_rules_and_the_dashboard_name_is_exported(
    redis_server: RedisServer, namespace: str, tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],
) -> None:
    """A worker daemon does a job and gives one up, a leader daemon leads: the union
    of their expositions holds every name the rules and the dashboard use."""
    (tmp_path / "monitoring_app.py").write_text(APP)
    client = redis_server.client(decode_responses=True)
    stream, ports = f"{namespace}-jobs", {"worker": free_port(), "leader": free_port()}
    common = ["--app-dir", str(tmp_path), "--redis", redis_server.url, "--lock-timeout", "2",
              "--metrics-host", "127.0.0.1"]
    for kind, target, extra in (
        ("worker", "Picky", ["--stream", stream, "--max-attempts", "1"]),
        ("leader", "Boss", []),
    ):
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "lockworker", "run", f"monitoring_app:{target}", *common,
             "--namespace", namespace, "--owner", kind, "--metrics-port", str(ports[kind]),
             *extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ))
    wait_for(lambda: client.zscore(stream_keys(stream).extra("readers"), "worker") is not None,
             timeout=30)
    lockworker.submit(client, stream, "fine")
    lockworker.submit(client, stream, "broken", {"fail": True})

    def worked() -> bool:
        text = scrape_when_up(ports["worker"])
        return all(
            sample(text, "lockworker_job_outcomes_total", namespace=namespace, outcome=o) == 1
            for o in ("done", "failed", "gave_up")
        )

    wait_for(worked, timeout=30)
    wait_for(lambda: sample(scrape_when_up(ports["leader"]), "lockworker_leader",
                            name=namespace) == 1, timeout=30)
    names = exposed(scrape(ports["worker"])) | exposed(scrape(ports["leader"]))
    wanted = referenced()
    assert all(wanted.values()), wanted  # each file names metrics
    missing = {file: sorted(used - names) for file, used in wanted.items() if used - names}
    assert not missing, f"named but not exported: {missing}"
    client.close()
