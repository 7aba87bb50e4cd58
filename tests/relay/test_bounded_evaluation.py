"""Attributes past an operator's cap are no match over the relay's HTTP API, never a 500
(issue #33: a semVer attribute of 200,000 digits answered 500), and an environment whose rules
search evaluates on a worker thread with the same answers."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from relay.routes import evaluation
from shared.wire.snapshot import Clause, Rule, Serve, Snapshot
from tests.relay.helpers import ENV, _flag, auth, build_snapshot, make_relay, public_access

pytestmark = pytest.mark.anyio

BULK = "/ofrep/v1/evaluate/flags"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _snapshot() -> Snapshot:
    base = build_snapshot(2)
    flags = {
        "old-app": _flag(
            "old-app",
            [True, False],
            fallthrough=Serve(variation=1),
            rules=(
                Rule(
                    id="r",
                    clauses=(Clause(op="semVerLessThan", attribute="v", values=("2.0.0",)),),
                    serve=Serve(variation=0),
                ),
            ),
        ),
        "ab-user": _flag(
            "ab-user",
            [True, False],
            fallthrough=Serve(variation=1),
            rules=(
                Rule(
                    id="m",
                    clauses=(Clause(op="matches", attribute="s", values=("[ab]*a[ab]{40}c",)),),
                    serve=Serve(variation=0),
                ),
            ),
        ),
    }
    return Snapshot(
        project="proj",
        environment=ENV,
        version=2,
        flags={**base.flags, **flags},
        segments=base.segments,
    )


@pytest.mark.parametrize("version", ["9" * 200_000, "1.0.0-" + "a1" * 250_000])
async def test_a_version_past_the_cap_is_no_match_on_every_endpoint(version: str) -> None:
    relay = make_relay()
    state = relay.swap(_snapshot(), public_access())
    assert state.searches
    context = {"context": {"targetingKey": "u", "v": version, "s": "ba" + "b" * 40 + "c"}}
    async with relay.client() as client:
        single = await client.post(f"{BULK}/old-app", json=context, headers=auth())
        bulk = await client.post(BULK, json=context, headers=auth())
        sdk = await client.post("/sdk/v1/flags", json=context, headers=auth())
        hit = await client.post(
            f"{BULK}/old-app", json={"context": {"targetingKey": "u", "v": "1.2"}}, headers=auth()
        )
    assert single.status_code == 200, single.text
    assert (single.json()["value"], single.json()["reason"]) == (False, "DEFAULT")
    assert bulk.status_code == 200, bulk.text
    items = {item["key"]: item for item in bulk.json()["flags"]}
    assert items["old-app"]["value"] is False
    assert items["ab-user"]["value"] is True  # the regex, searched on the worker thread
    assert sdk.json()["flags"]["old-app"]["reason"] == "FALLTHROUGH"
    assert sdk.json()["flags"]["ab-user"]["reason"] == "RULE_MATCH"
    assert (hit.json()["value"], hit.json()["reason"]) == (True, "TARGETING_MATCH")


async def test_an_environment_without_patterns_does_not_search() -> None:
    relay = make_relay()
    state = relay.store.get(ENV)
    assert state is not None
    assert not state.searches


def _one_rule_snapshot(clause: Clause) -> Snapshot:
    base = build_snapshot(2)
    flag = _flag(
        "probe",
        [True, False],
        fallthrough=Serve(variation=1),
        rules=(Rule(id="r", clauses=(clause,), serve=Serve(variation=0)),),
    )
    return Snapshot(
        project="proj",
        environment=ENV,
        version=2,
        flags={**base.flags, "probe": flag},
        segments=base.segments,
    )


@pytest.mark.parametrize(
    ("op", "value"), [("contains", "needle"), ("startsWith", "a"), ("endsWith", "needle")]
)
async def test_a_string_past_the_cap_is_no_match_for_every_string_operator(
    op: str, value: str
) -> None:
    """A 1 MiB attribute once cost ``contains`` a full scan per value, seconds for 10,000 values
    on the event loop; past ``MAX_MATCHED_LENGTH`` it is no match, negated or not, like
    ``matches`` and the version cap."""
    huge = "a" * 900_000 + "needle"
    for negate, expected in [(False, (False, "DEFAULT")), (True, (True, "TARGETING_MATCH"))]:
        relay = make_relay()
        relay.swap(
            _one_rule_snapshot(Clause(op=op, attribute="s", values=(value,), negate=negate)),
            public_access(),
        )
        async with relay.client() as client:
            for attribute in [huge, [huge], ["a" * 10_000 + "needle"] * 2]:
                answer = await client.post(
                    f"{BULK}/probe",
                    json={"context": {"targetingKey": "u", "s": attribute}},
                    headers=auth(),
                )
                assert answer.status_code == 200, answer.text
                assert (answer.json()["value"], answer.json()["reason"]) == expected
            short = await client.post(
                f"{BULK}/probe",
                json={"context": {"targetingKey": "u", "s": "a" * 10_000 + "needle"}},
                headers=auth(),
            )
        assert short.json()["value"] is not negate  # under the cap the operator still works


@pytest.mark.parametrize("value", [[1], {"x": 1}])
async def test_a_deeply_nested_attribute_is_no_match_not_a_500(value: object) -> None:
    """A context attribute nested 900 deep decodes (JSON allows ~1,000) and once exhausted the
    recursion limit comparing it with a composite ``in`` value: OFREP single answered 500."""
    relay = make_relay()
    relay.swap(_one_rule_snapshot(Clause(op="in", attribute="a", values=(value,))), public_access())
    deep = '{"context":{"targetingKey":"u","a":' + "[" * 900 + "]" * 900 + "}}"
    async with relay.client() as client:
        single = await client.post(
            f"{BULK}/probe",
            content=deep.encode(),
            headers=auth(**{"content-type": "application/json"}),
        )
        bulk = await client.post(
            BULK, content=deep.encode(), headers=auth(**{"content-type": "application/json"})
        )
    assert single.status_code == 200, single.text
    assert (single.json()["value"], single.json()["reason"]) == (False, "DEFAULT")
    items = {item["key"]: item for item in bulk.json()["flags"]}
    assert items["probe"]["reason"] == "DEFAULT"


def _probe_answers(body: Any) -> tuple[object, str]:
    """The ``probe`` flag's value and reason in an OFREP single, OFREP bulk or SDK answer."""
    if "flags" not in body:
        return body["value"], body["reason"]
    if isinstance(body["flags"], list):
        item = next(f for f in body["flags"] if f["key"] == "probe")
        return item["value"], item["reason"]
    return body["flags"]["probe"]["value"], body["flags"]["probe"]["reason"]


