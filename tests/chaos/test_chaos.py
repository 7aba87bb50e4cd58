"""The chaos suite: one fault at a time under steady load, against real processes.

Load: browsers evaluating on the relays (round-robin), a server client and pages sending events
(each retried until acknowledged, as the Vane clients do). Each test prints its figures as one
``CHAOS {...}`` line (``pytest -m chaos -s``; also appended to ``$VANE_CHAOS_REPORT``).

PostgreSQL and Redis are never restarted: every control-plane replica reaches them through a TCP
proxy of its own that a test cuts and restores, which is what a restart looks like from the
replica (connections dropped, new ones refused) without disturbing anything else on the host.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import resource
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.chaos.cluster import Cluster, RelayProcess, Replica, kill, report, until
from tests.chaos.harness import Browsers, Load, TcpProxy, percentile, small_disk, went_back
from tests.conftest import REDIS_URL, require_redis, unavailable
from tests.processes import VANE, Process, free_port, wait_http_ok

pytestmark = [pytest.mark.chaos, pytest.mark.e2e, pytest.mark.slow]

FLAG = "checkout"


@pytest.fixture
def cluster(tmp_path: Path, postgres_url: str) -> Iterator[Cluster]:
    require_redis()
    database = postgres_url
    cluster = Cluster(tmp_path, database, REDIS_URL)
    try:
        yield cluster
    finally:
        cluster.close()


def two_by_two(cluster: Cluster, *, reconcile_s: float = 1.0) -> tuple[Replica, Replica]:
    """Two replicas; two relays, each knowing both and preferring a different one; a flag."""
    cp1 = cluster.add_replica(reconcile_s=reconcile_s)
    cp2 = cluster.add_replica(reconcile_s=reconcile_s)
    assert cluster.api(cp1, "POST", "/flags", {"key": FLAG}).status_code == 201
    cluster.add_relay([cp1.url, cp2.url])
    cluster.add_relay([cp2.url, cp1.url])
    version = cluster.database_version(cp1)
    until(
        lambda: all(relay.version() == version for relay in cluster.relays),
        15,
        "both relays serve the flag",
    )
    return cp1, cp2


def load_on(cluster: Cluster, **kwargs: float) -> Load:
    return Load(
        [relay.url for relay in cluster.relays],
        cluster.keys["public"],
        cluster.keys["server"],
        **kwargs,  # type: ignore[arg-type]
    )


def event_figures(cluster: Cluster, replica: Replica, acknowledged: list[str]) -> dict[str, int]:
    cluster.drain_relays()
    stored = cluster.stored_event_ids(replica)
    return {
        "events_acknowledged": len(acknowledged),
        "events_lost": len(set(acknowledged) - set(stored)),
        "events_doubled": len(stored) - len(set(stored)),
    }


def load_figures(load: Load) -> dict[str, object]:
    figures = load.stop()
    return {
        "evaluations": figures.evaluations,
        "evaluation_failures": figures.evaluation_failures,
        "evaluation_p99_ms": round(percentile(figures.evaluation_ms, 0.99), 1),
        "longest_evaluation_gap_s": round(figures.longest_evaluation_gap_s, 3),
        "versions_went_back": sum(went_back(v) for v in figures.versions.values()),
        "event_retries": figures.event_retries,
        "_acknowledged": figures.events_acknowledged,
    }


def test_sigkill_a_control_plane_replica(cluster: Cluster) -> None:
    cp1, cp2 = two_by_two(cluster)
    relay1, relay2 = cluster.relays
    load = load_on(cluster)
    time.sleep(2)
    kill(cp1.process)
    failover_s = until(
        lambda: relay1.readyz()["upstream"] == cp2.url and relay1.readyz()["connected"],
        15,
        "relay1 fails over to cp2",
    )
    changed = time.monotonic()
    version = cluster.toggle(cp2, FLAG, True)
    until(lambda: all(r.version() == version for r in cluster.relays), 10, "the toggle everywhere")
    stale_s = time.monotonic() - changed
    time.sleep(2)
    figures = load_figures(load)
    acknowledged = figures.pop("_acknowledged")
    assert isinstance(acknowledged, list)
    events = event_figures(cluster, cp2, acknowledged)
    report(
        "SIGKILL a control-plane replica",
        failover_s=round(failover_s, 3),
        stale_window_s=round(stale_s, 3),
        **figures,
        **events,
    )
    assert figures["evaluation_failures"] == 0
    assert figures["versions_went_back"] == 0
    assert events["events_lost"] == 0
    assert events["events_doubled"] == 0
    assert relay2.readyz()["upstream"] == cp2.url


def test_postgresql_away_and_back(cluster: Cluster) -> None:
    cp1, cp2 = two_by_two(cluster)
    load = load_on(cluster)
    time.sleep(1)
    for replica in cluster.replicas:
        replica.database.cut()
    gap_answers: list[int] = []
    for i in range(8):
        with contextlib.suppress(httpx.HTTPError):
            answer = cluster.api(cp1, "POST", "/flags", {"key": f"gap-{i}"})
            gap_answers.append(answer.status_code)
            if answer.status_code == 503:
                assert answer.headers["retry-after"]
                assert answer.json()["error"]["code"] == "unavailable"
        time.sleep(0.25)
    cut_at = time.monotonic()
    for replica in cluster.replicas:
        replica.database.restore()

    # the retried writes: each is created once, after the gap, without restarting anything
    def written(key: str) -> bool:
        return cluster.api(cp1, "POST", "/flags", {"key": key}).status_code in (201, 409)

    for i in range(8):
        until(
            functools.partial(written, f"gap-{i}"),
            20,
            f"gap-{i} written after the database came back",
        )
    recovered_s = time.monotonic() - cut_at
    version = cluster.toggle(cp2, FLAG, True)
    until(lambda: all(r.version() == version for r in cluster.relays), 15, "the toggle everywhere")
    figures = load_figures(load)
    acknowledged = figures.pop("_acknowledged")
    assert isinstance(acknowledged, list)
    events = event_figures(cluster, cp1, acknowledged)
    flags = cluster.api(cp1, "GET", "/flags?limit=100").json()
    created = sorted(f["key"] for f in flags["flags"] if f["key"].startswith("gap-"))
    report(
        "PostgreSQL restarted (cut at the proxy)",
        writes_in_gap={s: gap_answers.count(s) for s in set(gap_answers)},
        recovered_s=round(recovered_s, 3),
        **figures,
        **events,
    )
    assert set(gap_answers) == {503}
    assert created == [f"gap-{i}" for i in range(8)]
    assert figures["evaluation_failures"] == 0
    assert events["events_lost"] == 0
    assert events["events_doubled"] == 0


def test_redis_away_and_back(cluster: Cluster) -> None:
    cp1, _cp2 = two_by_two(cluster, reconcile_s=60)  # only Redis (or its catch-up) can deliver
    load = load_on(cluster)
    for replica in cluster.replicas:
        assert replica.redis is not None
        replica.redis.cut()
    version = cluster.toggle(cp1, FLAG, True)
    time.sleep(1)
    for replica in cluster.replicas:
        assert replica.redis is not None
        replica.redis.restore()
    restored = time.monotonic()
    until(lambda: all(r.version() == version for r in cluster.relays), 20, "catch-up after Redis")
    converged_s = time.monotonic() - restored
    changed = time.monotonic()
    version = cluster.toggle(cp1, FLAG, False)
    until(lambda: all(r.version() == version for r in cluster.relays), 10, "fan-out resumed")
    fanout_s = time.monotonic() - changed
    figures = load_figures(load)
    acknowledged = figures.pop("_acknowledged")
    assert isinstance(acknowledged, list)
    events = event_figures(cluster, cp1, acknowledged)
    report(
        "Redis restarted (cut at the proxy)",
        converged_after_restore_s=round(converged_s, 3),
        next_change_everywhere_s=round(fanout_s, 3),
        **figures,
        **events,
    )
    assert figures["evaluation_failures"] == 0
    assert figures["versions_went_back"] == 0
    assert events["events_lost"] == 0


def test_a_lagging_replica_never_rolls_a_relay_back(cluster: Cluster) -> None:
    cp1, cp2 = two_by_two(cluster, reconcile_s=60)
    relay1, _relay2 = cluster.relays
    load = load_on(cluster)
    assert cp2.redis is not None
    cp2.redis.cut()  # cp2 stops hearing of changes: it lags
    for enabled in (True, False, True):
        version = cluster.toggle(cp1, FLAG, enabled)
    until(lambda: relay1.version() == version, 10, "relay1 has the newest version")
    kill(cp1.process)  # relay1 must now fail over to the lagging replica
    until(lambda: relay1.readyz()["upstream"] == cp2.url and relay1.readyz()["connected"], 15, "")
    time.sleep(2)
    served_after = relay1.version()
    refused = relay1.readyz()["sync"]["refusedVersions"]
    figures = load_figures(load)
    figures.pop("_acknowledged")
    report(
        "a replica lagging (Redis link cut) while changes are made on the other",
        newest=version,
        relay_after_failover=served_after,
        refused_by_relay=refused,
        **figures,
    )
    assert served_after == version
    assert figures["versions_went_back"] == 0
    assert figures["evaluation_failures"] == 0


class ProviderStream:
    """An in-process provider's snapshot feed (server-sent events), read on a thread."""

    def __init__(self, url: str, server_key: str) -> None:
        self.lines: list[str] = []
        self.ended = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(url, server_key), daemon=True)
        self._thread.start()

    def _read(self, url: str, server_key: str) -> None:
        try:
            headers = {"Authorization": f"Bearer {server_key}"}
            with httpx.stream("GET", url, headers=headers, timeout=60) as response:
                for line in response.iter_lines():
                    self.lines.append(line)
        except httpx.HTTPError as exc:
            self.lines.append(f"error: {exc!r}")
        finally:
            self.ended.set()

    def saw(self, text: str) -> bool:
        return any(text in line for line in list(self.lines))


