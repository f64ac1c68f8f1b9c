"""The README's install from a built wheel: ``python -m build --wheel``, then
``pip install dist/lockworker-*.whl`` into a clean virtual environment.

The wheel is built from a copy of the source tree (the build writes ``build/`` and
``*.egg-info`` beside the sources). The clean environment gets the wheel alone
(``--no-deps --no-index``: nothing is fetched); its dependencies come from this
environment's site-packages, added after its own by a ``.pth`` file, so the
``lockworker`` it imports is the wheel's. Building in isolation fetches setuptools once
(pip caches it).
"""

from __future__ import annotations

import shutil
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from helpers import sh

import lockworker

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]



@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(
        ROOT / "lockworker", src / "lockworker",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    dist = tmp_path_factory.mktemp("dist")
    sh(sys.executable, "-m", "build", "--wheel", "--outdir", dist, src, cwd=src)
    (built,) = dist.glob(f"lockworker-{lockworker.__version__}-*.whl")
    return built


def test_the_wheel_ships_the_typing_marker_and_the_console_script(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        scripts = zf.read(entry_points).decode()
    assert "lockworker/py.typed" in names
    assert "lockworker/cli/main.py" in names
    assert not any(n.startswith("tests/") for n in names)
    assert "lockworker = lockworker.cli.main:main" in scripts


def test_the_installed_wheel_runs_the_lockworker_command(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    sh(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    sh(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
       "--disable-pip-version-check", "-q", wheel, cwd=tmp_path)
    site = sh(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
              cwd=tmp_path).stdout.strip()
    # the dependencies (redis, structlog, tenacity), after the venv's own site-packages
    (Path(site) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    where = sh(python, "-c", "import lockworker; print(lockworker.__file__)", cwd=tmp_path)
    assert Path(where.stdout.strip()).is_relative_to(venv)
    script = venv / "bin" / "lockworker"
    version = sh(script, "--version", cwd=tmp_path)
    assert version.stdout.strip() == f"lockworker {lockworker.__version__}"
    usage = sh(script, "--help", cwd=tmp_path)
    assert usage.stdout.startswith("usage: lockworker")
    for command in ("run", "submit", "status", "reset", "demo"):
        assert command in usage.stdout
    assert sh(script, "status", "--help", cwd=tmp_path).stdout.startswith(
        "usage: lockworker status"
    )