async def test_a_large_context_evaluates_on_the_worker_whatever_the_environment() -> None:
    """An environment that does not search evaluated every context on the loop, and ``in`` on a
    300,000-element array attribute looks each element up (~0.1 s a clause; issue #33). A context
    past ``INLINE_CONTEXT_BYTES`` evaluates on the worker thread on every evaluation endpoint,
    with ``in``'s meaning unchanged. Observed: while the worker is held busy the large requests
    stay unanswered (any number of loop turns; inline they were answered within a few) and a
    small one on the same environment is answered; freed, each large one gets the rule's
    variation when the element is there and the default when it is not."""
    relay = make_relay()
    state = relay.swap(_one_rule_snapshot(Clause(op="in", attribute="a", values=("needle",))))
    assert not state.searches
    paths = [f"{BULK}/probe", BULK, "/sdk/v1/flags"]
    present = {"context": {"targetingKey": "u", "a": [0] * 299_999 + ["needle"]}}
    absent = {"context": {"targetingKey": "u", "a": [0] * 300_000}}
    busy = threading.Event()
    held = evaluation._executor().submit(busy.wait)
    try:
        async with relay.client() as client:
            large = [
                asyncio.ensure_future(client.post(path, json=present, headers=auth()))
                for path in paths
            ]
            for _ in range(2_000):
                await asyncio.sleep(0)
                if any(task.done() for task in large):
                    break
            small = await client.post(
                f"{BULK}/probe",
                json={"context": {"targetingKey": "u", "a": ["needle"]}},
                headers=auth(),
            )
            waiting = [task.done() for task in large]
            busy.set()
            hits = await asyncio.gather(*large)
            misses = [await client.post(path, json=absent, headers=auth()) for path in paths]
    finally:
        busy.set()
        held.result()
    assert waiting == [False, False, False]  # queued behind the busy worker, not on the loop
    assert _probe_answers(small.json()) == (True, "TARGETING_MATCH")
    for path, hit, miss in zip(paths, hits, misses, strict=True):
        assert hit.status_code == 200, (path, hit.text)
        assert _probe_answers(hit.json())[0] is True, path
        assert _probe_answers(miss.json())[0] is False, path
