"""Flag metrics: attach metrics, exposures per variation, results with the experiment engine."""

from __future__ import annotations

from tests.conftest import Api


def test_flag_metrics_per_variation(api: Api) -> None:
    api.post("/flags", {"key": "new-checkout"})
    api.post("/metrics", {"name": "Orders", "event": "order", "aggregation": "conversion"})
    assert api.put("/flags/new-checkout/metrics", {"metrics": ["ghost"]}).status_code == 422
    attached = api.put("/flags/new-checkout/metrics", {"metrics": ["orders"]})
    assert attached.status_code == 200, attached.text
    assert attached.json()["metrics"] == ["orders"]
    relay = api.keys["relay"]
    exposures = [
        {
            "unit": f"u{i}",
            "event": "$flag_exposure",
            "props": {"flag": "new-checkout", "variation": i % 2},
            "eventId": f"flagexp:new-checkout:u{i}:{i % 2}",
        }
        for i in range(40)
    ]
    later = [
        {
            "unit": "u0",
            "event": "$flag_exposure",
            "props": {"flag": "new-checkout", "variation": 1},
            "eventId": "flagexp:new-checkout:u0:1",
        }
    ]
    api.post("/events", {"events": exposures + later}, key=relay)
    orders = [{"unit": f"u{i}", "event": "order"} for i in range(40) if i % 2 == 0 or i % 4 == 1]
    api.post("/events", {"events": orders}, key=api.keys["server"])
    result = api.get("/flags/new-checkout/metrics").json()
    assert result["baseline"] == 1  # the boolean flag's false variation
    [block] = result["results"]
    by_arm = {v["key"]: v for v in block["variants"]}
    assert by_arm["0"]["exposed"] == 20  # u0 stays with its first variation
    assert by_arm["1"]["exposed"] == 20
    assert by_arm["0"]["conversions"] == 20
    assert by_arm["1"]["conversions"] == 10
    assert by_arm["0"]["uplift"] == 100.0
    assert "srm" not in block
    explicit = api.get("/flags/new-checkout/metrics?baseline=0").json()
    assert explicit["baseline"] == 0
    assert api.get("/flags/new-checkout/metrics?baseline=7").status_code == 422
    assert api.delete("/metrics/orders").status_code == 409
