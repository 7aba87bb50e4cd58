"""The ``vane`` command: migrations, keys, code references, and a served control plane."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from control_plane.entry.cli import main
from tests.processes import VANE, Process, free_port, wait_http_ok


def run(args: list[str], database_url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "VANE_DATABASE_URL": database_url}
    return subprocess.run(
        [*VANE, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.mark.e2e  # runs the vane command as child processes
def test_db_upgrade_and_keys_create(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    first = run(["db", "upgrade"], url, tmp_path)
    assert first.returncode == 0, first.stderr
    assert "migrated: empty -> " in first.stdout
    second = run(["db", "upgrade"], url, tmp_path)
    assert "already at" in second.stdout
    created = run(
        [
            "keys",
            "create",
            "--kind",
            "public",
            "--env",
            "staging",
            "--origin",
            "https://a.example",
            "--json",
        ],
        url,
        tmp_path,
    )
    assert created.returncode == 0, created.stderr
    assert "First keys" in created.stdout  # the empty database was bootstrapped: its keys are shown
    record = json.loads(created.stdout.strip().splitlines()[-1])
    assert record["kind"] == "public"
    assert record["environment"] == "staging"
    assert record["origins"] == ["https://a.example"]
    assert record["key"].startswith("pk_live_")
    refused = run(["keys", "create", "--kind", "public"], url, tmp_path)
    assert refused.returncode == 1
    assert "environment" in refused.stderr


def test_code_refs_scan_upload_and_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'refs.db'}"
    monkeypatch.setenv("VANE_DATABASE_URL", url)
    assert main(["db", "upgrade"]) == 0
    assert main(["keys", "create", "--kind", "management", "--json"]) == 0
    output = capsys.readouterr().out
    token = json.loads(output.strip().splitlines()[-1])["key"]

    from litestar.testing import TestClient

    from control_plane.app import create_app
    from control_plane.settings import Settings

    with TestClient(create_app(Settings(database_url=url))) as client:
        headers = {"Authorization": f"Bearer {token}"}
        for key in ("new-checkout", "forgotten"):
            assert (
                client.post("/api/v1/flags", json={"key": key}, headers=headers).status_code == 201
            )
        source = tmp_path / "src"
        source.mkdir()
        (source / "app.py").write_text("if enabled('new-checkout'):\n    pass\n")
        assert (
            main(
                [
                    "code-refs",
                    "scan",
                    str(source),
                    "--upload",
                    "--repository",
                    "shop",
                    "--branch",
                    "main",
                ]
            )
            == 0
        )
        printed = capsys.readouterr().out
        assert "app.py:1: new-checkout" in printed
        assert "uploaded 1 references to 1 flags for shop@main" in printed
        refs = client.get("/api/v1/flags/new-checkout/code-refs", headers=headers).json()
        assert [(r["repository"], r["path"], r["line"]) for r in refs["references"]] == [
            ("shop", "app.py", 1)
        ]
    assert main(["code-refs", "stale"]) == 0
    stale = capsys.readouterr().out
    assert "forgotten" in stale
    assert "new-checkout" not in stale


@pytest.mark.e2e
def test_control_plane_process_prints_keys_and_serves(tmp_path: Path) -> None:
    port = free_port()
    env = {"VANE_DATABASE_URL": f"sqlite:///{tmp_path / 'served.db'}"}
    with Process([*VANE, "control-plane", "--port", str(port)], env=env, cwd=tmp_path) as process:
        process.wait_for_line(rf"http://127\.0\.0\.1:{port}")
        management = process.wait_for_line(r"^\s+management\s+(vsk_live_\S+)").group(1)
        process.wait_for_line(r"^\s+public\s+pk_live_\S+ \[production\]")
        wait_http_ok(f"http://127.0.0.1:{port}/readyz")
        base = f"http://127.0.0.1:{port}/api/v1"
        headers = {"Authorization": f"Bearer {management}"}
        created = httpx.post(f"{base}/flags", json={"key": "served"}, headers=headers)
        assert created.status_code == 201, created.text
        assert httpx.get(f"{base}/flags", headers=headers).json()["count"] == 1
