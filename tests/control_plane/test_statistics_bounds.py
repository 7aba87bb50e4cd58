"""Statistics parameters outside their meaning are a 422 naming the field; the edges are taken.

The bounds (``control_plane.domain.problems``, documented in docs/statistics.md): alpha in
[0.001, 0.2], power in [0.5, 0.999], a quantile in [0.001, 0.999], a percentile cap in
[0.5, 0.9999], an absolute cap in [1, 2^53 - 1] (event values are whole minor units); a plan's
baseline rate in [1e-6, 1 - 1e-6], a baseline mean's size and sd in [1e-6, 2^53 - 1], the sd at
most 10^4 times the mean's size.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Api

MAX_SAFE = 2**53 - 1
NONSENSE: list[tuple[str, Any]] = [
    ("alpha", 1e-300),
    ("alpha", 0.0009),
    ("alpha", 0.21),
    ("alpha", 0.999999),
    ("power", 1e-300),
    ("power", 0.49),
    ("power", 0.9991),
    ("power", 0.999999),
    ("quantile", 1e-300),
    ("quantile", 0.0009),
    ("quantile", 0.9991),
    ("quantile", 0.999999),
    ("percentile", 1e-300),
    ("percentile", 0.49),
    ("percentile", 0.99991),
    ("absolute", 1e-300),
    ("absolute", 0.99),
    ("absolute", MAX_SAFE + 1),
    ("baselineRate", 1e-300),
    ("baselineRate", 9e-7),
    ("baselineRate", 1 - 1e-12),
    ("baselineMean", 1e-300),
    ("baselineMean", -9e-7),
    ("baselineMean", 1e308),
    ("baselineMean", -(MAX_SAFE + 2)),
    ("baselineSd", 1e308),  # found from outside: answered 'mde too small'
    ("baselineSd", MAX_SAFE + 2),
    ("baselineSd", 1e-300),
    ("baselineSd", 9e-7),
    ("baselineSd", 100_001),  # over 10^4 times the mean (10)
]
SENSIBLE: list[tuple[str, Any]] = [
    ("alpha", 0.001),
    ("alpha", 0.2),
    ("power", 0.5),
    ("power", 0.999),
    ("quantile", 0.001),
    ("quantile", 0.999),
    ("percentile", 0.5),
    ("percentile", 0.9999),
    ("absolute", 1),
    ("absolute", MAX_SAFE),
    ("baselineRate", 1e-6),
    ("baselineRate", 1 - 1e-6),
    ("baselineMean", 1e-6),
    ("baselineMean", -1e-6),
    ("baselineMean", MAX_SAFE),
    ("baselineMean", -MAX_SAFE),
    ("baselineSd", 1e-6),
    ("baselineSd", 100_000),
]
FIELD = {"percentile": "capping.value", "absolute": "capping.value"}


def _send(api: Api, name: str, value: Any, n: int) -> Any:
    if name == "baselineRate":
        return api.post("/experiments/power", {name: value, "mde": 0.5 if value < 0.5 else -0.5})
    if name == "baselineMean":
        return api.post("/experiments/power", {name: value, "baselineSd": 1e-6, "mde": 0.05})
    if name == "baselineSd":
        return api.post("/experiments/power", {"baselineMean": 10, name: value, "mde": 0.05})
    if name in ("alpha", "power"):
        return api.post("/experiments/power", {"baselineRate": 0.1, "mde": 0.05, name: value})
    if name == "quantile":
        body = {"name": f"q{n}", "event": "load", "aggregation": "quantile", "quantile": value}
        return api.post("/metrics", body)
    capping = {"type": name, "value": value}
    created = api.post(
        "/metrics", {"name": f"c{n}", "event": "buy", "aggregation": "sum", "capping": capping}
    )
    if created.status_code != 201:
        return created
    # a change of capping is held to the same bound
    return api.patch(f"/metrics/{created.json()['key']}", {"capping": capping})


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_nonsense_statistics_parameters_are_422_naming_the_field(api: Api) -> None:
    for n, (name, value) in enumerate(NONSENSE):
        response = _send(api, name, value, n)
        assert response.status_code == 422, (name, value, response.text)
        fields = [d["field"] for d in response.json()["error"]["details"]]
        assert fields == [FIELD.get(name, name)], (name, value, fields)
    assert api.get("/metrics").json()["metrics"] == []


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_sensible_edge_values_are_accepted(api: Api) -> None:
    for n, (name, value) in enumerate(SENSIBLE):
        response = _send(api, name, value, n)
        assert response.status_code in (200, 201), (name, value, response.text)