def test_a_poisoned_value_and_a_deleted_environment_under_load(cluster: Cluster) -> None:
    """Two faults the kill switch once died of silently: a stored value the wire cannot carry (it
    stopped every publication of its environment), and an environment deleted with its keys
    revoked (it lived on at connected relays and providers). Then a toggle must arrive."""
    cp1, cp2 = two_by_two(cluster)
    relay1 = cluster.relays[0]
    created = cluster.api(cp1, "POST", "/environments", {"key": "qa", "copyFrom": "production"})
    assert created.status_code == 201, created.text
    keys = {
        (kind, env): cluster.api(cp1, "POST", "/keys", {"kind": kind, "environment": env}).json()[
            "key"
        ]
        for kind in ("public", "server")
        for env in ("qa", "production")
    }
    until(lambda: all(r.version("qa") is not None for r in cluster.relays), 15, "qa at both relays")
    feed = "/api/v1/snapshot/stream"
    providers = {
        (where, env): ProviderStream(f"{url}{feed}", keys[("server", env)])
        for where, url in (("relay1", relay1.url), ("cp2", cp2.url))
        for env in ("qa", "production")
    }
    until(lambda: all(p.saw("event: snapshot") for p in providers.values()), 15, "providers open")
    load = load_on(cluster)
    time.sleep(1)

    # a value stored before the API bounded it (the API now refuses it: 422)
    assert (
        cluster.api(
            cp1,
            "POST",
            "/flags",
            {"key": "big", "type": "number", "variations": [{"value": 10**20}, {"value": 1}]},
        ).status_code
        == 422
    )
    with psycopg.connect(cluster.database_url, autocommit=True) as connection:
        connection.execute(
            "UPDATE flags SET variations = %s::json WHERE key = %s",
            (
                json.dumps([{"idx": 0, "value": 10**20, "name": "big"}, {"idx": 1, "value": 1}]),
                FLAG,
            ),
        )
        connection.execute("UPDATE environments SET snapshot_version = snapshot_version + 1")
    until(
        lambda: all(
            f"flags.{FLAG}" in str(httpx.get(f"{r.url}/readyz", timeout=5).json()["publishing"])
            for r in cluster.replicas
        ),
        15,
        "both replicas report the flag they left out",
    )

    deleted_at = time.monotonic()
    deleted = cluster.api(cp2, "DELETE", "/environments/qa?revokeKeys=true")
    assert deleted.status_code == 200, deleted.text

    def refused(relay: RelayProcess) -> Callable[[], bool]:
        def check() -> bool:
            response = httpx.post(
                f"{relay.url}/ofrep/v1/evaluate/flags",
                json={"context": {"targetingKey": "u"}},
                headers={"Authorization": f"Bearer {keys[('public', 'qa')]}"},
                timeout=5,
            )
            return response.status_code == 401

        return check

    for relay in cluster.relays:
        until(refused(relay), 5, f"the revoked qa key refused at {relay.name}")
    revoked_s = time.monotonic() - deleted_at
    for (where, env), provider in providers.items():
        if env == "qa":
            assert provider.ended.wait(10), f"qa's provider stream at {where} still open"

    cluster.api(cp1, "POST", "/flags", {"key": "kill"})
    toggled_at = time.monotonic()
    version = cluster.toggle(cp1, "kill", True)
    until(lambda: all(r.version() == version for r in cluster.relays), 5, "the toggle everywhere")
    toggle_s = time.monotonic() - toggled_at
    for (where, env), provider in providers.items():
        if env == "production":
            until(functools.partial(provider.saw, '"kill"'), 5, f"the toggle at {where}'s provider")
            assert not provider.ended.is_set()
    figures = load_figures(load)
    figures.pop("_acknowledged")
    report(
        "a poisoned stored value and a deleted environment, then a toggle",
        revoked_key_refused_s=round(revoked_s, 3),
        toggle_everywhere_s=round(toggle_s, 3),
        **figures,
    )
    assert figures["evaluation_failures"] == 0
    assert figures["versions_went_back"] == 0


