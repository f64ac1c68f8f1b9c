"""The stream section's arithmetic: command names, the log's analysis, the verdicts.

Pure logic of the benchmark harness (``benchmarks/`` sits beside the package, not in
it): how a run's log becomes jobs/s, once-ness and the stall around a kill, how the
commands a client sends are named as ``INFO commandstats`` names them, and what the
report says bound a row and whether a target was met.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import report_stream, stream  # noqa: E402
from benchmarks.stream_kit import (  # noqa: E402
    Costs,
    Record,
    _scanned_names,
    analyse,
    command_name,
    packed_names,
)


def test_command_names_are_those_of_commandstats() -> None:
    assert command_name(("EVALSHA", "abc", 1, "k")) == "evalsha"
    assert command_name((b"XINFO", b"CONSUMERS", b"s", b"g")) == "xinfo|consumers"
    assert command_name(("XINFO CONSUMERS", "s", "g")) == "xinfo|consumers"
    assert command_name(("CLIENT", "SETINFO", "LIB-NAME", "x")) == "client|setinfo"
    assert command_name(("GET", "CLIENT")) == "get"


def pack(commands: list[tuple[object, ...]]) -> bytes:
    """RESP arrays of bulk strings, as a client writes its commands."""
    def bulk(arg: object) -> bytes:
        raw = arg if isinstance(arg, bytes) else str(arg).encode()
        return b"$%d\r\n%s\r\n" % (len(raw), raw)
    return b"".join(b"*%d\r\n" % len(c) + b"".join(map(bulk, c)) for c in commands)


def test_a_packed_batch_is_counted_by_the_names_of_its_commands() -> None:
    """A pipeline's commands reach the counting connection packed already."""
    commands = [
        ("EVALSHA", "abc", 1, b"k\r\n$3\r\n*2" * 50),
        ("XINFO", "CONSUMERS", "s", "g"),
        ("EVAL", "return 1", 0),
    ]
    packed = pack(commands)
    assert packed_names(packed) == ["evalsha", "xinfo|consumers", "eval"]
    assert _scanned_names(packed) == packed_names(packed)  # without hiredis


def test_a_clean_run_is_timed_to_the_last_first_run_of_a_job() -> None:
    records = [Record("a", 10.5, "primary-1"), Record("b", 11.0, "primary-1")]
    outcome = analyse(records, 2, start=10.0)
    assert outcome.exactly_once and outcome.at_least_once
    assert outcome.seconds == 1.0 and outcome.rate == 2.0
    assert outcome.by_role == {"primary": 2}


def test_a_kill_run_reports_reruns_the_first_job_after_and_the_stall() -> None:
    records = [
        Record("a", 1.0, "primary-7"), Record("b", 1.1, "primary-7"),  # killed at 1.2
        Record("b", 3.2, "backup-8"), Record("c", 3.3, "backup-9"), Record("d", 3.4, "backup-8"),
    ]
    outcome = analyse(records, 4, start=0.5, killed_at=1.2, killed="primary-7")
    assert outcome.at_least_once and not outcome.exactly_once
    assert (outcome.runs, outcome.distinct, outcome.twice) == (5, 4, 1)
    assert abs(outcome.first_after - 2.0) < 1e-9
    assert abs(outcome.stall - 2.1) < 1e-9  # from the last run before the kill (1.1)
    assert abs(outcome.seconds - 2.9) < 1e-9


def test_a_run_with_a_job_never_run_has_no_rate() -> None:
    outcome = analyse([Record("a", 1.0, "member-1")], 2, start=0.0)
    assert not outcome.at_least_once and outcome.rate != outcome.rate  # NaN


def _row(
    name: str, rate_seconds: float, *, cpu: float, handler: float, busiest: float = 0.0
) -> stream.Row:
    contender = next(c for c in stream.CONTENDERS if c.name == name)
    outcome = analyse([Record(f"j{n}", n * rate_seconds, "primary-1") for n in range(1, 101)],
                      100, start=0.0)
    costs = Costs(100, round_trips=300, server=Counter({"evalsha": 200, "rpush": 100}),
                  client_cpu=cpu, handler_seconds=handler, busiest_cpu=busiest)
    return stream.Row(contender, [outcome], [costs], [outcome.seconds])


