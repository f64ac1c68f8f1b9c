"""An earlier release of lockworker, for battery children that run it beside this one.

The recipe is tests/integration/test_rolling_upgrade.py's: the release's commit (its
tag ``v<version>``, else the commit whose message starts ``Release <version>``) is
archived, built into a wheel and installed alone in a virtual environment whose
dependencies are this one's (a ``.pth`` file). The interpreter is kept under the
system's temporary directory, named by the commit and the interpreter building it, so
the battery and the soak build it once per machine and environment; a half-built one
is never used (it is renamed into place last).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def release_commit(version: str) -> str | None:
    """The release's commit, or None outside a git checkout that has it."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        return None
    tagged = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"v{version}^{{commit}}"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    if tagged.returncode == 0 and tagged.stdout.strip():
        return tagged.stdout.strip()
    found = subprocess.run(
        ["git", "log", "--all", "--format=%H", f"--grep=^Release {version}", "-n", "1"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    ).stdout.strip()
    return found or None


def _run(*cmd: str | Path, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    out = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True,
                         timeout=300, check=False, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{cmd}:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return out.stdout


def release_python(version: str) -> Path | None:
    """An interpreter whose ``lockworker`` is release ``version`` (None: its commit is
    not at hand here)."""
    commit = release_commit(version)
    if commit is None:
        return None
    deps = sysconfig.get_paths()["purelib"]  # the dependencies it borrows: this venv's
    tag = hashlib.sha256(f"{commit}\0{sys.executable}\0{deps}".encode()).hexdigest()[:16]
    home = Path(tempfile.gettempdir()) / f"lockworker-release-{version}-{tag}"
    python = home / "venv" / "bin" / "python"
    if python.exists():
        return python
    work = Path(tempfile.mkdtemp(prefix=f"lockworker-release-{version}-"))
    try:
        src, dist, venv = work / "src", work / "dist", work / "venv"
        src.mkdir()
        archive = subprocess.run(["git", "archive", "--format=tar", commit], cwd=ROOT,
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
        _run(sys.executable, "-m", "build", "--wheel", "--outdir", dist, src, cwd=src)
        (wheel,) = dist.glob(f"lockworker-{version}-*.whl")
        _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=work)
        _run(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install",
             "--no-deps", "--no-index", "--disable-pip-version-check", "-q", wheel, cwd=work)
        site = _run(venv / "bin" / "python", "-c",
                    "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                    cwd=work).strip()
        (Path(site) / "deps.pth").write_text(deps + "\n")
        shutil.rmtree(src)
        try:
            work.rename(home)
        except OSError:  # another process put one in place meanwhile
            shutil.rmtree(work, ignore_errors=True)
        return python if python.exists() else None
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
