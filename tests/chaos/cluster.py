"""A Vane cluster of real processes for the chaos suite: control-plane replicas on PostgreSQL and
Redis (each replica behind TCP proxies that a test can cut), relays that know every replica."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from tests.chaos.harness import TcpProxy
from tests.processes import VANE, Process, free_port, wait_http_ok

REPORT = os.environ.get("VANE_CHAOS_REPORT", "")


def report(fault: str, **figures: Any) -> None:
    """Print one fault's figures (run pytest with -s to see them) and append them to
    ``$VANE_CHAOS_REPORT`` (JSON lines) when set."""
    line = {"fault": fault, **figures}
    print("\nCHAOS " + json.dumps(line))
    if REPORT:
        with open(REPORT, "a") as handle:
            handle.write(json.dumps(line) + "\n")


def through(proxy: TcpProxy, url: str) -> str:
    """``url`` with its host and port replaced by the proxy's."""
    parts = urlsplit(url)
    auth = f"{parts.username}@" if parts.username else ""
    return urlunsplit(parts._replace(netloc=f"{auth}127.0.0.1:{proxy.port}"))


def target_of(url: str, default_port: int) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or default_port


@dataclass
class Replica:
    name: str
    url: str
    process: Process
    database: TcpProxy
    redis: TcpProxy | None
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None

    def restart(self) -> None:
        """Start the replica again on its port, as it was started (after ``kill``)."""
        self.process = Process(self.argv, env=self.env, cwd=self.cwd)
        wait_http_ok(f"{self.url}/readyz")


@dataclass
class RelayProcess:
    name: str
    url: str
    process: Process
    data_dir: Path
    argv: list[str]
    env: dict[str, str]

    def readyz(self) -> dict[str, Any]:
        response = httpx.get(f"{self.url}/readyz", timeout=5)
        return response.json()  # type: ignore[no-any-return]

    def version(self, environment: str = "production") -> int | None:
        try:
            envs = self.readyz()["environments"]
        except (httpx.HTTPError, ValueError):
            return None
        version = envs.get(environment, {}).get("version")
        return int(version) if version is not None else None

    def restart(self) -> None:
        self.process = Process(self.argv, env=self.env)
        wait_http_ok(f"{self.url}/healthz")


