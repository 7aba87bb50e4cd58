"""Writes that would close a prerequisite or segment cycle between them, sent at the same time to
control planes sharing one database: exactly one wins, the other is a 422 naming the field, and
no cycle is ever stored, whatever the interleaving.

Found from outside (issue #33): two PUTs at once on PostgreSQL (rx1 requires rx2, rx2 requires
rx1) both answered 200 and both were stored; relays then refused every later snapshot of the
environment. Each check read the graph before the other's write was committed. The rule: the
check and the write of what goes into a snapshot are serialised per project
(``control_plane.domain.common.serialise_project_writes``).

The same holds of a chain of prerequisites made longer than the engine compiles (32) by two
writes at once, one at each end (``shared.engine.graph.Chains``).

Two control-plane processes (replicas) share the database (PostgreSQL, or one SQLite file), and the two writes of each round are
released together from a barrier, one to each replica; rounds repeat so that the race is run
many times, not hoped for once.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.e2e.test_relays import ControlPlane, start_control_plane

pytestmark = pytest.mark.e2e

ROUNDS = 12


@pytest.fixture(scope="module")
def replicas(
    module_database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ControlPlane, ControlPlane]]:
    """Two replicas of one database: PostgreSQL, and SQLite (one file, two processes), where
    ``BEGIN IMMEDIATE`` already serialises every transaction. The module's tests share them,
    each on keys of its own."""
    cwd = tmp_path_factory.mktemp("replicas")
    first = start_control_plane(module_database_url, cwd)
    second = start_control_plane(module_database_url, cwd, keys=first.keys)
    try:
        yield first, second
    finally:
        second.process.stop()
        first.process.stop()


def at_once(
    writes: list[Callable[[], httpx.Response]],
) -> list[httpx.Response]:
    """Run ``writes`` in threads released together from a barrier."""
    barrier = threading.Barrier(len(writes))

    def run(write: Callable[[], httpx.Response]) -> httpx.Response:
        barrier.wait()
        return write()

    with ThreadPoolExecutor(max_workers=len(writes)) as pool:
        return list(pool.map(run, writes))


def write(cp: ControlPlane, method: str, path: str, body: Any) -> Callable[[], httpx.Response]:
    return lambda: cp.api(method, path, body)


def one_wins_one_is_refused(answers: list[httpx.Response], field: str) -> None:
    statuses = sorted(answer.status_code for answer in answers)
    assert statuses == [200, 422], [answer.text for answer in answers]
    refused = next(answer for answer in answers if answer.status_code == 422)
    fields = [item["field"] for item in refused.json()["error"]["details"]]
    assert {f.split("[")[0] for f in fields} == {field}, refused.text
    assert "cycle" in refused.text


def test_two_prerequisite_edits_at_once_never_store_a_cycle(
    replicas: tuple[ControlPlane, ControlPlane],
) -> None:
    first, second = replicas
    for round_ in range(ROUNDS):
        a, b = f"rx{round_}-a", f"rx{round_}-b"
        for key in (a, b):
            assert first.api("POST", "/flags", {"key": key}).status_code == 201
        answers = at_once(
            [
                write(
                    first,
                    "PUT",
                    f"/flags/{a}/environments/production",
                    {"prerequisites": [{"key": b, "variation": 0}]},
                ),
                write(
                    second,
                    "PUT",
                    f"/flags/{b}/environments/production",
                    {"prerequisites": [{"key": a, "variation": 0}]},
                ),
            ]
        )
        stored = [
            first.api("GET", f"/flags/{key}/environments/production").json()["prerequisites"]
            for key in (a, b)
        ]
        assert [] in stored, f"round {round_}: a cycle was stored: {stored}"
        one_wins_one_is_refused(answers, "prerequisites")


def test_two_segment_edits_at_once_never_store_a_cycle(
    replicas: tuple[ControlPlane, ControlPlane],
) -> None:
    first, second = replicas
    for round_ in range(ROUNDS):
        a, b = f"seg{round_}-a", f"seg{round_}-b"
        for key in (a, b):
            assert first.api("POST", "/segments", {"key": key}).status_code == 201
        answers = at_once(
            [
                write(first, "PATCH", f"/segments/{a}", {"rules": [{"clauses": [{"segment": b}]}]}),
                write(
                    second, "PATCH", f"/segments/{b}", {"rules": [{"clauses": [{"segment": a}]}]}
                ),
            ]
        )
        stored = [first.api("GET", f"/segments/{key}").json()["rules"] for key in (a, b)]
        assert [] in stored, f"round {round_}: a cycle was stored: {stored}"
        one_wins_one_is_refused(answers, "rules")


def test_random_prerequisite_edits_at_once_never_leave_a_cycle(
    replicas: tuple[ControlPlane, ControlPlane],
) -> None:
    """The rule over generated graphs: rounds of random prerequisite lists sent at once to both
    replicas; whatever each answers, the stored graph has no cycle, and every refusal is a 422
    naming ``prerequisites``."""
    first, second = replicas
    rng = random.Random(33)
    keys = [f"g{i}" for i in range(6)]
    for key in keys:
        assert first.api("POST", "/flags", {"key": key}).status_code == 201
    for _round in range(ROUNDS):
        edits = []
        for cp in (first, second, first, second):
            key = rng.choice(keys)
            targets = rng.sample([k for k in keys if k != key], rng.randint(0, 2))
            body = {"prerequisites": [{"key": t, "variation": 0} for t in targets]}
            edits.append(write(cp, "PUT", f"/flags/{key}/environments/production", body))
        for answer in at_once(edits):
            assert answer.status_code in (200, 422), answer.text
            if answer.status_code == 422:
                fields = {item["field"] for item in answer.json()["error"]["details"]}
                assert {f.split("[")[0] for f in fields} == {"prerequisites"}, answer.text
        graph = {
            key: [
                p["key"]
                for p in first.api("GET", f"/flags/{key}/environments/production").json()[
                    "prerequisites"
                ]
            ]
            for key in keys
        }
        assert not has_cycle(graph), graph


def has_cycle(graph: dict[str, list[str]]) -> bool:
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(key: str) -> bool:
        if state.get(key) == 1:
            return True
        if state.get(key) == 2:
            return False
        state[key] = 1
        found = any(visit(other) for other in graph.get(key, []))
        state[key] = 2
        return found

    return any(visit(key) for key in graph)


def test_two_edits_at_once_never_store_a_chain_longer_than_the_engine_compiles(
    replicas: tuple[ControlPlane, ControlPlane],
) -> None:
    """A chain of 31 prerequisites lengthened at both ends at once, one end on each replica:
    either alone makes 32, the engine's limit; both would make 33, which no snapshot of the
    environment could compile. Exactly one wins; the other is a 422 naming ``prerequisites``."""
    first, second = replicas
    for i in range(33):
        assert first.api("POST", "/flags", {"key": f"c{i}"}).status_code == 201
    for i in range(1, 31):  # c1 -> c2 -> ... -> c31
        needs = {"prerequisites": [{"key": f"c{i + 1}", "variation": 0}]}
        assert first.api("PUT", f"/flags/c{i}/environments/production", needs).status_code == 200
    top, bottom = "/flags/c0/environments/production", "/flags/c31/environments/production"
    for round_ in range(ROUNDS):
        answers = at_once(
            [
                write(first, "PUT", top, {"prerequisites": [{"key": "c1", "variation": 0}]}),
                write(second, "PUT", bottom, {"prerequisites": [{"key": "c32", "variation": 0}]}),
            ]
        )
        statuses = sorted(answer.status_code for answer in answers)
        assert statuses == [200, 422], [answer.text for answer in answers]
        refused = next(answer for answer in answers if answer.status_code == 422)
        assert refused.json()["error"]["details"][0]["field"] == "prerequisites", refused.text
        assert "nested more than 32 deep" in refused.text
        stored = [first.api("GET", path).json()["prerequisites"] for path in (top, bottom)]
        assert [] in stored, f"round {round_}: a chain of 33 was stored: {stored}"
        for path in (top, bottom):
            assert first.api("PUT", path, {"prerequisites": []}).status_code == 200
