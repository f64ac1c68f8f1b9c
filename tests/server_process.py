"""A ``lockworker server`` process, as a newcomer starts it: what it printed (the URL
to export, its directory), and stopping it by a signal."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

from helpers import wait_for

EXPORT = re.compile(r"^  export LOCKWORKER_REDIS_URL=(redis://127\.0\.0\.1:(\d+)/0)$", re.M)
FILES = re.compile(r" its files in (\S+) ")


class ServerProcess:
    """``lockworker server ARGS`` started in ``tmp_path``, once it printed its URL."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.out = tmp_path / f"server-{len(list(tmp_path.glob('server-*.out')))}.out"
        with self.out.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "lockworker", "server", *args], stdout=out,
                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
            )
        try:
            found = wait_for(self._export, timeout=30)
        except BaseException:
            self.kill()
            raise
        self.url, self.port = found.group(1), int(found.group(2))
        files = FILES.search(self.text())
        assert files, self.text()
        self.directory = Path(files.group(1))

    def _export(self) -> re.Match[str] | None:
        if self.proc.poll() is not None:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(
                f"lockworker server exited {self.proc.returncode}: {self.text()}{err}"
            )
        return EXPORT.search(self.text())

    def text(self) -> str:
        return self.out.read_text()

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> tuple[int, str]:
        """Send ``sig``; the exit code and stderr once it ended."""
        self.proc.send_signal(sig)
        _out, err = self.proc.communicate(timeout=30)
        return self.proc.returncode, err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=10)


def can_listen(port: int) -> bool:
    """Whether 127.0.0.1:``port`` is free to listen on (bound as the server binds it)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