def test_the_bound_is_the_cores_a_process_the_handler_or_the_round_trips() -> None:
    # 100 jobs in 1 s: 2 cores busy -> the cores.
    assert report_stream.bound(
        _row(stream.FANOUT_16, 0.01, cpu=2.0, handler=0.001), 2).startswith("the cores")
    # Concurrency 1, a 10 ms handler: at most 100 jobs/s, and 100 were served.
    assert report_stream.bound(
        _row(stream.CONTENDERS[0].name, 0.01, cpu=0.2, handler=0.01), 2).startswith("the handler")
    neither = report_stream.bound(
        _row(stream.CONTENDERS[0].name, 0.01, cpu=0.2, handler=0.001, busiest=0.6), 2)
    assert neither.startswith("neither") and "one core (0.60 of a core busy)" in neither
    # 1.2 of 2 cores busy in all, but the busiest process kept its one core busy.
    assert report_stream.bound(
        _row(stream.FANOUT_16, 0.01, cpu=1.2, handler=0.001, busiest=0.95), 2
    ).startswith("the busiest process's one core")


def test_the_serve_target_divides_the_best_serve_row_by_the_primary_only_group() -> None:
    section = stream.StreamSection(100, 1, 1.0, 10.0, 2)
    section.rows = [
        _row(stream.FANOUT_16, 0.001, cpu=0.1, handler=0.001),  # 1,000 jobs/s
        _row(stream.PRIMARY_ONLY, 0.00118, cpu=0.1, handler=0.001),  # 847 jobs/s
        stream.Row(next(c for c in stream.CONTENDERS if c.name == stream.GROUP_3),
                   error="not available: no group="),
        _row(stream.ALL_READ, 0.0005, cpu=0.1, handler=0.001),
    ]
    found = {target.split(" >=")[0]: met for target, _, met in report_stream.targets(section)}
    assert found["`serve()` primary + 2 backups"] is True  # 1.18x
    assert found["shared group of 3 (`group=`)"] is None  # not measured, and says why
    section.rows[1] = _row(stream.PRIMARY_ONLY, 0.0007, cpu=0.1, handler=0.001)
    found = {target.split(" >=")[0]: met for target, _, met in report_stream.targets(section)}
    assert found["`serve()` primary + 2 backups"] is False


def test_each_target_names_the_floor_of_per_job_keys_beside_it() -> None:
    section = stream.StreamSection(100, 1, 1.0, 10.0, 2)
    section.rows = [
        _row(stream.FANOUT_16, 0.002, cpu=0.1, handler=0.001),  # 500 jobs/s
        _row(stream.PRIMARY_ONLY, 0.001, cpu=0.1, handler=0.001),  # 1,000 jobs/s
        _row(stream.GROUP_3, 0.002, cpu=0.1, handler=0.001),  # 500 jobs/s
        _row(stream.ALL_READ, 0.0005, cpu=0.1, handler=0.001),  # 2,000 jobs/s
    ]

    def measured() -> dict[str, str]:
        return {target.split(" >=")[0]: text for target, text, _ in report_stream.targets(section)}

    assert all("floor" not in text for text in measured().values())  # no floor row ran
    section.rows += [
        _row(stream.FLOOR_FANOUT, 0.00125, cpu=0.1, handler=0.001),  # 800 jobs/s
        _row(stream.FLOOR_GROUP, 0.001, cpu=0.1, handler=0.001),  # 1,000 jobs/s
    ]
    found = measured()
    assert "floor row) reach 800 jobs/s = 0.80x" in found["`serve()` primary + 2 backups"]
    assert "floor row) reach 1,000 jobs/s = 0.50x" in found["shared group of 3 (`group=`)"]


def test_the_page_says_what_a_day_at_1000_jobs_a_second_keeps_with_the_defaults() -> None:
    """The records of the last ``done_retention`` (an hour), each as large as the DONE
    record measured, against the 1 GiB target: met at 162 B, not at 400 B."""
    from benchmarks import report_memory
    from benchmarks.stream_memory import MemoryRun

    small = MemoryRun(jobs=100, done_record=162.0, done_keys="state")
    assert report_memory.day_kept(small) == 1000 * 3600 * 162.0
    table = "\n".join(report_memory.memory(small))
    assert "a day at 1,000 jobs/s keeps, with the defaults | 0.54 GiB" in table
    assert "target <= 1 GiB: met" in table
    large = MemoryRun(jobs=100, done_record=400.0, done_keys="state")
    assert "target <= 1 GiB: **not met**" in "\n".join(report_memory.memory(large))
