"""A key is taken once: creates of the same key at once, of every keyed resource, give one 201
and 409s naming the key, never a 5xx and never two rows (``rows.written_once``: the database's
unique constraint is the rule's one home; a check before the insert raced another request's)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.conftest import Api

AT_ONCE = 4

BODIES: dict[str, tuple[str, dict[str, Any], str]] = {
    "flag": ("/flags", {"key": "taken"}, "a flag"),
    "segment": ("/segments", {"key": "taken"}, "a segment"),
    "metric": (
        "/metrics",
        {"key": "taken", "name": "T", "event": "e", "aggregation": "count"},
        "a metric",
    ),
    "layer": ("/layers", {"key": "taken", "name": "T"}, "a layer"),
    "holdout": (
        "/holdouts",
        {"key": "taken", "name": "T", "share": 0.1, "metrics": ["buy"]},
        "a holdout",
    ),
    "experiment": (
        "/experiments",
        {"key": "taken", "name": "T", "type": "manual", "goal": "signup", "activate": True},
        "an experiment",
    ),
    "environment": ("/environments", {"key": "taken", "name": "T"}, "an environment"),
}


@pytest.mark.parametrize("kind", sorted(BODIES))
def test_one_create_of_a_key_wins_the_others_get_409(api: Api, kind: str) -> None:
    path, body, what = BODIES[kind]
    if kind == "holdout":  # a holdout measures a metric
        made = api.post(
            "/metrics", {"key": "buy", "name": "B", "event": "b", "aggregation": "count"}
        )
        assert made.status_code == 201, made.text
    start = threading.Barrier(AT_ONCE)
    answers: list[Any] = []

    def create() -> None:
        start.wait()
        answers.append(api.post(path, body))

    threads = [threading.Thread(target=create) for _ in range(AT_ONCE)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [201] + [409] * (AT_ONCE - 1), [a.text for a in answers]
    for answer in answers:
        if answer.status_code == 409:
            assert answer.json()["error"]["message"] == f"{what} with key 'taken' already exists"
    listed = api.get(path).json()
    [items] = [v for v in listed.values() if isinstance(v, list)]
    assert [x["key"] for x in items].count("taken") == 1
