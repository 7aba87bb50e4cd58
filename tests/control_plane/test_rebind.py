"""The tests' one app per process (``control_plane.app.rebind``): rebound to another database, a
stopped app is that database's control plane, with nothing of the one before (its data, its
first keys, its metrics); settings built into the app itself are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from litestar.testing import TestClient

from control_plane.app import create_app, rebind
from control_plane.settings import Settings


def test_a_rebound_app_serves_the_new_database_alone(tmp_path: Path) -> None:
    first, second = (f"sqlite:///{tmp_path / name}.db" for name in ("first", "second"))
    app = create_app(Settings(database_url=first))
    with TestClient(app) as client:
        key = next(k.token for k in app.state.issued_keys if k.kind.value == "management")
        headers = {"Authorization": f"Bearer {key}"}
        assert client.post("/api/v1/flags", json={"key": "f"}, headers=headers).status_code == 201
        assert "vane_publish" in client.get("/metrics").text
    rebind(app, Settings(database_url=second))
    with TestClient(app) as client:
        assert client.get("/api/v1/flags", headers=headers).status_code == 401  # its own keys
        other = next(k.token for k in app.state.issued_keys if k.kind.value == "management")
        answer = client.get("/api/v1/flags", headers={"Authorization": f"Bearer {other}"})
        assert answer.json()["flags"] == []
        assert client.get("/metrics").status_code == 200


def test_settings_built_into_the_app_are_refused(tmp_path: Path) -> None:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'v.db'}"))
    with pytest.raises(ValueError, match="admin_origins"):
        rebind(
            app,
            Settings(
                database_url=f"sqlite:///{tmp_path / 'w.db'}", admin_origins=("https://a.example",)
            ),
        )
