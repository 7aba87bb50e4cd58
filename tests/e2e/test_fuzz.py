"""Property-based fuzzing of the control plane and the relay from their OpenAPI documents
(schemathesis).

Valid and invalid requests generated from every operation of the control plane's
``/schema/openapi.json`` (sent with the management key) and of the relay's ``/openapi.json`` (its
OFREP operations, from the protocol's own document, and its browser and event endpoints; sent with
a public or server key), against real processes on SQLite. A request must never get a 5xx, every status
must be documented for its operation, and every body must match the documented schema (Vane's
error schema for errors). Bounded: a few dozen examples per operation and mode.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.specs.openapi.schemas import OpenApiSchema

from control_plane.app import create_app
from control_plane.settings import Settings
from relay import openapi as relay_openapi
from tests.e2e.test_relays import ControlPlane, start_control_plane, start_relay
from tests.e2e.test_untrusted import Site

if TYPE_CHECKING:  # schemathesis defines the alias for type checkers only
    from schemathesis.specs.openapi.schemas import OpenApiCase

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CHECKS = [
    schemathesis.checks.not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    tmp: Path = tmp_path_factory.mktemp("fuzz")
    cp = start_control_plane(f"sqlite:///{tmp / 'vane.db'}", tmp)
    try:
        yield cp
    finally:
        cp.process.stop()


def openapi_document() -> dict[str, Any]:
    """The control plane's OpenAPI document, built in-process at collection time (it depends on
    the code alone); the requests go to a real process."""
    app = create_app(Settings(database_url="sqlite://", bootstrap=False))
    return app.openapi_schema.to_schema()


BOUNDED = settings(
    max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
"""Per operation: 25 examples, the same ones every run, so the fuzz stays minutes in CI."""


def fuzzed(document: dict[str, Any]) -> OpenApiSchema:
    """A schemathesis schema of ``document`` generating valid and invalid requests."""
    loaded = schemathesis.openapi.from_dict(document)
    loaded.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
    return loaded


schema = fuzzed(openapi_document())


@schema.parametrize()
@BOUNDED
def test_no_operation_answers_5xx_or_off_its_schema(
    case: OpenApiCase, control_plane: ControlPlane
) -> None:
    headers = {"Authorization": f"Bearer {control_plane.keys['management']}"}
    case.call_and_validate(base_url=control_plane.url, headers=headers, checks=CHECKS, timeout=30)


# --------------------------------------------------------------------------------- the relay


@pytest.fixture(scope="module")
def relay_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp: Path = tmp_path_factory.mktemp("fuzz-relay")
    cp = start_control_plane(f"sqlite:///{tmp / 'vane.db'}", tmp)
    relay = start_relay(cp.url, cp.keys["relay"], tmp / "relay")
    site = Site(cp, relay)
    try:
        site.api("POST", "/flags", {"key": "dark-mode"})
        site.api(
            "POST",
            "/flags",
            {"key": "copy", "type": "string", "variations": [{"value": "a"}, {"value": "b"}]},
        )
        site.api(
            "POST",
            "/flags",
            {"key": "layout", "type": "json", "variations": [{"value": {"x": 1}}, {"value": []}]},
        )
        site.api("POST", "/flags", {"key": "backend-only", "clientSide": False})
        for key in ("dark-mode", "copy", "layout"):
            site.api("POST", f"/flags/{key}/environments/production/toggle", {"enabled": True})
        site.experiment(
            {
                "name": "Fuzzed headline",
                "type": "element",
                "selector": "h1",
                "variants": [{"key": "control", "content": ""}, {"key": "b", "content": "B"}],
            }
        )
        site.relay_current()
        yield site
    finally:
        relay.process.stop()
        cp.process.stop()


relay_schema = fuzzed(json.loads(relay_openapi.document()))


@relay_schema.parametrize()
@BOUNDED
def test_no_relay_operation_answers_5xx_or_off_its_schema(
    case: OpenApiCase, relay_site: Site
) -> None:
    browser = case.path.startswith(("/sdk/", "/ofrep/"))
    headers = {**relay_site.auth("public" if browser else "server")}
    if browser:
        headers["Origin"] = "https://shop.example"
    case.call_and_validate(
        base_url=relay_site.relay.url, headers=headers, checks=CHECKS, timeout=30
    )
