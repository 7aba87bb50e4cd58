"""What the process-level benchmarks share: tables, percentiles, wrk, pinned processes, memory.

Processes are started with the end-to-end helpers (``tests.processes``, ``tests.e2e.test_relays``)
inside a ``Cleanup`` block, which stops every registered process and, should a helper raise after
spawning one, every other child this process started inside the block (by its pid).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from tests.e2e.test_relays import Relay
from tests.processes import VANE, Process, free_port, wait_http_ok

REPO = Path(__file__).resolve().parents[2]
PEERS_DIR = Path(os.environ.get("VANE_PEER_BENCH_DIR") or REPO.parent / "shared/bench/peers")
WRK_DIR = Path(__file__).resolve().parent / "wrk"
CPUS = os.cpu_count() or 1


# --- tables ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Row:
    figure: str
    vane: str
    anchor: str = ""
    ratio: str = ""


def print_table(title: str, rows: Iterable[Row], notes: Sequence[str] = ()) -> None:
    """A markdown table ``figure | Vane | peer/anchor | ratio (or target)`` and notes below it."""
    lines = [
        f"### {title}",
        "",
        "| figure | Vane | peer/anchor | ratio (or target) |",
        "|---|---:|---|---|",
    ]
    lines += [f"| {r.figure} | {r.vane} | {r.anchor} | {r.ratio} |" for r in rows]
    if notes:
        lines.append("")
        lines += [f"* {note}" for note in notes]
    print("\n".join(lines), flush=True)


def unavailable(figure: str, why: str) -> Row:
    return Row(figure, "unavailable", why, "")


def log(message: str) -> None:
    """Progress goes to stderr so stdout holds the table only."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def ms(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:,.{digits}f} ms"


def ratio(numerator: float, denominator: float) -> str:
    return "n/a" if not denominator else f"{numerator / denominator:.2f}x"


# --- statistics --------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass(frozen=True, slots=True)
class Spread:
    n: int
    p50: float
    p99: float
    max: float
    min: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if not values:
            return cls(0, math.nan, math.nan, math.nan, math.nan)
        return cls(
            len(values),
            percentile(values, 50),
            percentile(values, 99),
            max(values),
            min(values),
        )

    def text(self, digits: int = 1) -> str:
        return (
            f"p50 {self.p50:.{digits}f} / p99 {self.p99:.{digits}f} / max {self.max:.{digits}f} ms"
        )


