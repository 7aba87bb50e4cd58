"""Starting relays the way deployments do: several upstreams, a key that does not exist yet,
and the compose file's ordering."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.e2e.test_relays import ControlPlane, eventually, serves, start_control_plane
from tests.processes import VANE, Process, alive, descendants, free_port, wait_http_ok

pytestmark = pytest.mark.e2e

COMPOSE = Path(__file__).resolve().parents[2] / "docker" / "compose.yaml"


def test_a_relay_without_a_key_yet_waits_and_says_why(tmp_path: Path) -> None:
    key_file = tmp_path / "keys" / "relay"
    dead, port = free_port(), free_port()
    cp_port = free_port()
    relay = Process(
        [
            *VANE,
            "relay",
            "--upstream",
            f"http://127.0.0.1:{dead}",  # a replica that is down: the relay fails over
            "--upstream",
            f"http://127.0.0.1:{cp_port}",
            "--key-file",
            str(key_file),
            "--port",
            str(port),
            "--data-dir",
            str(tmp_path / "relay"),
        ]
    )
    control_plane = None
    try:
        relay.wait_for_line(rf"waiting for a relay key in {key_file}")
        assert relay.popen.poll() is None  # still there, not exited
        control_plane = start_control_plane(
            f"sqlite:///{tmp_path / 'vane.db'}", tmp_path, port=cp_port
        )
        key_file.parent.mkdir()
        key_file.write_text(control_plane.keys["relay"] + "\n")
        wait_http_ok(f"http://127.0.0.1:{port}/readyz")
        ready = httpx.get(f"http://127.0.0.1:{port}/readyz").json()
        assert ready["upstream"] == f"http://127.0.0.1:{cp_port}"
        assert ready["sync"]["upstreams"] == [
            f"http://127.0.0.1:{dead}",
            f"http://127.0.0.1:{cp_port}",
        ]
        assert control_plane.api("POST", "/flags", {"key": "late"}).status_code == 201

        class Relay:
            url = f"http://127.0.0.1:{port}"

            def evaluate(self, key: str, flag: str) -> httpx.Response:
                return httpx.post(
                    f"{self.url}/ofrep/v1/evaluate/flags/{flag}",
                    json={"context": {"targetingKey": "u"}},
                    headers={"Authorization": f"Bearer {key}"},
                )

        eventually(serves(Relay(), control_plane.keys["public"], "late", False))  # type: ignore[arg-type]
    finally:
        relay.stop()
        if control_plane is not None:
            control_plane.process.stop()


def test_the_compose_file_starts_in_order_and_keeps_relay_data() -> None:
    services: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())["services"]

    def after(service: str) -> dict[str, str]:
        return {name: cond["condition"] for name, cond in services[service]["depends_on"].items()}

    assert after("migrate") == {"postgres": "service_healthy"}
    assert services["migrate"]["command"] == ["db", "upgrade"]
    for replica in ("control-plane-1", "control-plane-2"):
        assert after(replica)["migrate"] == "service_completed_successfully"
        assert "healthcheck" in services[replica]
    assert after("keys") == {"control-plane-1": "service_healthy"}
    assert "relay.tmp" in services["keys"]["command"][0]  # written whole, then renamed
    for relay in ("relay-1", "relay-2"):
        assert after(relay)["keys"] == "service_completed_successfully"
        command = services[relay]["command"]
        assert command.count("--upstream") == 2
        assert "--key" not in command
        data = command[command.index("--data-dir") + 1]
        assert any(volume.endswith(f":{data}") for volume in services[relay]["volumes"])


def console_script() -> list[str]:
    """``vane`` as the installed console script runs it: the entry point ``pyproject.toml``
    declares, imported without the working directory on ``sys.path`` (``-P``)."""
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    module, function = pyproject["project"]["scripts"]["vane"].split(":")
    code = f"import sys; from {module} import {function}; sys.exit({function}())"
    return [sys.executable, "-P", "-c", code]


def test_vane_relay_serves_the_package_from_a_directory_holding_another_relay(
    tmp_path: Path,
) -> None:
    """A relay started where a folder named ``relay`` lies about (an application's own package,
    which is also where it keeps the relay's data) still runs Vane's relay, not that folder."""
    theirs = tmp_path / "relay"
    theirs.mkdir()
    (theirs / "__init__.py").write_text('raise SystemExit("imported the wrong relay package")\n')
    port = free_port()
    relay = Process(
        [
            *console_script(),
            "relay",
            "--upstream",
            f"http://127.0.0.1:{free_port()}",  # nothing there: the relay serves and says stale
            "--port",
            str(port),
            "--data-dir",
            str(theirs / "data"),
        ],
        env={"VANE_RELAY_KEY": "rsk_live_not_checked_until_upstream_answers"},
        cwd=tmp_path,
    )
    try:
        assert wait_http_ok(f"http://127.0.0.1:{port}/healthz").status_code == 200
        assert "wrong relay" not in relay.output
    finally:
        relay.stop()


def test_a_relay_process_loads_nothing_of_the_control_plane() -> None:
    """What ``vane relay`` imports to serve: the relay, ``shared`` and their libraries only."""
    code = (
        "import sys; import vane.cli, relay.cli, relay.app; "
        "print(' '.join(sorted({name.split('.')[0] for name in sys.modules})))"
    )
    loaded = set(
        subprocess.run(
            [sys.executable, "-P", "-c", code], capture_output=True, text=True, check=True
        ).stdout.split()
    )
    assert {"relay", "shared"} <= loaded
    assert not loaded & {"control_plane", "sqlalchemy", "litestar", "scipy", "alembic", "psycopg"}


def two_worker_relay(control_plane: ControlPlane, port: int, data_dir: Path) -> Process:
    return Process(
        [
            *VANE,
            "relay",
            "--upstream",
            control_plane.url,
            "--port",
            str(port),
            "--data-dir",
            str(data_dir),
            "--workers",
            "2",
        ],
        env={"VANE_RELAY_KEY": control_plane.keys["relay"]},
    )


def test_a_relay_with_two_workers_serves_and_gives_each_its_own_spool(tmp_path: Path) -> None:
    control_plane = start_control_plane(f"sqlite:///{tmp_path / 'vane.db'}", tmp_path)
    port = free_port()
    relay = two_worker_relay(control_plane, port, tmp_path / "relay")
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/readyz")
        assert control_plane.api("POST", "/flags", {"key": "both"}).status_code == 201
        events = {"events": [{"event": "signup", "unit": "u-1"}]}
        for _ in range(8):  # connections land on either worker
            sent = httpx.post(
                f"http://127.0.0.1:{port}/sdk/v1/events",
                json=events,
                headers={"Authorization": f"Bearer {control_plane.keys['public']}"},
            )
            assert sent.status_code in (200, 202), sent.text
        eventually(lambda: (tmp_path / "relay" / "spool-2").is_dir(), what="a second spool")
        assert (tmp_path / "relay" / "spool").is_dir()
        for _ in range(8):  # a stream URL signed by one worker opens on either
            bulk = httpx.post(
                f"http://127.0.0.1:{port}/ofrep/v1/evaluate/flags",
                json={"context": {"targetingKey": "u-1"}},
                headers={"Authorization": f"Bearer {control_plane.keys['public']}"},
            )
            assert bulk.status_code == 200, bulk.text
            url = bulk.json()["eventStreams"][0]["url"]
            with httpx.stream("GET", url, timeout=10) as stream:
                assert stream.status_code == 200
    finally:
        relay.stop()
        control_plane.process.stop()


def test_a_relays_workers_die_with_its_main_process(tmp_path: Path) -> None:
    """``kill -9`` of a multi-worker relay's main process (an orchestrator's last resort) leaves
    no worker serving the port: a new relay can take it, and no orphan keeps old flags."""
    control_plane = start_control_plane(f"sqlite:///{tmp_path / 'vane.db'}", tmp_path)
    port = free_port()
    relay = two_worker_relay(control_plane, port, tmp_path / "relay")
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/readyz")
        main = relay.popen.pid
        eventually(lambda: len(descendants(main)) >= 2, what="two workers")
        workers = descendants(main)
        os.kill(main, signal.SIGKILL)
        relay.popen.wait(timeout=10)
        eventually(lambda: not any(alive(pid) for pid in workers), what="the workers gone")

        def refused() -> bool:
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
            except httpx.TransportError:
                return True
            return False

        eventually(refused, what="nothing serving the port")
    finally:
        with contextlib.suppress(ProcessLookupError):  # what is left of its group, if anything
            os.killpg(relay.popen.pid, signal.SIGKILL)
        relay.stop(signal.SIGKILL)
        control_plane.process.stop()
