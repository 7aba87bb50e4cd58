"""The ``vane`` entry point: every command reaches its side, and help needs neither side."""

from __future__ import annotations

import subprocess
import sys

VANE = [sys.executable, "-P", "-m", "vane"]


def vane(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*VANE, *argv], capture_output=True, text=True, timeout=60)


def test_help_lists_every_command() -> None:
    shown = vane("--help")
    assert shown.returncode == 0
    for command in ("up", "control-plane", "relay", "db", "keys", "code-refs"):
        assert command in shown.stdout


def test_each_command_reaches_its_own_parser() -> None:
    relay = vane("relay", "--help")
    assert relay.returncode == 0
    assert "--workers" in relay.stdout
    keys = vane("keys", "create", "--help")
    assert keys.returncode == 0
    assert "--kind" in keys.stdout


def test_an_unknown_command_is_refused_with_the_usage() -> None:
    refused = vane("serve")
    assert refused.returncode == 1  # not 2: that is `vane plan`'s "something would change"
    assert "invalid choice: 'serve'" in refused.stderr
