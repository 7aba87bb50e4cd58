"""Starting relays the way deployments do: several upstreams, a key that does not exist yet,
and the compose file's ordering."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.e2e.test_relays import eventually, serves, start_control_plane
from tests.processes import VANE, Process, free_port, wait_http_ok

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
