"""Experiment decisions reach webhooks once each: results are computed on every read, but a
winner and a failed sample-ratio check are each announced the first time they appear."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Api
from tests.experiments.seed import create_experiment, seed, units
from tests.webhooks.conftest import eventually
from tests.webhooks.receiver import receiving

SECRET = "whsec_decisions_0123456789"


@pytest.mark.parametrize("engine", ["sequential", "frequentist"])
def test_a_winner_and_a_failed_srm_are_sent_once_each(hooks_api: Api, engine: str) -> None:
    """The sequential engine may name a winner at any look; the fixed-horizon one (#35) does not
    at 200 units: its verdict is not yet, and no ``experiment.winner`` is sent."""
    api = hooks_api
    early = engine == "sequential"
    with receiving(SECRET) as receiver:
        body = {"url": receiver.url, "events": ["experiment.*"], "secret": SECRET}
        hook = api.post("/webhooks", body).json()
        exp = create_experiment(
            api, {"name": "Hero", "type": "manual", "goal": "buy", "statsEngine": engine}
        )
        # twice as many control units as treatment ones under equal weights: SRM fails;
        # 10 % against 30 % conversion: the treatment wins (or leads, not yet a winner)
        seed(
            api,
            exp["key"],
            {
                "control": units(120, None) + units(1080),
                "treatment": units(180, None) + units(420),
            },
            event="buy",
        )
        for _ in range(3):
            results = api.get(f"/experiments/{exp['key']}").json()["results"]
            assert results["winner"] == ("treatment" if early else None)
            assert results["verdict"]["state"] == ("winner" if early else "not-yet")
            assert results["srm"]["flagged"] is True
        sentinel = api.post("/flags", {"key": "after"})  # not matched: fans out after the rest
        assert sentinel.status_code == 201
        api.post(f"/experiments/{exp['id']}", {"status": "stopped"})  # one more, matched

        def sent() -> list[dict[str, Any]]:
            listed = api.get(f"/webhooks/{hook['id']}/deliveries").json()["deliveries"]
            return sorted(listed, key=lambda d: d["id"])

        eventually(
            lambda: any(d["type"] == "experiment.status" for d in sent()),
            what="every earlier event fanned out",
        )
        types = [d["type"] for d in sent()]
        assert types == [
            "experiment.created",
            *(["experiment.winner"] if early else []),
            "experiment.srm_failed",
            "experiment.status",
        ]
        eventually(lambda: len(receiver.unique()) == len(types), what="all delivered")
        srm = next(p for p in receiver.unique().values() if p["type"] == "experiment.srm_failed")
        assert srm["data"]["srm"]["flagged"] is True
        if early:
            won = next(p for p in receiver.unique().values() if p["type"] == "experiment.winner")
            assert won["data"]["experiment"]["key"] == exp["key"]
            assert won["data"]["winner"] == "treatment"
            assert won["data"]["engine"] == "sequential"
