"""The analysis endpoints of issue 11 are in the generated OpenAPI document."""

from __future__ import annotations

from typing import Any

from tests.conftest import Api


def _schema(document: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    name = ref["$ref"].rsplit("/", 1)[1]
    return document["components"]["schemas"][name]  # type: ignore[no-any-return]


def test_power_timeseries_and_capping_are_documented(api: Api) -> None:
    document = api.client.get("/schema/openapi.json").json()
    paths = document["paths"]
    power = paths["/api/v1/experiments/power"]["post"]
    body = _schema(document, power["requestBody"]["content"]["application/json"]["schema"])
    assert {
        "baselineRate",
        "baselineMean",
        "baselineSd",
        "mde",
        "alpha",
        "power",
        "variants",
    } <= set(body["properties"])
    answer = _schema(document, power["responses"]["200"]["content"]["application/json"]["schema"])
    assert "unitsPerVariant" in answer["properties"]

    timeseries = paths["/api/v1/experiments/{id_or_key}/timeseries"]["get"]
    assert "metric" in {p["name"] for p in timeseries["parameters"]}
    series = _schema(
        document, timeseries["responses"]["200"]["content"]["application/json"]["schema"]
    )
    assert "days" in series["properties"]

    results = paths["/api/v1/experiments/{id_or_key}"]["get"]
    assert "mde" in {p["name"] for p in results["parameters"]}

    assert "patch" in paths["/api/v1/metrics/{id_or_key}"]
    create = paths["/api/v1/metrics"]["post"]["requestBody"]["content"]["application/json"]
    assert "capping" in _schema(document, create["schema"])["properties"]
