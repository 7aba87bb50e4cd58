"""The OpenAPI document is byte-identical to the committed copy (``openapi.json`` beside this file).

A change to the API that is meant changes the document: regenerate the copy with
``.venv/bin/python -m tests.control_plane.test_openapi_document`` and commit it with the change,
so the diff shows what the API's users will see. Anything else that changes it (how the app is
built, the ``/v1`` alias, a library upgrade) fails here.
"""

from __future__ import annotations

import difflib
import json
import tempfile
from pathlib import Path

from litestar.testing import TestClient

from control_plane.app import create_app
from control_plane.settings import Settings

COMMITTED = Path(__file__).with_name("openapi.json")


def served_document(directory: Path) -> bytes:
    """``GET /schema/openapi.json`` exactly as the control plane serves it."""
    app = create_app(Settings(database_url=f"sqlite:///{directory / 'vane.db'}"))
    response = TestClient(app).get("/schema/openapi.json")  # no start-up: no database needed
    assert response.status_code == 200
    return response.content


def test_the_openapi_document_is_the_committed_one(tmp_path: Path) -> None:
    served = served_document(tmp_path)
    committed = COMMITTED.read_bytes()
    if served != committed:
        diff = difflib.unified_diff(
            json.dumps(json.loads(committed), indent=1, sort_keys=True).splitlines(),
            json.dumps(json.loads(served), indent=1, sort_keys=True).splitlines(),
            "committed",
            "served",
            lineterm="",
        )
        shown = "\n".join(list(diff)[:80]) or "(the same JSON, other bytes: key order, spacing)"
        raise AssertionError(
            f"the OpenAPI document changed (regenerate: see the docstring)\n{shown}"
        )


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as directory:
        COMMITTED.write_bytes(served_document(Path(directory)))
    print(f"wrote {COMMITTED}")
