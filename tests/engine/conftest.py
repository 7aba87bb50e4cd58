"""Engine test hooks: a summary of the LaunchDarkly conformance run at the end of the session."""

from __future__ import annotations

from collections import Counter
from typing import Any

CONFORMANCE = "test_ld_conformance.py::"


def _skip_reason(report: Any) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return str(text).removeprefix("Skipped: ")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    stats = terminalreporter.stats
    mine = {
        outcome: [r for r in stats.get(outcome, []) if CONFORMANCE in getattr(r, "nodeid", "")]
        for outcome in ("passed", "failed", "skipped", "error")
    }
    total = sum(len(v) for v in mine.values())
    if not total:
        return
    ran = len(mine["passed"]) + len(mine["failed"]) + len(mine["error"])
    write = terminalreporter.write_line
    terminalreporter.section("LaunchDarkly conformance")
    write(
        f"{total} cases: ran {ran} (passed {len(mine['passed'])}, failed "
        f"{len(mine['failed']) + len(mine['error'])}), skipped {len(mine['skipped'])}"
    )
    for reason, count in Counter(_skip_reason(r) for r in mine["skipped"]).most_common():
        write(f"  skipped {count:3d}: {reason}")
