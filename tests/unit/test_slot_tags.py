"""The shipped table of canonical slot tags is the one the rule builds, and a package
without it still works (it builds the table)."""

from __future__ import annotations

from importlib import resources

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockworker.model import slots


def test_the_shipped_table_is_the_built_one() -> None:
    shipped = resources.files("lockworker.model").joinpath(slots.TABLE).read_text("ascii")
    assert tuple(shipped.split()) == slots.build()
    assert slots.tags() == slots.build()


@pytest.mark.parametrize("text", [None, "", "0\n1\n2\n"])
def test_a_missing_or_partial_table_is_built_instead(
    monkeypatch: pytest.MonkeyPatch, text: str | None
) -> None:
    class Table:
        def joinpath(self, _name: str) -> Table:
            return self

        def read_text(self, _encoding: str) -> str:
            if text is None:
                raise FileNotFoundError(slots.TABLE)
            return text

    monkeypatch.setattr(slots.resources, "files", lambda _package: Table())
    slots.tags.cache_clear()
    try:
        assert slots.tags() == slots.build()
    finally:
        slots.tags.cache_clear()


@given(st.integers(min_value=0, max_value=slots.SLOTS - 1))
def test_each_slots_tag_hashes_to_it_and_is_the_first_that_does(slot: int) -> None:
    tag = slots.tag_of_slot(slot)
    assert slots.slot_of(tag) == slot
    assert all(slots.slot_of(f"{i:x}") != slot for i in range(int(tag, 16)))
