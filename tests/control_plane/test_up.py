"""``vane up`` as a user runs it: the relay key never on a command line, no orphans after a kill."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_relays import eventually
from tests.processes import VANE, Process, alive, descendants, free_port, wait_http_ok

pytestmark = pytest.mark.e2e


def command_line(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_vane_up_hides_the_relay_key_and_its_children_die_with_it(tmp_path: Path) -> None:
    port, relay_port = free_port(), free_port()
    env = {"VANE_DATABASE_URL": f"sqlite:///{tmp_path / 'vane.db'}"}
    up = Process(
        [*VANE, "up", "--port", str(port), "--relay-port", str(relay_port)], env=env, cwd=tmp_path
    )
    children: set[int] = set()
    try:
        relay_key = up.wait_for_line(r"^\s+relay\s+(rsk_live_\S+)", timeout=90).group(1)
        wait_http_ok(f"http://127.0.0.1:{relay_port}/readyz")
        console = up.wait_for_line(r"^\s+console\s+(\S+)", timeout=30).group(1)
        page = httpx.get(console, follow_redirects=True, timeout=10)
        assert page.status_code == 200
        assert page.url.path == "/console/sign-in"
        assert "Management key" in page.text
        # the first admin's one-time link: set a password there, and be signed in as them
        link = up.wait_for_line(r"^\s+(http://\S+/console/welcome/\S+)$").group(1)
        with httpx.Client(timeout=10, follow_redirects=True) as browser:
            welcome = browser.get(link)
            assert welcome.status_code == 200
            assert "admin@localhost" in welcome.text
            token = re.search(r'name="_login" value="([^"]+)"', welcome.text)
            assert token is not None
            joined = browser.post(
                link, data={"_login": token.group(1), "password": "a long first password"}
            )
            assert joined.status_code == 200
            assert joined.url.path == "/console/flags"
            assert "admin@localhost" in joined.text
            assert browser.get(link).status_code == 404  # once
        children = descendants(up.popen.pid)
        assert len(children) >= 2  # a control plane and a relay (and granian's workers)
        for pid in children:
            assert relay_key not in command_line(pid)
        assert any(" relay" in command_line(pid) for pid in children)

        os.kill(up.popen.pid, signal.SIGKILL)  # no chance to stop its children itself
        deadline = time.monotonic() + 30
        while any(alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [command_line(pid) for pid in children if alive(pid)] == []
        for bound in (port, relay_port):
            with pytest.raises(httpx.TransportError):
                httpx.get(f"http://127.0.0.1:{bound}/healthz", timeout=2)
    finally:
        up.stop(signal.SIGKILL)
        for pid in children:  # only what this test started, if it is still there
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_the_server_key_vane_up_prints_serves_the_readmes_backend_examples(tmp_path: Path) -> None:
    """README, Backends: the printed server key is bound to production, so a sidecar relay's OFREP
    answers it with every flag, and the in-process provider's snapshot feed opens with it."""
    port, relay_port = free_port(), free_port()
    env = {"VANE_DATABASE_URL": f"sqlite:///{tmp_path / 'vane.db'}"}
    up = Process(
        [*VANE, "up", "--port", str(port), "--relay-port", str(relay_port)], env=env, cwd=tmp_path
    )
    try:
        server = up.wait_for_line(r"^\s+server\s+(ssk_live_\S+)(.*)$", timeout=90)
        management = up.wait_for_line(r"^\s+management\s+(vsk_live_\S+)").group(1)
        cp, relay = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{relay_port}"
        admin = {"Authorization": f"Bearer {management}"}
        created = httpx.post(
            f"{cp}/api/v1/flags", json={"key": "pricing", "clientSide": False}, headers=admin
        )
        assert created.status_code == 201, created.text
        backend = {"Authorization": f"Bearer {server.group(1)}"}

        def evaluated() -> httpx.Response:
            return httpx.post(
                f"{relay}/ofrep/v1/evaluate/flags",
                json={"context": {"targetingKey": "acct-1"}},
                headers=backend,
                timeout=10,
            )

        eventually(lambda: "pricing" in evaluated().text, timeout=30, what=lambda: evaluated().text)
        assert evaluated().status_code == 200
        assert server.group(2) == " [production]"
        with httpx.stream(
            "GET", f"{relay}/api/v1/snapshot/stream", headers=backend, timeout=10
        ) as feed:
            assert feed.status_code == 200
            assert next(feed.iter_lines()) == "event: snapshot"
    finally:
        up.stop()
