"""``lockworker run --metrics-port/--metrics-host`` without Redis: parsing and start-up checks.

Every refusal here happens before anything connects: one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterator

import pytest
import structlog

import lockworker
from lockworker.cli.main import main, parse, tcp_port

APP = ["run", "lockworker.cli.demo_worker:DemoWorker", "--namespace", "n"]


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """In-process ``main()`` configures logging and structlog for this process: undo it."""
    was_configured, saved = structlog.is_configured(), structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    if was_configured:
        structlog.configure(**saved)
    else:
        structlog.reset_defaults()
    root.handlers[:] = handlers
    root.setLevel(level)


def test_no_metrics_unless_asked() -> None:
    args = parse(APP)
    assert (args.metrics_port, args.metrics_host) == (None, None)
    args = parse([*APP, "--metrics-port", "9464", "--metrics-host", "127.0.0.1"])
    assert (args.metrics_port, args.metrics_host) == (9464, "127.0.0.1")


def test_a_port_is_an_int_from_1_to_65535() -> None:
    assert tcp_port("1") == 1 and tcp_port("65535") == 65535
    for bad in ("0", "65536", "-1", "80.5", "http", "1e3"):
        with pytest.raises(argparse.ArgumentTypeError):
            tcp_port(bad)


@pytest.mark.parametrize("port", ["0", "70000", "x"])
def test_a_bad_metrics_port_is_one_line_and_exit_2(
    port: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        parse([*APP, "--metrics-port", port])
    assert exc.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("lockworker run: argument --metrics-port:")


def test_metrics_host_without_a_port_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*APP, "--metrics-host", "127.0.0.1", "--redis", "redis://127.0.0.1:1/0"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == "lockworker run: --metrics-host: only with --metrics-port"


def test_without_the_extra_metrics_port_names_it_before_anything_connects(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # what an absent one does
    monkeypatch.delitem(sys.modules, "lockworker.metrics", raising=False)
    monkeypatch.delattr(lockworker, "metrics", raising=False)  # imported by another test
    # Port 1 of the loopback has no server: a connection attempt would fail otherwise.
    code = main([*APP, "--metrics-port", "9464", "--redis", "redis://127.0.0.1:1/0"])
    assert code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("lockworker run: --metrics-port: ")
    assert "pip install 'lockworker[metrics]'" in line


def test_the_help_documents_both_options() -> None:
    from lockworker.cli.main import build_parser

    run = next(
        a.choices for a in build_parser()._actions
        if isinstance(a, argparse._SubParsersAction)
    )["run"]
    text = " ".join(run.format_help().split())
    assert "--metrics-port PORT" in text and "lockworker[metrics]" in text
    assert "(default: 0.0.0.0," in text