def test_relay_sigkilled_mid_stream_and_its_disk_full(tmp_path: Path) -> None:
    cp_port = free_port()
    cp = Process(
        [*VANE, "control-plane", "--port", str(cp_port)],
        env={"VANE_DATABASE_URL": f"sqlite:///{tmp_path / 'vane.db'}", "VANE_HEARTBEAT_S": "1"},
        cwd=tmp_path,
    )
    keys = {
        kind: cp.wait_for_line(rf"^\s+{kind}\s+({prefix}live_\S+)").group(1)
        for kind, prefix in (
            ("management", "vsk_"),
            ("relay", "rsk_"),
            ("public", "pk_"),
            ("server", "ssk_"),
        )
    }
    cp_url = f"http://127.0.0.1:{cp_port}"
    wait_http_ok(f"{cp_url}/readyz")
    link = TcpProxy("127.0.0.1", cp_port)
    port = free_port()
    relay: Process | None = None
    with small_disk(tmp_path / "disk", "256k") as mounted:
        argv = [
            *VANE,
            "relay",
            "--upstream",
            f"http://127.0.0.1:{link.port}",
            "--port",
            str(port),
            "--data-dir",
            str(tmp_path / "disk"),
        ]
        env = {"VANE_RELAY_KEY": keys["relay"], "VANE_RELAY_BACKOFF_CAP_S": "1"}
        url = f"http://127.0.0.1:{port}"
        try:
            relay = Process(argv, env=env)
            wait_http_ok(f"{url}/readyz")
            load = Load([url], keys["public"], keys["server"], events_per_s=400)
            time.sleep(1)
            link.cut()  # events pile up in the spool, then the disk is full
            full_503 = 0
            if mounted:
                until(lambda: load.figures.event_answers.get(503, 0) > 5, 60, "503 while full")
                full_503 = load.figures.event_answers.get(503, 0)
                status = httpx.post(
                    f"{url}/api/v1/track",
                    json={"unit": "u", "event": "probe"},
                    headers={"Authorization": f"Bearer {keys['server']}"},
                )
                assert status.status_code == 503
                assert status.headers["retry-after"]
            link.restore()
            acknowledged_while_full = len(load.figures.events_acknowledged)
            time.sleep(2)
            kill(relay)  # SIGKILL mid-stream: requests in flight, spool being forwarded
            relay = Process(argv, env=env)
            wait_http_ok(f"{url}/healthz")
            time.sleep(2)
            figures = load.stop()
            try:
                until(
                    lambda: httpx.get(f"{url}/readyz").json()["spool"]["pendingEvents"] == 0,
                    60,
                    "the spool drained",
                )
            except AssertionError:
                print(httpx.get(f"{url}/readyz").text)
                print("\n".join(relay.lines[-60:]))
                raise
            stored: list[str] = []
            cursor = None
            while True:
                page = httpx.get(
                    f"{cp_url}/api/v1/events?limit=1000" + (f"&cursor={cursor}" if cursor else ""),
                    headers={"Authorization": f"Bearer {keys['management']}"},
                ).json()
                stored.extend(e["eventId"] for e in page["events"])
                cursor = page["nextCursor"]
                if not cursor:
                    break
            acknowledged = figures.events_acknowledged
            lost = len(set(acknowledged) - set(stored))
            doubled = len(stored) - len(set(stored))
            report(
                "relay SIGKILLed mid-stream, disk full on the relay",
                disk_full_simulated=mounted,
                answers_503_while_full=full_503,
                acknowledged_before_the_link_came_back=acknowledged_while_full,
                events_acknowledged=len(acknowledged),
                events_lost=lost,
                events_doubled=doubled,
                event_answers=figures.event_answers,
                evaluation_failures=figures.evaluation_failures,
            )
            assert lost == 0
            assert doubled == 0
            assert len(acknowledged) > acknowledged_while_full  # it accepts again once drained
        finally:
            if relay is not None:
                relay.stop()
            link.close()
            cp.stop()


