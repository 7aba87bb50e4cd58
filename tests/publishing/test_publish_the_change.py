"""Publishing costs the change: after each write a relay receives a patch holding only what the
write touched, and the snapshot it then holds is the very one the control plane compiles from
scratch out of the database (``compile_environment``) — over a run of every kind of edit."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import msgspec
from litestar.testing import WebSocketTestSession
from sqlalchemy import select
from sqlalchemy.ext.asyncio import async_sessionmaker

from control_plane.db.engine import make_async_engine
from control_plane.db.models import Environment
from control_plane.domain.snapshots import compile_environment
from shared.wire import protocol as p
from shared.wire import snapshot as w
from tests.conftest import Api
from tests.publishing.test_stream import connect, hello, receive, snapshots

MANUAL = {"name": "Pricing copy", "type": "manual", "goal": "buy"}


def from_scratch(api: Api) -> dict[str, w.Snapshot]:
    async def compile_all() -> dict[str, w.Snapshot]:
        engine = make_async_engine(api.database_url)
        try:
            async with async_sessionmaker(engine)() as session:
                environments = await session.scalars(select(Environment))
                return {e.key: await compile_environment(session, e) for e in environments}
        finally:
            await engine.dispose()

    return asyncio.run(compile_all())


def comparable(snapshot: w.Snapshot) -> w.Snapshot:
    return msgspec.structs.replace(snapshot, generated_at=0)


class Relay:
    """What a relay holds, fed by the stream."""

    def __init__(self, api: Api, ws: WebSocketTestSession) -> None:
        self.api, self.ws = api, ws
        hello(ws)
        self.held = {key: m.snapshot for key, m in snapshots(ws, 2).items()}
        # writes before the connection may still be publishing (in the background): take them
        self.catch_up(from_scratch(self.api))

    def catch_up(self, expected: dict[str, w.Snapshot]) -> list[p.ToRelay]:
        """Read until every environment reaches the version the database holds."""
        got: list[p.ToRelay] = []
        while any(self.held[k].version < s.version for k, s in expected.items()):
            message = receive(self.ws)
            got.append(message)
            match message:
                case p.Patch() as patch:
                    held = self.held[patch.environment]
                    assert patch.from_version == held.version, (patch, held.version)
                    self.held[patch.environment] = p.apply_patch(held, patch)
                case p.SnapshotMessage(snapshot=snapshot):
                    self.held[snapshot.environment] = snapshot
        return got


def test_each_write_ships_a_patch_of_what_it_touched_and_ends_where_a_full_compile_does(
    api: Api,
) -> None:
    assert api.post("/segments", {"key": "beta", "included": ["u1"]}).status_code == 201
    assert api.post("/segments", {"key": "staff", "included": ["s1"]}).status_code == 201
    metric = {"name": "Orders", "event": "order", "aggregation": "conversion"}
    assert api.post("/metrics", metric).status_code == 201
    for key in ("parent", "child", "other"):
        assert api.post("/flags", {"key": key}).status_code == 201
    segment_rule = {
        "rules": [{"clauses": [{"segment": "beta", "op": "segmentMatch"}], "variation": 0}]
    }
    edits: list[tuple[str, Callable[[], Any], set[str]]] = [
        (
            "toggle",
            lambda: api.post("/flags/child/environments/production/toggle", {"enabled": True}),
            {"child"},
        ),
        ("new flag", lambda: api.post("/flags", {"key": "fresh"}), {"fresh"}),
        (
            "rule naming a segment",
            lambda: api.put("/flags/child/environments/production/rules", segment_rule),
            {"child"},
        ),
        ("segment edited", lambda: api.patch("/segments/beta", {"included": ["u2"]}), set()),
        (
            "segment nesting another",
            lambda: api.patch(
                "/segments/beta",
                {"rules": [{"clauses": [{"segment": "staff", "op": "segmentMatch"}]}]},
            ),
            set(),
        ),
        (
            "prerequisite",
            lambda: api.put(
                "/flags/other/environments/production",
                {"enabled": True, "prerequisites": [{"key": "parent", "variation": 0}]},
            ),
            {"other"},
        ),
        (
            "metrics attached",
            lambda: api.put("/flags/parent/metrics", {"metrics": ["orders"]}),
            {"parent"},
        ),
        ("archived", lambda: api.post("/flags/fresh/archive"), set()),
        ("restored", lambda: api.post("/flags/fresh/restore"), {"fresh"}),
        (
            "rule dropped",
            lambda: api.put("/flags/child/environments/production/rules", {"rules": []}),
            {"child"},
        ),
        ("experiment running", lambda: api.post("/experiments", MANUAL), set()),
        (
            "public key issued",
            lambda: api.post("/keys", {"kind": "public", "environment": "production"}),
            set(),
        ),
    ]
    with connect(api) as ws:
        relay = Relay(api, ws)
        for name, write, flags in edits:
            response = write()
            assert response.status_code < 300, (name, response.text)
            expected = from_scratch(api)
            got = relay.catch_up(expected)
            assert all(isinstance(m, p.Patch) for m in got), (name, got)
            for key, snapshot in expected.items():
                assert comparable(relay.held[key]) == comparable(snapshot), (name, key)
            production = [m for m in got if isinstance(m, p.Patch)]
            production = [m for m in production if m.environment == "production"]
            assert len(production) == 1, (name, production)
            # a patch names what the write touched, never the rest of the environment
            assert set(production[0].flags) == flags, (name, production[0].flags)
            if name == "archived":
                assert production[0].removed_flags == ("fresh",)


def test_a_segment_edit_ships_the_segment_and_no_flag(api: Api) -> None:
    assert api.post("/segments", {"key": "beta", "included": ["u1"]}).status_code == 201
    rules = {"rules": [{"clauses": [{"segment": "beta", "op": "segmentMatch"}], "variation": 0}]}
    for key in ("a", "b", "c"):
        assert api.post("/flags", {"key": key}).status_code == 201
    assert api.put("/flags/a/environments/production/rules", rules).status_code == 200
    with connect(api) as ws:
        relay = Relay(api, ws)
        assert api.patch("/segments/beta", {"included": ["u9"]}).status_code == 200
        expected = from_scratch(api)
        (patch,) = relay.catch_up(expected)
        assert isinstance(patch, p.Patch)
        assert patch.environment == "production"  # staging's flags do not use it
        assert patch.flags == {}
        assert patch.segments["beta"].included == ("u9",)
        assert comparable(relay.held["production"]) == comparable(expected["production"])
        # keys of other kinds travel with the segment (issue #35)
        orgs = {"includedContexts": [{"contextKind": "org", "values": ["acme"]}]}
        assert api.patch("/segments/beta", orgs).status_code == 200
        expected = from_scratch(api)
        (patch,) = relay.catch_up(expected)
        assert isinstance(patch, p.Patch)
        assert patch.segments["beta"].included_contexts == (w.ContextKeys("org", ("acme",)),)
        assert comparable(relay.held["production"]) == comparable(expected["production"])
