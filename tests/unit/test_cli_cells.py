"""The CLI's table cells: columns aligned exactly as a cell-by-cell padding would."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lockworker.cli.cells import aligned

cell = st.text(st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Zl", "Zp")))


def padded(cells: list[list[str]]) -> str:
    """The plain rule: every cell padded to its column's widest, two spaces apart, the
    line's trailing spaces dropped."""
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in cells
    )


@given(st.integers(1, 6).flatmap(
    lambda n: st.lists(st.lists(cell, min_size=n, max_size=n), min_size=1, max_size=8)
))
def test_aligned_pads_every_column_to_its_widest_cell(cells: list[list[str]]) -> None:
    assert aligned(cells) == padded(cells)


def test_braces_in_a_cell_are_text_not_a_format() -> None:
    assert aligned([["{0}", "{}"], ["a", "b"]]) == "{0}  {}\na    b"
