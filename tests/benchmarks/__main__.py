"""Run the benchmarks: ``python -m tests.benchmarks [name ...]`` (what ``make bench`` runs).

Every ``bench_<name>.py`` in this folder (or only the named ones: ``killswitch relay_http``)
runs in its own process, ``python -m tests.benchmarks.bench_<name>``, one after the other, with
its output streamed as it comes. The last line says which ran, how long each took, and which
failed.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def available() -> list[str]:
    return sorted(path.stem.removeprefix("bench_") for path in HERE.glob("bench_*.py"))


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes else f"{rest}s"


def main(argv: list[str]) -> int:
    known = available()
    if any(arg in {"-h", "--help"} for arg in argv):
        print(__doc__)
        print("available:", " ".join(known))
        return 0
    wanted = [arg.removeprefix("bench_").removesuffix(".py") for arg in argv] or known
    unknown = [name for name in wanted if name not in known]
    if unknown:
        print(
            f"unknown benchmark(s): {' '.join(unknown)}; available: {' '.join(known)}",
            file=sys.stderr,
        )
        return 2
    outcomes: list[str] = []
    failed = 0
    began = time.monotonic()
    for name in wanted:
        print(f"\n## bench_{name}\n", flush=True)
        started = time.monotonic()
        child = subprocess.Popen([sys.executable, "-m", f"tests.benchmarks.bench_{name}"], cwd=REPO)
        try:
            code = child.wait()
        except KeyboardInterrupt:  # the child got it too: let it stop what it started
            try:
                child.wait(timeout=60)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            outcomes.append(f"{name} interrupted")
            failed += 1
            break
        took = _duration(time.monotonic() - started)
        if code == 0:
            outcomes.append(f"{name} ok ({took})")
        else:
            outcomes.append(f"{name} FAILED (exit {code}, {took})")
            failed += 1
    skipped = [name for name in wanted if not any(o.startswith(f"{name} ") for o in outcomes)]
    summary = ", ".join(outcomes + [f"{name} not run" for name in skipped])
    print(
        f"\nbenchmarks: {summary}; {len(outcomes) - failed} of {len(wanted)} ran "
        f"in {_duration(time.monotonic() - began)}",
        flush=True,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