@dataclass
class Cluster:
    workdir: Path
    database_url: str
    redis_url: str | None
    replicas: list[Replica] = field(default_factory=list)
    relays: list[RelayProcess] = field(default_factory=list)
    keys: dict[str, str] = field(default_factory=dict)
    _proxies: list[TcpProxy] = field(default_factory=list)

    # --- processes --------------------------------------------------------------------------

    def add_replica(
        self, *, reconcile_s: float = 1.0, extra_env: dict[str, str] | None = None
    ) -> Replica:
        name = f"cp{len(self.replicas) + 1}"
        database = TcpProxy(*target_of(self.database_url, 5432))
        redis = TcpProxy(*target_of(self.redis_url, 6379)) if self.redis_url else None
        self._proxies += [database] + ([redis] if redis else [])
        port = free_port()
        env = {
            "VANE_DATABASE_URL": through(database, self.database_url),
            "VANE_HEARTBEAT_S": "1",
            "VANE_RECONCILE_S": str(reconcile_s),
        }
        if redis is not None and self.redis_url:
            env["VANE_REDIS_URL"] = through(redis, self.redis_url)
        env.update(extra_env or {})
        argv = [*VANE, "control-plane", "--port", str(port)]
        process = Process(argv, env=env, cwd=self.workdir)
        if not self.keys:
            self.keys = {
                kind: process.wait_for_line(rf"^\s+{kind}\s+({prefix}live_\S+)").group(1)
                for kind, prefix in (
                    ("management", "vsk_"),
                    ("relay", "rsk_"),
                    ("public", "pk_"),
                    ("server", "ssk_"),
                )
            }
        url = f"http://127.0.0.1:{port}"
        wait_http_ok(f"{url}/readyz")
        replica = Replica(name, url, process, database, redis, argv, env, self.workdir)
        self.replicas.append(replica)
        return replica

    def add_relay(self, upstreams: list[str], *, data_dir: Path | None = None) -> RelayProcess:
        name = f"relay{len(self.relays) + 1}"
        port = free_port()
        data = data_dir or self.workdir / name
        argv = [*VANE, "relay", "--port", str(port), "--data-dir", str(data)]
        for upstream in upstreams:
            argv += ["--upstream", upstream]
        env = {
            "VANE_RELAY_KEY": self.keys["relay"],
            "VANE_RELAY_STALE_AFTER_S": "2",
            "VANE_RELAY_BACKOFF_CAP_S": "1",
        }
        relay = RelayProcess(
            name, f"http://127.0.0.1:{port}", Process(argv, env=env), data, argv, env
        )
        wait_http_ok(f"{relay.url}/readyz")
        self.relays.append(relay)
        return relay

    def close(self) -> None:
        for relay in self.relays:
            relay.process.stop()
        for replica in self.replicas:
            replica.process.stop()
        for proxy in self._proxies:
            with contextlib.suppress(Exception):
                proxy.close()

    # --- the API ----------------------------------------------------------------------------

    def api(self, replica: Replica, method: str, path: str, body: Any = None) -> httpx.Response:
        return httpx.request(
            method,
            f"{replica.url}/api/v1{path}",
            json=body,
            headers={"Authorization": f"Bearer {self.keys['management']}"},
            timeout=10,
        )

    def toggle(self, replica: Replica, flag: str, enabled: bool) -> int:
        """Toggle with retries (503s while the database is away); the new version."""
        for _ in range(200):
            with contextlib.suppress(httpx.HTTPError):
                response = self.api(
                    replica,
                    "POST",
                    f"/flags/{flag}/environments/production/toggle",
                    {"enabled": enabled},
                )
                if response.status_code == 200:
                    return self.database_version(replica)
            time.sleep(0.1)
        raise AssertionError(f"could not toggle {flag} on {replica.name}")

    def database_version(self, replica: Replica) -> int:
        envs = self.api(replica, "GET", "/environments").json()["environments"]
        return int(next(e for e in envs if e["key"] == "production")["snapshotVersion"])

    def stored_event_ids(self, replica: Replica) -> list[str]:
        ids: list[str] = []
        cursor = None
        while True:
            path = "/events?limit=1000" + (f"&cursor={cursor}" if cursor else "")
            page = self.api(replica, "GET", path).json()
            ids.extend(e["eventId"] for e in page["events"])
            cursor = page["nextCursor"]
            if not cursor:
                return ids

    def drain_relays(self, within_s: float = 60) -> None:
        """Wait until every relay forwarded its spool."""
        deadline = time.monotonic() + within_s
        for relay in self.relays:
            while time.monotonic() < deadline:
                with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
                    if relay.readyz()["spool"]["pendingEvents"] == 0:
                        break
                time.sleep(0.1)


def kill(process: Process) -> None:
    """SIGKILL a whole process group (the process and granian's workers)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.popen.pid, signal.SIGKILL)
    process.popen.wait(timeout=10)
    process.stop()  # reaps what is left and closes its output pipe


def until(check: Callable[[], bool], within_s: float, what: str) -> float:
    """Seconds until ``check()`` holds; fail after ``within_s``."""
    start = time.monotonic()
    while time.monotonic() - start < within_s:
        with contextlib.suppress(httpx.HTTPError, KeyError, ValueError, TypeError):
            if check():
                return time.monotonic() - start
        time.sleep(0.02)
    raise AssertionError(f"not within {within_s} s: {what}")


@contextlib.contextmanager
def cluster_on_postgres(workdir: Path, database_url: str, redis_url: str) -> Iterator[Cluster]:
    cluster = Cluster(workdir, database_url, redis_url)
    try:
        yield cluster
    finally:
        cluster.close()
