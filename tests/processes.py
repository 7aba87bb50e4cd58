"""Real processes on loopback for end-to-end tests: start, read their output, wait, stop."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

VANE = [sys.executable, "-P", "-m", "vane"]  # as the console script: no cwd on sys.path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


STARTED: list[Process] = []
"""The processes started during the running test (``tests/conftest.py`` empties it before each
test and, when one fails, adds the end of each one's output to the report)."""


class Process:
    """A child process whose combined output is collected line by line in the background."""

    def __init__(
        self, argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> None:
        self.argv = list(argv)
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self.popen = subprocess.Popen(
            self.argv,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        STARTED.append(self)

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for_line(self, pattern: str, timeout: float = 60) -> re.Match[str]:
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines:
                    match = regex.search(line)
                    if match:
                        return match
                left = deadline - time.monotonic()
                if left <= 0 or (self.popen.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(
                        f"no line matching {pattern!r} from {self.argv}:\n{self.output}"
                    )
                self._changed.wait(min(left, 0.5))

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, sig)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=timeout)
        self._reader.join(timeout=5)
        # a process that left a child holding its output (an orphan) keeps the reader blocked on
        # it: closing the pipe under it would wait for ever, so it is left to the daemon thread
        if self.popen.stdout is not None and not self._reader.is_alive():
            self.popen.stdout.close()
        return self.popen.returncode

    def __enter__(self) -> Process:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def wait_http_ok(url: str, timeout: float = 60) -> httpx.Response:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            response = httpx.get(url, timeout=2)
            if response.status_code == 200:
                return response
            last = response.status_code
        except httpx.TransportError as exc:
            last = exc
        time.sleep(0.05)
    raise AssertionError(f"{url} not ready: {last}")


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
