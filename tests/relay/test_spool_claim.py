"""Relay workers sharing one data directory each take a spool of their own."""

from __future__ import annotations

from pathlib import Path

from relay.app import claim_spool_dir


def test_each_process_takes_its_own_spool_and_a_restart_takes_it_again(tmp_path: Path) -> None:
    first = claim_spool_dir(tmp_path)
    second = claim_spool_dir(tmp_path)
    assert (first.path.name, second.path.name) == ("spool", "spool-2")
    first.release()  # the first worker stopped; its successor takes the same spool back
    again = claim_spool_dir(tmp_path)
    assert again.path == tmp_path / "spool"
    second.release()
    again.release()
