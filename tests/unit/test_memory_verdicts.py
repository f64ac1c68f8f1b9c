"""The memory checks' verdicts, from plain values: used memory against the limit, and
whether a day more at the rate the key count grows would fit."""

from __future__ import annotations

import pytest

from lockworker.model import servercheck as sc
from lockworker.model.servercheck import Status

MIB = 1 << 20
GIB = 1 << 30


@pytest.mark.parametrize(
    ("used", "maxmemory", "system", "status", "words"),
    [
        (79 * MIB, 100 * MIB, None, Status.OK, "of 100.0 MiB maxmemory (79%)"),
        (81 * MIB, 100 * MIB, 64 * GIB, Status.WARNING, "of 100.0 MiB maxmemory (81%)"),
        (7 * GIB, 0, 8 * GIB, Status.WARNING, "8.0 GiB host memory (88%), no maxmemory set"),
        (1 * GIB, 0, 8 * GIB, Status.OK, "host memory"),
        (1 * GIB, 0, None, Status.UNKNOWN, "used 1.0 GiB"),
        (1 * GIB, None, None, Status.UNKNOWN, "used 1.0 GiB"),
        (None, 100 * MIB, None, Status.UNKNOWN, "unknown"),
    ],
)
def test_memory_warns_past_eighty_percent_of_the_limit(
    used: int | None, maxmemory: int | None, system: int | None, status: Status, words: str
) -> None:
    found = sc.memory_use(used, maxmemory, system)
    assert found.status is status
    assert words in found.value
    if status is Status.WARNING:
        assert "lockworker status" in found.fix and "retention" in found.fix
        assert "80%" in found.meaning
    if status in (Status.OK, Status.WARNING) and used is not None:
        assert found.measure == pytest.approx(used / (maxmemory or system or 1))


def growth(**changes: object) -> sc.Finding:
    values: dict[str, object] = dict(
        keys_before=100_000, keys_after=100_000, seconds=300.0, used=200 * MIB,
        dataset=100 * MIB, maxmemory=GIB, system=None,
    )
    values.update(changes)
    return sc.memory_growth(**values)  # type: ignore[arg-type]


def test_a_steady_key_count_fits_whatever_is_used() -> None:
    assert growth().status is Status.OK
    assert growth(keys_after=90_000).status is Status.OK
    assert "not growing" in growth(used=GIB - 1).meaning


def test_a_day_at_the_rate_the_keys_grow_is_projected_at_the_datasets_bytes_a_key() -> None:
    # 100 MiB / 100,030 keys: ~1 KiB a key (the dataset's, not the server's overhead).
    # +30 keys in 300 s: 8,640 keys a day, 8.6 MiB: fits in 1 GiB with 200 MiB used.
    calm = growth(keys_after=100_030)
    assert calm.status is Status.OK and "a day adds 8.6 MiB" in calm.value
    assert calm.measure == pytest.approx((200 * MIB + 8640 * 100 * MIB / 100_030) / GIB)
    # +3,000 keys in 300 s: 864,000 a day, 864 MiB: with 200 MiB used, over 1 GiB.
    busy = growth(keys_after=103_000)
    assert busy.status is Status.WARNING
    assert "+3000 keys in 300 s" in busy.value and "over 1.0 GiB maxmemory" in busy.value
    assert "would not fit" in busy.meaning and "retention" in busy.fix
    assert busy.measure is not None and busy.measure > 1


def test_without_the_dataset_figure_used_memory_sets_the_bytes_a_key() -> None:
    assert growth(keys_after=100_030, dataset=None).value.count("2.0 KiB a key") == 1


def test_without_a_limit_or_a_reading_growth_is_unknown() -> None:
    assert growth(keys_after=103_000, maxmemory=0).status is Status.UNKNOWN
    assert growth(keys_after=103_000, maxmemory=0, system=64 * GIB).status is Status.OK
    assert growth(keys_before=None).status is Status.UNKNOWN
    assert growth(seconds=0.0).status is Status.UNKNOWN
    assert growth(seconds=1.04).value == "+0 keys in 1.0 s"


def test_settings_read_memory_and_keys_from_info() -> None:
    info = {"used_memory": "123", "used_memory_dataset": 100, "total_system_memory": 999,
            "db0": {"keys": 5, "expires": 1}, "db3": {"keys": 2}, "dbfilename": "x"}
    values = sc.settings({"maxmemory": "1000"}, info)
    assert (values["used"], values["dataset"], values["system"], values["keys"]) == (
        123, 100, 999, 7)
    assert values["maxmemory"] == 1000
    assert sc.settings({}, {"used_memory": 1})["keys"] == 0
    assert sc.settings({}, {})["keys"] is None


def test_a_finding_keeps_its_measure_on_a_server() -> None:
    found = sc.memory_use(90, 100, None).on("10.0.0.5:6379")
    assert found.server == "10.0.0.5:6379" and found.measure == pytest.approx(0.9)
    assert found.as_dict()["measure"] == pytest.approx(0.9)
