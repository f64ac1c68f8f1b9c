"""``MODULE:CLASS`` that cannot be loaded: one line that says where Python looked, what
was missing, and the near name of a misspelt module or class."""

from __future__ import annotations

import os
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockworker.cli.common import CliError
from lockworker.cli.target import load

JOBS = textwrap.dedent(
    """
    import lockworker

    class Digest(lockworker.Worker):
        def on_acquired(self, job):
            pass

    class Mailer(lockworker.Worker):
        def on_acquired(self, job):
            pass

    def helper():
        pass
    """
)


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A package of a name no other test uses, ``<name>/jobs.py``, under ``src/`` of
    the current directory (a temporary one); sys.path and sys.modules restored after."""
    name = f"app_{uuid.uuid4().hex[:8]}"
    package = tmp_path / "src" / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "jobs.py").write_text(JOBS)
    (package / "broken.py").write_text("import no_such_dependency_q\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield name
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]


def failure(target: str, app_dir: str = ".") -> str:
    with pytest.raises(CliError) as caught:
        load(target, app_dir)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_package_not_on_the_path_names_where_python_looked_and_app_dir(app: str) -> None:
    message = failure(f"{app}.jobs:Digest")
    cwd = os.getcwd()
    assert message.startswith(
        f"cannot import module '{app}.jobs': no module named '{app}' in --app-dir {cwd} "
        "(the current directory) nor elsewhere on sys.path ("
    )
    site = next(p for p in sys.path if p.endswith("site-packages"))
    assert site in message  # the other entries searched are named
    # It is one directory down: the hint says which --app-dir finds it.
    assert message.endswith(f"it is in {os.path.join(cwd, 'src')}: pass --app-dir src")
    assert load(f"{app}.jobs:Digest", "src").__name__ == "Digest"


def test_a_package_nowhere_near_suggests_running_from_its_directory(
    app: str, tmp_path: Path
) -> None:
    message = failure("nothing_like_it_q.jobs:Digest", str(tmp_path / "src" / app))
    assert message.endswith(
        "run lockworker from the directory that holds nothing_like_it_q/ (or "
        "nothing_like_it_q.py), or pass --app-dir DIR"
    )
    assert f"--app-dir {tmp_path / 'src' / app} nor" in message
    assert "(the current directory)" not in message


def test_a_misspelt_package_or_module_gets_a_did_you_mean(app: str) -> None:
    misspelt = app[:-1] + ("x" if app[-1] != "x" else "y")
    assert failure(f"{misspelt}.jobs:Digest", "src").endswith(
        f"; did you mean '{app}.jobs'?"
    )
    message = failure(f"{app}.jbos:Digest", "src")
    assert message.startswith(f"cannot import module '{app}.jbos': package '{app}' (")
    assert message.endswith(f"has no module 'jbos'; did you mean '{app}.jobs'?")


def test_a_missing_dependency_of_the_module_is_told_apart(app: str) -> None:
    assert failure(f"{app}.broken:Digest", "src") == (
        f"cannot import module '{app}.broken': it imports 'no_such_dependency_q', which "
        f"this Python ({sys.executable}) cannot find: No module named 'no_such_dependency_q'"
    )


def test_a_misspelt_class_gets_a_did_you_mean(app: str, tmp_path: Path) -> None:
    where = tmp_path / "src" / app / "jobs.py"
    assert failure(f"{app}.jobs:Digset", "src") == (
        f"module '{app}.jobs' ({where}) has no attribute 'Digset'; did you mean 'Digest'?"
    )
    assert failure(f"{app}.jobs:mailer", "src").endswith("; did you mean 'Mailer'?")
    # Nothing close: the module's daemon classes are listed instead.
    assert failure(f"{app}.jobs:Invoices", "src").endswith(
        "has no attribute 'Invoices'; its Worker and Leader classes: Digest, Mailer"
    )
    assert failure(f"{app}.jobs:Digest.Nope", "src") == (
        f"'{app}.jobs:Digest' has no attribute 'Nope'"
    )
