"""Code references: the scanner, the upload API, the flag's references and stale flags."""

from __future__ import annotations

from pathlib import Path

from control_plane.domain.coderefs.scanner import scan_tree
from tests.conftest import Api
from tests.control_plane.test_flags import create


def write(root: Path, relative: str, text: str | bytes) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)


def test_scanner_matches_whole_keys_and_skips_vendored_and_binary(tmp_path: Path) -> None:
    write(tmp_path, "app/checkout.py", 'if client.variation("new-checkout", ctx):\n    pass\n')
    write(tmp_path, "web/src/app.ts", "const v = flags['new-checkout-v2'];\nuse('dark.mode')\n")
    write(
        tmp_path,
        "web/src/other.go",
        'x := "dark.mode.extra"\ny := "new-checkout" // again new-checkout\n',
    )
    write(tmp_path, "node_modules/lib/index.js", "'new-checkout'\n")
    write(tmp_path, "vendor/x.rb", "'new-checkout'\n")
    write(tmp_path, "assets/logo.json", b"\x00\x01new-checkout")
    write(tmp_path, "notes.unknownext", "new-checkout\n")
    refs = scan_tree(tmp_path, ["new-checkout", "new-checkout-v2", "dark.mode", "unused"])
    found = [(r.flag_key, r.path, r.line) for r in refs]
    assert found == [
        ("new-checkout", "app/checkout.py", 1),
        ("new-checkout-v2", "web/src/app.ts", 1),
        ("dark.mode", "web/src/app.ts", 2),
        ("new-checkout", "web/src/other.go", 2),
    ]
    assert refs[0].snippet == 'if client.variation("new-checkout", ctx):'


def test_upload_replaces_a_repositorys_references(api: Api) -> None:
    create(api, {"key": "new-checkout"})
    first = {
        "repository": "shop",
        "branch": "main",
        "refs": [
            {
                "flagKey": "new-checkout",
                "path": "a.py",
                "line": 3,
                "snippet": "flag('new-checkout')",
            },
            {"flagKey": "new-checkout", "path": "b.py", "line": 9, "snippet": "x"},
        ],
    }
    response = api.put("/code-refs", first)
    assert response.status_code == 200, response.text
    assert response.json() == {
        "repository": "shop",
        "branch": "main",
        "references": 2,
        "flags": 1,
        "replaced": 0,
    }
    api.put(
        "/code-refs",
        {"repository": "admin", "refs": [{"flagKey": "new-checkout", "path": "z.js", "line": 1}]},
    )
    refs = api.get("/flags/new-checkout/code-refs").json()
    assert refs["count"] == 3
    assert [(r["repository"], r["path"], r["line"]) for r in refs["references"]] == [
        ("admin", "z.js", 1),
        ("shop", "a.py", 3),
        ("shop", "b.py", 9),
    ]
    again = api.put(
        "/code-refs", {"repository": "shop", "branch": "dev", "refs": [first["refs"][1]]}
    )
    assert again.json()["replaced"] == 2
    refs = api.get("/flags/new-checkout/code-refs").json()
    assert [(r["repository"], r["branch"], r["path"]) for r in refs["references"]] == [
        ("admin", "main", "z.js"),
        ("shop", "dev", "b.py"),
    ]
    assert api.get("/flags/nope/code-refs").status_code == 404


def test_invalid_upload_names_the_field(api: Api) -> None:
    response = api.put(
        "/code-refs", {"repository": "r", "refs": [{"flagKey": "f", "path": "a", "line": 0}]}
    )
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["field"] == "refs[0].line"


def test_stale_lists_temporary_flags_without_references(api: Api) -> None:
    create(api, {"key": "used"})
    create(api, {"key": "unused"})
    create(api, {"key": "permanent", "temporary": False})
    api.put(
        "/code-refs", {"repository": "r", "refs": [{"flagKey": "used", "path": "a", "line": 1}]}
    )
    stale = api.get("/code-refs/stale").json()
    assert [f["key"] for f in stale["flags"]] == ["unused"]