# --- processes ---------------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                found += [
                    int(x) for x in Path(f"/proc/{pid}/task/{task}/children").read_text().split()
                ]
    return found


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (granian runs its worker in a child process)."""
    tree, pending = [], [pid]
    while pending:
        current = pending.pop()
        tree.append(current)
        pending += _children(current)
    return tree


def rss_mib(pid: int) -> float:
    """VmRSS of one process, in MiB (NaN once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return math.nan


def tree_rss_mib(pid: int) -> float:
    return sum(x for x in (rss_mib(p) for p in process_tree(pid)) if not math.isnan(x))


def pin_tree(pid: int, cpus: set[int]) -> None:
    """Move every thread of ``pid`` and its descendants onto ``cpus`` (after they started)."""
    for proc in process_tree(pid):
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{proc}/task"):
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(int(task), cpus)


def pinned(argv: Sequence[str], cpu: int | None) -> list[str]:
    """``argv`` under ``taskset -c cpu`` (unpinned if there is no such CPU or no taskset)."""
    if cpu is None or cpu >= CPUS or shutil.which("taskset") is None:
        return list(argv)
    return ["taskset", "-c", str(cpu), *argv]


def _stop_pid(pid: int) -> None:
    """SIGTERM, then SIGKILL after 10 s, to one child we started (its group if it leads one)."""
    try:
        group = os.getpgid(pid) == pid
        (os.killpg if group else os.kill)(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                return
        if not Path(f"/proc/{pid}").exists():
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        (os.killpg if group else os.kill)(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


class Cleanup:
    """Stops what was started inside it: registered ``Process``es in parallel, then any other
    child of this process that appeared inside the block (a helper that raised after spawning)."""

    def __init__(self) -> None:
        self.processes: list[Process] = []
        self._before: set[int] = set()

    def add(self, process: Process) -> Process:
        self.processes.append(process)
        return process

    def __enter__(self) -> Cleanup:
        self._before = set(_children(os.getpid()))
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stop_all(self.processes)
        for pid in sorted(set(_children(os.getpid())) - self._before):
            _stop_pid(pid)


def stop_all(processes: Sequence[Process]) -> None:
    """SIGTERM every process group first, then wait for each (a parallel shutdown)."""
    for process in processes:
        if process.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.popen.pid, signal.SIGTERM)
    for process in processes:
        with contextlib.suppress(Exception):
            process.stop()


def relay_process(
    upstream: str,
    key: str,
    data_dir: Path,
    *,
    port: int | None = None,
    cpu: int | None = None,
    env: dict[str, str] | None = None,
) -> Relay:
    """Spawn ``vane relay`` (under ``taskset -c cpu`` if given); does not wait for it."""
    port = port or free_port()
    argv = [
        *VANE,
        "relay",
        *("--upstream", upstream, "--key", key, "--port", str(port), "--data-dir", str(data_dir)),
    ]
    process = Process(pinned(argv, cpu), env=env, cwd=REPO)
    return Relay(process, f"http://127.0.0.1:{port}")


def wait_ready(url: str, timeout: float = 120) -> float:
    """Seconds until ``GET url/readyz`` answers 200 (polling every 5 ms)."""
    start = time.perf_counter()
    deadline = start + timeout
    with httpx.Client(timeout=5) as client:
        while time.perf_counter() < deadline:
            with contextlib.suppress(httpx.TransportError):
                if client.get(f"{url}/readyz").status_code == 200:
                    return time.perf_counter() - start
            time.sleep(0.005)
    raise TimeoutError(f"{url}/readyz not ready within {timeout} s")


# --- a shared machine -------------------------------------------------------------------------


def _cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies over all CPUs since boot."""
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def machine_busy(seconds: float = 1.0) -> float:
    """Share (0..1) of all CPUs busy over the next ``seconds``."""
    busy0, total0 = _cpu_times()
    time.sleep(seconds)
    busy1, total1 = _cpu_times()
    return (busy1 - busy0) / max(total1 - total0, 1e-9)


def wait_quiet(threshold: float = 0.15, max_wait: float | None = None) -> float:
    """Wait (``QUIET_WAIT`` s at most, default 120) until under ``threshold`` of the machine is
    busy — other people's benchmarks share it — and return the last busy share seen."""
    if max_wait is None:
        max_wait = float(os.environ.get("QUIET_WAIT", "120"))
    deadline = time.monotonic() + max_wait
    busy = machine_busy()
    told = 0.0
    while busy > threshold and time.monotonic() < deadline:
        if time.monotonic() - told > 15:
            log(f"machine {busy:.0%} busy with other work; waiting (at most {max_wait:.0f} s)")
            told = time.monotonic()
        busy = machine_busy(2.0)
    return busy


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used so far by ``pid`` and its descendants (all threads)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for proc in process_tree(pid):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(f"/proc/{proc}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


# --- wrk ---------------------------------------------------------------------------------------


def ensure_wrk() -> tuple[str | None, str]:
    """The wrk binary, installing Debian's package if missing: ``(path, "")`` or ``(None, why)``."""
    found = shutil.which("wrk")
    if found:
        return found, ""
    if shutil.which("apt-get") is None:
        return None, "wrk is not installed and there is no apt-get"
    log("wrk missing: apt-get install -y wrk")
    for attempt in ([], ["apt-get", "update", "-qq"]):
        if attempt:
            subprocess.run(attempt, check=False, timeout=300, capture_output=True)
        result = subprocess.run(
            ["apt-get", "install", "-y", "-qq", "wrk"],
            check=False,
            timeout=300,
            capture_output=True,
            text=True,
        )
        found = shutil.which("wrk")
        if found:
            return found, ""
    return None, f"apt-get install wrk failed: {result.stderr.strip()[-200:]}"


def seconds(text: str) -> str:
    """wrk's duration syntax from an env knob: ``30`` → ``30s``, ``30s``/``1m`` unchanged."""
    text = text.strip()
    return f"{text}s" if text.isdigit() else text


def duration_s(text: str) -> float:
    text = seconds(text)
    scale = {"s": 1, "m": 60, "h": 3600}[text[-1]]
    return float(text[:-1]) * scale


def run_wrk(
    wrk: str,
    url: str,
    script: str,
    *,
    duration: str,
    conns: int,
    cpu: int | None,
    env: dict[str, str] | None = None,
    threads: int = 1,
) -> dict[str, Any]:
    """One wrk run (``--latency``, our Lua script); its WRKJSON report plus the raw output."""
    argv = pinned(
        [
            wrk,
            f"-t{threads}",
            f"-c{conns}",
            f"-d{seconds(duration)}",
            "--latency",
            "-s",
            str(WRK_DIR / script),
            url,
        ],
        cpu,
    )
    result = subprocess.run(
        argv,
        env={**os.environ, "WRK_LUA_DIR": str(WRK_DIR), **(env or {})},
        capture_output=True,
        text=True,
        timeout=duration_s(duration) + 60,
        check=False,
    )
    for line in result.stdout.splitlines():
        if line.startswith("WRKJSON "):
            report: dict[str, Any] = json.loads(line.removeprefix("WRKJSON "))
            report["raw"] = result.stdout
            return report
    raise RuntimeError(f"wrk printed no report (exit {result.returncode}): {result.stderr[-500:]}")


__all__ = [
    "CPUS",
    "PEERS_DIR",
    "REPO",
    "VANE",
    "Cleanup",
    "Process",
    "Relay",
    "Row",
    "Spread",
    "cpu_seconds",
    "ensure_wrk",
    "free_port",
    "log",
    "machine_busy",
    "ms",
    "percentile",
    "pin_tree",
    "pinned",
    "print_table",
    "process_tree",
    "ratio",
    "relay_process",
    "rss_mib",
    "run_wrk",
    "stop_all",
    "tree_rss_mib",
    "unavailable",
    "wait_http_ok",
    "wait_quiet",
    "wait_ready",
]