def relay_memory_kib(process: Process) -> int:
    """Resident memory of a relay's process group (granian and its worker), in KiB."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if os.getpgid(int(entry.name)) != process.popen.pid:
                continue
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total


def test_ten_thousand_browsers_holding_streams(tmp_path: Path) -> None:
    count = int(os.environ.get("VANE_CHAOS_STREAMS", "10000"))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = count + 1024  # this process holds one socket per browser
    if soft != resource.RLIM_INFINITY and soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            unavailable(f"{wanted} open files (the hard limit is {hard}; raise it: ulimit -Hn)")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    cp_port = free_port()
    cp = Process(
        [*VANE, "control-plane", "--port", str(cp_port)],
        env={"VANE_DATABASE_URL": f"sqlite:///{tmp_path / 'vane.db'}"},
        cwd=tmp_path,
    )
    keys = {
        kind: cp.wait_for_line(rf"^\s+{kind}\s+({prefix}live_\S+)").group(1)
        for kind, prefix in (("management", "vsk_"), ("relay", "rsk_"), ("public", "pk_"))
    }
    cp_url = f"http://127.0.0.1:{cp_port}"
    wait_http_ok(f"{cp_url}/readyz")
    management = {"Authorization": f"Bearer {keys['management']}"}
    public = {"Authorization": f"Bearer {keys['public']}"}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    relay = Process(
        [
            *VANE,
            "relay",
            "--upstream",
            cp_url,
            "--port",
            str(port),
            "--data-dir",
            str(tmp_path / "r"),
        ],
        env={"VANE_RELAY_KEY": keys["relay"]},
    )
    browsers = Browsers()
    try:
        assert (
            httpx.post(f"{cp_url}/api/v1/flags", json={"key": FLAG}, headers=management).status_code
            == 201
        )
        wait_http_ok(f"{url}/readyz")
        until(
            lambda: (
                httpx.post(
                    f"{url}/ofrep/v1/evaluate/flags/{FLAG}",
                    json={"context": {"targetingKey": "u"}},
                    headers=public,
                ).status_code
                == 200
            ),
            15,
            "the flag on the relay",
        )
        bulk = httpx.post(
            f"{url}/ofrep/v1/evaluate/flags",
            json={"context": {"targetingKey": "u"}},
            headers=public,
        )
        stream_url = bulk.json()["eventStreams"][0]["url"]
        before_kib = relay_memory_kib(relay)
        open_s = browsers.open(stream_url, count, concurrency=500)
        time.sleep(1)
        per_stream_kib = (relay_memory_kib(relay) - before_kib) / count
        assert browsers.refused == []

        latencies: list[float] = []
        failures = 0
        with httpx.Client(timeout=10) as client:
            for i in range(500):
                start = time.perf_counter()
                answer = client.post(
                    f"{url}/ofrep/v1/evaluate/flags",
                    json={"context": {"targetingKey": f"user-{i}"}},
                    headers=public,
                )
                latencies.append((time.perf_counter() - start) * 1000)
                failures += answer.status_code != 200

        toggled_at = time.monotonic()
        toggle = httpx.post(
            f"{cp_url}/api/v1/flags/{FLAG}/environments/production/toggle",
            json={"enabled": True},
            headers=management,
        )
        assert toggle.status_code == 200
        environments = httpx.get(f"{cp_url}/api/v1/environments", headers=management).json()
        version = next(
            int(e["snapshotVersion"])
            for e in environments["environments"]
            if e["key"] == "production"
        )
        until(
            lambda: len(browsers.reached(b"id: %d" % version)) == count,
            30,
            "the toggle on every stream",
        )
        reach = [t - toggled_at for t in browsers.reached(b"id: %d" % version)]
        metrics = httpx.get(f"{url}/metrics").text
        report(
            "10,000 browsers holding SSE streams on one relay",
            streams=count,
            open_s=round(open_s, 2),
            kib_per_stream=round(per_stream_kib, 1),
            evaluation_failures=failures,
            evaluation_p50_ms=round(percentile(latencies, 0.5), 2),
            evaluation_p99_ms=round(percentile(latencies, 0.99), 2),
            toggle_reach_p99_s=round(percentile(reach, 0.99), 3),
            toggle_reach_max_s=round(max(reach), 3),
        )
        assert failures == 0
        assert f"vane_relay_sse_streams {count}.0" in metrics
    finally:
        browsers.close()
        relay.stop()
        cp.stop()
