"""Events as a backend sends them: one store, field rules, exactly-once, inspection."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.conftest import Api


def ev(i: int, **extra: Any) -> dict[str, Any]:
    return {
        "unit": f"u{i}",
        "event": "purchase",
        "value": 100 * i,
        "currency": "EUR",
        "eventId": f"order-{i}",
        **extra,
    }


def stored(api: Api, **query: Any) -> list[dict[str, Any]]:
    params = "&".join(f"{k}={v}" for k, v in {"limit": 1000, **query}.items())
    return api.get(f"/events?{params}").json()["events"]  # type: ignore[no-any-return]


def test_track_one_event_with_defaults(api: Api) -> None:
    before = int(time.time() * 1000)
    response = api.post("/track", {"unit": "visitor-1", "event": "signup"}, key=api.keys["server"])
    assert response.status_code == 200, response.text
    assert response.json() == {"accepted": 1, "duplicates": 0, "conflicts": 0}
    [event] = stored(api)
    assert (event["unit"], event["event"], event["source"]) == ("visitor-1", "signup", "server")
    assert before <= event["ts"] <= int(time.time() * 1000)
    assert "value" not in event or event["value"] is None
    assert event["eventId"].startswith("cp-")  # given one on arrival


def test_events_without_event_id_are_each_stored(api: Api) -> None:
    same = {"unit": "u", "event": "view", "ts": 1_750_000_000_000}
    response = api.post("/events", {"events": [same, same]}, key=api.keys["server"])
    assert response.json() == {"accepted": 2, "duplicates": 0, "conflicts": 0}
    assert api.post("/track", same, key=api.keys["server"]).json() == {
        "accepted": 1,
        "duplicates": 0,
        "conflicts": 0,
    }
    assert len({e["eventId"] for e in stored(api)}) == 3


def test_whole_float_values_are_stored_as_integers_and_backslashes_are_not_nul(api: Api) -> None:
    props = {"path": "C:\\u0000dir"}  # a backslash, then the letters u0000
    response = api.post(
        "/events",
        {"events": [{"unit": "u", "event": "purchase", "value": 4999.0, "props": props}]},
        key=api.keys["server"],
    )
    assert response.status_code == 200, response.text
    [event] = stored(api)
    assert event["value"] == 4999
    assert type(event["value"]) is int
    assert event["props"] == props


def test_batch_duplicates_within_across_and_between_paths(api: Api) -> None:
    server = api.keys["server"]
    batch = [ev(1), ev(2), ev(1), ev(3)]
    first = api.post("/events", {"events": batch}, key=server)
    assert first.json() == {"accepted": 3, "duplicates": 1, "conflicts": 0}
    again = api.post("/events", {"events": batch}, key=server)
    assert again.json() == {"accepted": 0, "duplicates": 4, "conflicts": 0}
    via_track = api.post("/track", ev(2), key=api.keys["management"])
    assert via_track.json() == {"accepted": 0, "duplicates": 1, "conflicts": 0}
    new = api.post("/events", {"events": [ev(4), ev(3)]}, key=api.keys["relay"])
    assert new.json() == {"accepted": 1, "duplicates": 1, "conflicts": 0}
    events = stored(api)
    assert sorted(e["eventId"] for e in events) == ["order-1", "order-2", "order-3", "order-4"]
    without_ids = [{"unit": "u", "event": "view"}] * 3
    assert api.post("/events", {"events": without_ids}, key=server).json() == {
        "accepted": 3,
        "duplicates": 0,
        "conflicts": 0,
    }


def test_a_resend_is_a_conflict_only_where_its_payload_differs(api: Api) -> None:
    """What a relay's redelivery after a lost acknowledgement gets: an exact resend is a plain
    duplicate, whatever the order of its props' keys or a ``ts`` it leaves out; a payload that
    differs in any field under the same ``eventId`` is a conflict, and the first copy stays."""
    server = api.keys["server"]
    first = ev(
        1,
        props={"plan": "pro", "seats": 3, "tags": ["a", {"x": 1, "y": None}]},
        ts=1_750_000_000_000,
    )
    plain = ev(2)  # no props, url or ts: stored with the time of receipt
    assert api.post("/events", {"events": [first, plain]}, key=server).json() == {
        "accepted": 2,
        "duplicates": 0,
        "conflicts": 0,
    }
    reordered = {**first, "props": {"tags": ["a", {"y": None, "x": 1}], "seats": 3, "plan": "pro"}}
    without_ts = {k: v for k, v in first.items() if k != "ts"}
    exact = [first, plain, reordered, without_ts, {**first, "value": 100.0}]
    assert api.post("/events", {"events": exact}, key=server).json() == {
        "accepted": 0,
        "duplicates": 5,
        "conflicts": 0,
    }
    changed = [
        {**first, "value": 101},
        {**first, "value": None},
        {**first, "unit": "u9"},
        {**first, "event": "refund"},
        {**first, "currency": "USD"},
        {**first, "props": {**first["props"], "seats": 4}},
        {**first, "props": None},
        {**first, "url": "https://shop.example/"},
        {**first, "ts": 1_750_000_000_001},
        {**plain, "props": {"plan": "pro"}},
        {**plain, "ts": 1_750_000_000_000},  # it was stored at the time of receipt
    ]
    for item in changed:
        answer = api.post("/track", item, key=server)
        assert answer.json() == {"accepted": 0, "duplicates": 1, "conflicts": 1}, item
    mixed = [ev(3), first, changed[0], ev(3, value=7), ev(4), ev(4)]
    assert api.post("/events", {"events": mixed}, key=server).json() == {
        "accepted": 2,
        "duplicates": 4,
        "conflicts": 2,  # changed[0] against the stored copy, ev(3, value=7) against ev(3)
    }
    by_id = {e["eventId"]: e for e in stored(api)}
    assert by_id["order-1"]["value"] == 100
    assert by_id["order-1"]["props"] == first["props"]
    assert by_id["order-3"]["value"] == 300


def test_sources_follow_the_key_and_relays_may_say_browser(api: Api) -> None:
    api.post("/track", {"unit": "a", "event": "e", "eventId": "1"}, key=api.keys["server"])
    api.post("/track", {"unit": "a", "event": "e", "eventId": "2"}, key=api.keys["management"])
    api.post(
        "/events",
        {"events": [{"unit": "a", "event": "e", "eventId": "3", "source": "browser"}]},
        key=api.keys["relay"],
    )
    api.post(
        "/events", {"events": [{"unit": "a", "event": "e", "eventId": "4"}]}, key=api.keys["relay"]
    )
    by_id = {e["eventId"]: e["source"] for e in stored(api)}
    # a browser's id lives in its own namespace (it can never shadow a server's "3")
    assert by_id == {"1": "server", "2": "management", "browser:3": "browser", "4": "relay"}
    refused = api.post(
        "/track", {"unit": "a", "event": "e", "source": "browser"}, key=api.keys["server"]
    )
    assert refused.status_code == 422
    assert refused.json()["error"]["details"][0]["field"] == "source"
    refused = api.post(
        "/events",
        {"events": [{"unit": "a", "event": "e"}, {"unit": "a", "event": "e", "source": "relay"}]},
        key=api.keys["server"],
    )
    assert refused.status_code == 422
    assert refused.json()["error"]["details"][0]["field"] == "events[1].source"
    assert {e["eventId"] for e in stored(api)} == {"1", "2", "browser:3", "4"}


@pytest.mark.parametrize(
    ("item", "field", "says"),
    [
        ({"event": "e"}, "unit", "unit"),
        ({"unit": "u"}, "event", "event"),
        ({"unit": " ", "event": "e"}, "unit", "blank"),
        ({"unit": "u", "event": "e", "value": 49.99}, "value", "send 4999 for 49.99"),
        ({"unit": "u", "event": "e", "value": "4999"}, "value", "Expected"),
        ({"unit": "u", "event": "e", "currency": "eur"}, "currency", "ISO 4217"),
        ({"unit": "u", "event": "e", "currency": "ABC"}, "currency", "ISO 4217"),
        ({"unit": "u", "event": "e", "props": {"x": "a" * 17000}}, "props", "16 KiB"),
        ({"unit": "u", "event": "e", "props": []}, "props", "Expected"),
        ({"unit": "u", "event": "e", "ts": 1_700_000_000}, "ts", "milliseconds"),
        ({"unit": "u", "event": "e", "ts": 1.5}, "ts", "Expected"),
        ({"unit": "u", "event": "e", "eventId": ""}, "eventId", "blank"),
        ({"unit": "u\u0000", "event": "e"}, "unit", "NUL"),
        ({"unit": "u", "event": "e", "props": {"k": "a\u0000"}}, "props", "NUL"),
        ({"unit": "u", "event": "e", "url": "https://x/\u0000"}, "url", "NUL"),
        ({"unit": "u", "event": "e", "colour": "red"}, "colour", "unknown field"),
        ({"unit": "u", "event": "e", "value": 2**53}, "value", "at most"),
        ({"unit": "u", "event": "e", "value": -(2**63)}, "value", "at most"),
        ({"unit": "u", "event": "$signup"}, "event", "reserved"),
        ({"unit": "u", "event": "e", "eventId": "browser:order-1"}, "eventId", "reserved"),
        (
            {
                "unit": "u",
                "event": "e",
                "props": {"a": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]},
            },
            "props",
            "nested",
        ),
    ],
)
def test_invalid_event_names_the_item_and_field_and_stores_nothing(
    api: Api, item: dict[str, Any], field: str, says: str
) -> None:
    batch = [ev(1), ev(2), item]
    response = api.post("/events", {"events": batch}, key=api.keys["server"])
    assert response.status_code == 422, response.text
    details = response.json()["error"]["details"]
    assert [d["field"] for d in details] == [f"events[2].{field}"]
    assert says in details[0]["message"]
    single = api.post("/track", item, key=api.keys["server"])
    assert single.status_code == 422
    assert single.json()["error"]["details"][0]["field"] == field
    assert stored(api) == []


def test_every_bad_item_is_reported(api: Api) -> None:
    batch = [{"unit": "u", "event": "e", "value": 1.5}, ev(1), {"event": "e"}, "not an object"]
    response = api.post("/events", {"events": batch}, key=api.keys["server"])
    assert response.status_code == 422
    fields = [d["field"] for d in response.json()["error"]["details"]]
    assert fields == ["events[0].value", "events[2].unit", "events[3]"]
    assert stored(api) == []


def test_batch_limits(api: Api) -> None:
    server = api.keys["server"]
    too_many = api.post("/events", {"events": [{"unit": "u", "event": "e"}] * 1001}, key=server)
    assert too_many.status_code == 422
    assert "1000" in too_many.json()["error"]["message"]
    assert api.post("/events", {"events": []}, key=server).status_code == 422
    assert api.post("/events", {}, key=server).status_code == 422
    assert (
        api.post("/events", {"events": [ev(i) for i in range(1000)]}, key=server).json()["accepted"]
        == 1000
    )


def test_who_may_send_and_read(api: Api) -> None:
    assert api.post("/track", ev(1), key=api.keys["public"]).status_code == 403
    assert api.post("/track", ev(1), key=None).status_code == 401
    assert api.get("/events", key=api.keys["server"]).status_code == 403
    assert api.get("/events/stats", key=api.keys["server"]).status_code == 403


def test_listing_filters_and_pages(api: Api) -> None:
    base = 1_750_000_000_000
    events: list[dict[str, Any]] = [
        {
            "unit": f"u{i % 3}",
            "event": "view" if i % 2 else "click",
            "ts": base + i // 2,  # pairs share a timestamp: pages break ties by eventId
            "eventId": f"e{i}",
        }
        for i in range(25)
    ]
    api.post("/events", {"events": events}, key=api.keys["server"])
    newest = stored(api)
    assert [e["ts"] for e in newest] == sorted((e["ts"] for e in events), reverse=True)
    assert {e["event"] for e in stored(api, event="view")} == {"view"}
    assert {e["unit"] for e in stored(api, unit="u1")} == {"u1"}
    window = stored(api, since=base + 10, until=base + 15)
    assert [e["ts"] for e in window] == sorted(
        (e["ts"] for e in events if base + 10 <= e["ts"] < base + 15), reverse=True
    )
    assert stored(api, unit="nobody") == []
    assert {e["eventId"] for e in stored(api, unit="u2", event="view")} == {
        f"e{i}" for i in range(25) if i % 3 == 2 and i % 2
    }
    page = api.get("/events?limit=10").json()
    seen = [e["eventId"] for e in page["events"]]
    last = page["events"][-1]  # the events' cursor is their own, kept as it was: ts:id
    assert page["nextCursor"] == f"{last['ts']}:{last['eventId']}"
    while page["nextCursor"]:
        page = api.get(f"/events?limit=10&cursor={page['nextCursor']}").json()
        seen.extend(e["eventId"] for e in page["events"])
    assert sorted(seen) == sorted(e["eventId"] for e in events)
    assert len(seen) == 25
    assert api.get("/events?cursor=nonsense").status_code == 422


def test_stats_count_per_event_name(api: Api) -> None:
    base = 1_750_000_000_000
    api.post(
        "/events",
        {
            "events": [{"unit": f"u{i % 4}", "event": "view", "ts": base + i} for i in range(10)]
            + [{"unit": "u9", "event": "buy", "ts": base + 100, "value": 500}]
        },
        key=api.keys["server"],
    )
    stats = api.get("/events/stats").json()
    assert stats["total"] == 11
    assert stats["events"] == [
        {"event": "buy", "count": 1, "units": 1, "firstTs": base + 100, "lastTs": base + 100},
        {"event": "view", "count": 10, "units": 4, "firstTs": base, "lastTs": base + 9},
    ]
