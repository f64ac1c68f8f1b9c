"""The compatibility pass (scripts/compat.sh) names test files by path: every one of
them must exist, or the pass stops on a file the suite no longer has."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_test_file_the_compatibility_pass_names_exists() -> None:
    script = (ROOT / "scripts" / "compat.sh").read_text(encoding="utf-8")
    listed = re.search(r"^TESTS=\((.*?)^\)", script, re.S | re.M)
    assert listed is not None, "scripts/compat.sh has no TESTS=( ... ) list"
    paths = listed.group(1).split()
    assert paths, "the compatibility pass names no test file"
    missing = [p for p in paths if not (ROOT / p).is_file()]
    assert missing == []
