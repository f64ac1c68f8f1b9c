"""The benchmark harness still runs end to end (``python -m benchmarks --quick``).

A smoke test only: it checks that every benchmark runs and the report is written, and
asserts nothing about speed (figures on a shared machine are not test material).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.processes


def test_quick_benchmark_run_writes_a_report(tmp_path: Path) -> None:
    output = tmp_path / "benchmarks.md"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--output", str(output)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = output.read_text(encoding="utf-8")
    for heading in (
        "## 1. Uncontended job cycle",
        "## 2. Handover after a failed attempt",
        "## 3. Takeover after SIGKILL",
    ):
        assert heading in report
    for row in ("| lockworker script |", "| lockworker txn |", "| redis-py Lock |"):
        assert row in report
    assert "job cycle, script protocol:" in done.stdout
