"""Results by dimension through real processes: the relay captures an experiment's dimensions
from the context a page or a backend sends with its exposure, never a private attribute of the
key (not in the store, not in the relay's spool), and the control plane splits by them."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.test_relays import eventually, start_control_plane, start_relay
from tests.e2e.test_untrusted import ORIGIN, Site

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("dimensions")
    cp = start_control_plane(f"sqlite:///{tmp / 'vane.db'}", tmp)
    relay = start_relay(cp.url, cp.keys["relay"], tmp / "relay")
    site = Site(cp, relay)
    site.relay_dir = tmp / "relay"
    try:
        yield site
    finally:
        relay.process.stop()
        cp.process.stop()


def test_the_relay_captures_dimensions_and_never_a_private_one(site: Site) -> None:
    site.experiment(
        {
            "name": "Hero",
            "key": "hero",
            "type": "element",
            "selector": "#hero",
            "dimensions": ["country", "email", "/device/os"],
            "variants": [{"key": "control"}, {"key": "treatment", "content": "New"}],
        }
    )
    secret = "dim-secret-4k2q@x.example"
    made = site.api(
        "POST",
        "/keys",
        {"kind": "public", "environment": "production", "privateAttributes": ["email"]},
    )
    assert made.status_code == 201, made.text
    page_key = made.json()["key"]
    site.relay_current()
    countries = {f"p{i}": ("DE", "FR", "IT")[i % 3] for i in range(30)}
    for unit, country in countries.items():
        context = {
            "targetingKey": unit,
            "country": country,
            "email": secret,
            "device": {"os": "ios"},
        }
        answer = httpx.post(
            f"{site.relay.url}/sdk/v1/experiments/hero/assign",
            json={"unit": unit, "url": "/", "context": context},
            headers={"Authorization": f"Bearer {page_key}", **ORIGIN},
            timeout=10,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["assigned"] is True
    # a page's list of its experiments exposes with the context as well (a multi-kind one)
    listed = httpx.post(
        f"{site.relay.url}/sdk/v1/experiments",
        json={
            "unit": "q1",
            "url": "/",
            "context": {"kind": "multi", "user": {"key": "q1", "country": "ES"}},
        },
        headers={**site.auth("public"), **ORIGIN},
        timeout=10,
    )
    assert listed.status_code == 200, listed.text

    def split(dimension: str) -> dict[str, int]:
        answer = site.api("GET", f"/experiments/hero?dimension={dimension}&minUnits=2")
        slices = answer.json()["results"]["dimension"]["slices"]
        return {(s["value"] or s["slice"]): s["exposed"] for s in slices}

    wanted = {"DE": 10, "FR": 10, "IT": 10, "ES": 1}
    eventually(lambda: split("country") == wanted, 30, lambda: f"{split('country')} != {wanted}")
    assert split("/device/os") == {"ios": 30, "none": 1}
    assert split("email") == {"none": 31}
    spooled = b"".join(p.read_bytes() for p in site.relay_dir.rglob("*") if p.is_file())
    assert secret.encode() not in spooled
    assert secret not in str(site.stored(event="$exposure", limit=100))
