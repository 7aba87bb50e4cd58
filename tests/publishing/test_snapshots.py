"""The environment snapshots decode flag rows straight into the wire types; the result must be the
very snapshot ``flag_snapshot`` builds from the same rows loaded as ORM objects."""

from __future__ import annotations

import asyncio

from sqlalchemy import select
from sqlalchemy.ext.asyncio import async_sessionmaker

from control_plane.db.engine import make_async_engine
from control_plane.db.models import Environment, Flag, FlagMetric, FlagSetting
from control_plane.domain.snapshots import compile_environment, flag_snapshot
from shared.wire import snapshot as w
from tests.conftest import Api
from tests.control_plane.test_flags import MULTI, create


def test_compiled_flags_equal_flag_snapshot_of_the_rows(api: Api) -> None:
    create(api, MULTI)
    create(api, {"key": "parent"})
    create(
        api,
        {
            "key": "limits",
            "type": "json",
            "variations": [
                {"idx": 0, "value": {"max": 3, "tags": ["a", "b"]}},
                {"idx": 1, "value": None},
            ],
        },
    )
    assert api.post("/segments", {"key": "beta", "included": ["u1"]}).status_code == 201
    settings = {
        "enabled": True,
        "offVariation": 0,
        "fallthrough": {"rollout": [{"idx": 1, "weight": 25.5}, {"idx": 2, "weight": 74.5}]},
        "targets": [{"variation": 2, "values": ["vip-1", "vip-2"]}],
        "prerequisites": [{"key": "parent", "variation": 0}],
    }
    assert api.put("/flags/checkout-flow/environments/production", settings).status_code == 200
    rules = {
        "rules": [
            {"clauses": [{"segment": "beta", "op": "segmentMatch"}], "variation": 1},
            {
                "description": "paid plans",
                "clauses": [
                    {"attribute": "plan", "op": "in", "values": ["pro", 3, True], "negate": True}
                ],
                "serve": {"rollout": [{"idx": 0, "weight": 50}, {"idx": 2, "weight": 50}]},
            },
        ]
    }
    path = "/flags/checkout-flow/environments/production/rules"
    assert api.put(path, rules).status_code == 200
    metric = {"name": "Orders", "event": "order", "aggregation": "conversion"}
    assert api.post("/metrics", metric).status_code == 201
    assert api.put("/flags/limits/metrics", {"metrics": ["orders"]}).status_code == 200
    assert api.post("/flags/limits/environments/production/toggle", {"enabled": True}).json()

    async def both() -> tuple[w.Snapshot, dict[str, w.FlagSnapshot]]:
        engine = make_async_engine(api.database_url)
        try:
            async with async_sessionmaker(engine)() as session:
                environment = await session.scalar(
                    select(Environment).where(Environment.key == "production")
                )
                assert environment is not None
                compiled = await compile_environment(session, environment)
                tracked = set(await session.scalars(select(FlagMetric.flag_id)))
                rows = await session.execute(
                    select(Flag, FlagSetting)
                    .join(FlagSetting, FlagSetting.flag_id == Flag.id)
                    .where(FlagSetting.environment_id == environment.id)
                )
                expected = {
                    flag.key: flag_snapshot(flag, setting, tracked=flag.id in tracked)
                    for flag, setting in rows
                }
                return compiled, expected
        finally:
            await engine.dispose()

    compiled, expected = asyncio.run(both())
    assert set(compiled.flags) == {"checkout-flow", "parent", "limits"}
    assert compiled.flags == expected
    checkout = compiled.flags["checkout-flow"]
    assert len(checkout.rules) == 2
    assert checkout.targets[0].values == ("vip-1", "vip-2")
    assert checkout.prerequisites[0].key == "parent"
    assert compiled.flags["limits"].track_exposures
    assert compiled.flags["limits"].variations[0].value == {"max": 3, "tags": ["a", "b"]}
