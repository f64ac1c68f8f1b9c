"""A failure's text as the history keeps it: the frames ``format_tb`` would write, the
last ones that fit, read without parsing the source."""

from __future__ import annotations

import re
import traceback
from pathlib import Path

import pytest

from lockworker.model.history import TRACEBACK_CHARS, error_text, frame_lines

_MARKERS = re.compile(r"^ +[~^]+\n", re.MULTILINE)


def _deep(n: int) -> None:
    if n == 0:
        raise ValueError("the bottom")
    _deep(n - 1)


def _raised(depth: int) -> ValueError:
    try:
        _deep(depth)
    except ValueError as exc:
        return exc
    raise AssertionError("unreachable")


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_the_frames_read_as_format_tb_writes_them_without_the_markers(depth: int) -> None:
    exc = _raised(depth)
    assert exc.__traceback__ is not None
    expected = _MARKERS.sub("", "".join(traceback.format_tb(exc.__traceback__)))
    assert "".join(frame_lines(exc.__traceback__, TRACEBACK_CHARS)) == expected


def test_a_deep_traceback_keeps_its_last_frames_within_the_bound() -> None:
    exc = _raised(200)
    text = error_text(exc).traceback
    assert text is not None and len(text) <= TRACEBACK_CHARS
    assert text.endswith('raise ValueError("the bottom")\n')
    assert text.startswith('  File "')
    # No frame is cut in half: the text is whole frames, the failing one last.
    assert text.count("  File ") == text.count("\n    ")


def test_the_frames_read_past_the_bound_are_not_formatted() -> None:
    exc = _raised(200)
    assert exc.__traceback__ is not None
    lines = frame_lines(exc.__traceback__, TRACEBACK_CHARS)
    assert sum(len(line) for line in lines[1:]) <= TRACEBACK_CHARS < sum(map(len, lines))


def test_a_source_file_edited_since_it_was_read_shows_its_current_line(
    tmp_path: Path,
) -> None:
    module = tmp_path / "edited_module.py"
    module.write_text("def fail():\n    raise KeyError('first')\n")
    namespace: dict[str, object] = {}
    exec(compile(module.read_text(), str(module), "exec"), namespace)
    for text in ("first", "second"):
        try:
            namespace["fail"]()  # type: ignore[operator]
        except KeyError as exc:
            trace = error_text(exc).traceback
        assert trace is not None and f"raise KeyError('{text}')" in trace
        module.write_text("def fail():\n    raise KeyError('second')\n")
