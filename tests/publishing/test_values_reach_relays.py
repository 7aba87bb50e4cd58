"""Whatever flag values the API accepts reach a relay: a property over generated values of every
type (found from outside: a number of 1e20 was accepted, then no change reached any relay)."""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from litestar.testing import WebSocketTestSession

from relay.store import EnvironmentState
from shared.engine import Reason, evaluate
from shared.wire import protocol as p
from tests.conftest import Api
from tests.publishing.test_stream import connect, hello, receive, snapshots

numbers = st.one_of(
    st.integers(),  # unbounded: far past 64 bits either way
    st.integers(min_value=-(2**53) - 2, max_value=2**53 + 2),
    st.floats(allow_nan=True, allow_infinity=True),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=20))
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
flag_types = st.sampled_from(["boolean", "string", "number", "json"])
of_type = {  # values of the flag's own type, so that many examples are accepted
    "boolean": st.booleans(),
    "string": st.text(max_size=20),
    "number": numbers,
    "json": json_values,
}


@st.composite
def flags(draw: st.DrawFn) -> tuple[str, list[Any]]:
    """A flag type and 2 or 3 values: mostly of that type, the first sometimes of any."""
    flag_type = draw(flag_types)
    first = draw(json_values if draw(st.booleans()) else of_type[flag_type])
    rest = draw(st.lists(of_type[flag_type], min_size=1, max_size=2))
    return flag_type, [first, *rest]


def body_of(key: str, flag_type: str, values: list[Any], idx: list[int] | None) -> bytes:
    variations = [
        {"value": value, **({"idx": idx[i]} if idx is not None else {})}
        for i, value in enumerate(values)
    ]
    # the standard library writes NaN and Infinity as bare tokens, as a careless client would
    return json.dumps({"key": key, "type": flag_type, "variations": variations}).encode()


def patch_with(ws: WebSocketTestSession, environment: str, flag: str) -> p.Patch:
    while True:
        message = receive(ws)
        if (
            isinstance(message, p.Patch)
            and message.environment == environment
            and flag in message.flags
        ):
            return message


def test_every_value_the_api_accepts_reaches_a_relay(api: Api) -> None:
    keys = (f"generated-{n}" for n in itertools.count())
    accepted: list[str] = []
    with connect(api) as ws:
        hello(ws)
        state = EnvironmentState.build(
            snapshots(ws, 2)["production"].snapshot, p.Access(), received_at=0
        )

        @settings(
            max_examples=100,
            derandomize=True,  # the same examples every run: a CI run never differs from yours
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )
        @given(
            flag=flags(),
            idx=st.sampled_from([None, None, None])
            | st.lists(st.integers(min_value=-1), min_size=3, max_size=3, unique=True),
        )
        def accepted_reaches_relay(flag: tuple[str, list[Any]], idx: list[int] | None) -> None:
            nonlocal state
            flag_type, values = flag
            key = next(keys)
            response = api.request(
                "POST",
                "/flags",
                content=body_of(key, flag_type, values, idx),
                headers={"Content-Type": "application/json"},
            )
            assert response.status_code in (201, 400, 422), response.text
            if response.status_code != 201:
                return
            accepted.append(key)
            created = response.json()
            patch = patch_with(ws, "production", key)
            assert patch.from_version == state.version
            state = EnvironmentState.patched(state, patch)  # compiles, as a relay does
            sent = [v["value"] for v in created["variations"]]
            served = [v.value for v in state.snapshot.flags[key].variations]
            assert msgspec.json.encode(served, order="sorted") == msgspec.json.encode(
                sent, order="sorted"
            )
            result = evaluate(state.compiled, key, {"key": "u1"}, time.time_ns() // 1_000_000)
            assert result.reason is Reason.OFF
            off = created["environments"]["production"]["offVariation"]
            expected = next(v["value"] for v in created["variations"] if v["idx"] == off)
            assert msgspec.json.encode(result.value, order="sorted") == msgspec.json.encode(
                expected, order="sorted"
            )

        accepted_reaches_relay()
    assert len(accepted) >= 10, accepted  # the property was tried on accepted values
