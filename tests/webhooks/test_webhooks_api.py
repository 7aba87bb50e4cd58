"""Webhooks over HTTP on SQLite and PostgreSQL: CRUD without the secret ever coming back, bad
input named, every change delivered signed, a 500 retried with the same id, a redeliver."""

from __future__ import annotations

import socket
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.conftest import Api
from tests.control_plane.people import join, person
from tests.webhooks.conftest import eventually, hooks_app
from tests.webhooks.receiver import Receiver, receiving

SECRET = "whsec_test_0123456789abcdef"


def create_hook(api: Api, receiver: Receiver, events: list[str]) -> dict[str, Any]:
    response = api.post("/webhooks", {"url": receiver.url, "events": events, "secret": SECRET})
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def deliveries(api: Api, hook: dict[str, Any]) -> list[dict[str, Any]]:
    response = api.get(f"/webhooks/{hook['id']}/deliveries")
    assert response.status_code == 200, response.text
    return response.json()["deliveries"]  # type: ignore[no-any-return]


def test_crud_never_answers_the_secret(hooks_api: Api) -> None:
    api = hooks_api
    created = api.post("/webhooks", {"url": "https://example.com/h", "events": ["flag.*"]})
    assert created.status_code == 201, created.text
    body = created.json()
    generated = body["secret"]  # answered once, because Vane made it
    assert generated.startswith("whsec_")
    assert body["secretHint"] == "…" + generated[-4:]
    hook_id = body["id"]
    for answer in (
        api.get(f"/webhooks/{hook_id}"),
        api.get("/webhooks"),
        api.patch(f"/webhooks/{hook_id}", {"enabled": False, "secret": "s" * 20}),
        api.get("/audit"),
    ):
        assert generated not in answer.text
        assert "s" * 20 not in answer.text
    assert api.get(f"/webhooks/{hook_id}").json()["enabled"] is False
    given = api.post(
        "/webhooks", {"url": "https://example.com/2", "events": ["*"], "secret": SECRET}
    )
    assert "secret" not in given.json()
    assert SECRET not in given.text
    assert api.delete(f"/webhooks/{hook_id}").json() == {"id": hook_id, "deleted": True}
    assert api.get(f"/webhooks/{hook_id}").status_code == 404
    assert [h["url"] for h in api.get("/webhooks").json()["webhooks"]] == ["https://example.com/2"]
    api.post("/webhooks", {"url": "https://example.com/3", "events": ["*"]})
    first = api.get("/webhooks", params={"limit": 1}).json()
    assert [h["url"] for h in first["webhooks"]] == ["https://example.com/2"]
    rest = api.get("/webhooks", params={"limit": 1, "cursor": first["nextCursor"]}).json()
    assert [h["url"] for h in rest["webhooks"]] == ["https://example.com/3"]
    assert rest["nextCursor"] is None
    bad = api.get("/webhooks", params={"cursor": "nonsense"})
    assert bad.status_code == 422
    assert bad.json()["error"]["details"][0]["field"] == "cursor"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "ftp://example.com/x", "events": ["*"]}, "url"),
        ({"url": "file:///etc/passwd", "events": ["*"]}, "url"),
        ({"url": "not a url", "events": ["*"]}, "url"),
        ({"url": "http://10.0.0.7/h", "events": ["*"]}, "url"),  # private, not loopback
        ({"url": "http://169.254.169.254/latest", "events": ["*"]}, "url"),
        ({"url": "https://u:p@example.com/h", "events": ["*"]}, "url"),
        ({"url": "https://example.com/h", "events": []}, "events"),
        ({"url": "https://example.com/h", "events": ["flags.*"]}, "events[0]"),
        ({"url": "https://example.com/h", "events": ["*"], "secret": "short"}, "secret"),
        ({"events": ["*"]}, "url"),
        ({"url": "https://example.com/h", "events": "flag.*"}, "events"),
    ],
)
def test_bad_input_is_422_naming_the_field(
    hooks_api: Api, body: dict[str, Any], field: str
) -> None:
    response = hooks_api.post("/webhooks", body)
    assert response.status_code == 422, response.text
    assert field in [d["field"] for d in response.json()["error"]["details"]]
    assert hooks_api.get("/webhooks").json()["count"] == 0  # nothing half-written


def test_patch_validates_like_create(hooks_api: Api) -> None:
    hook = hooks_api.post("/webhooks", {"url": "https://example.com/h", "events": ["*"]}).json()
    response = hooks_api.patch(f"/webhooks/{hook['id']}", {"url": "gopher://example.com"})
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["field"] == "url"
    assert hooks_api.get(f"/webhooks/{hook['id']}").json()["url"] == "https://example.com/h"


def test_private_addresses_refused_by_default(api: Api) -> None:
    """The plain app (``VANE_WEBHOOK_PRIVATE`` unset) refuses loopback too."""
    for url in ("http://127.0.0.1:9/h", "http://localhost/h", "http://[::1]/h"):
        response = api.post("/webhooks", {"url": url, "events": ["*"]})
        assert response.status_code == 422, url
        assert "VANE_WEBHOOK_PRIVATE" in response.json()["error"]["details"][0]["message"]


def test_changes_are_delivered_signed_and_a_500_is_retried_with_the_same_id(
    hooks_api: Api,
) -> None:
    api = hooks_api
    with receiving(SECRET) as receiver:
        receiver.fail_next = 1
        hook = create_hook(api, receiver, ["flag.*", "segment.created"])
        assert api.post("/flags", {"key": "checkout"}).status_code == 201
        api.post("/flags/checkout/environments/production/toggle", {"enabled": True})
        api.post("/segments", {"key": "beta", "name": "Beta"})
        api.post("/metrics", {"name": "Buys", "event": "buy", "aggregation": "count"})  # not asked
        wanted = ["flag.created", "flag.toggled", "segment.created"]
        eventually(lambda: receiver.types() == wanted, what=f"{wanted} delivered")
        # the refused delivery's retry may come after the other two: wait for it too
        eventually(
            lambda: (
                sum(1 for r in receiver.verified() if r.status == 500) == 1
                and len(receiver.verified()) == len(wanted) + 1
            ),
            what="the refused delivery retried",
        )
        got = receiver.verified()
        first = got[0]
        assert first.status == 500
        retried = [r for r in got if r.payload["id"] == first.payload["id"]]
        assert [r.status for r in retried] == [500, 200]
        assert retried[0].body == retried[1].body  # same payload, new signature time
        toggled = next(p for p in receiver.unique().values() if p["type"] == "flag.toggled")
        assert set(toggled) == {"id", "type", "createdAt", "data"}
        assert toggled["data"]["resource"] == {"type": "flag", "key": "checkout"}
        assert toggled["data"]["environment"] == "production"
        assert toggled["data"]["after"] == {"enabled": True}
        log = api.get(f"/webhooks/{hook['id']}/deliveries").json()
        assert log["count"] == 3
        by_id = {d["id"]: d for d in log["deliveries"]}
        assert set(by_id) == set(receiver.unique())
        failed_first = by_id[first.payload["id"]]
        assert [a["statusCode"] for a in failed_first["log"]] == [500, 200]
        assert failed_first["status"] == "delivered"
        assert failed_first["attempts"] == 2
        assert failed_first["nextAttemptAt"] is None

        page = api.get(f"/webhooks/{hook['id']}/deliveries", params={"limit": 2}).json()
        assert page["count"] == 2
        rest = api.get(
            f"/webhooks/{hook['id']}/deliveries", params={"limit": 2, "cursor": page["nextCursor"]}
        ).json()
        assert rest["nextCursor"] is None
        assert [d["id"] for d in page["deliveries"] + rest["deliveries"]] == [
            d["id"] for d in log["deliveries"]
        ]
        assert api.get(f"/webhooks/{hook['id']}/deliveries", params={"limit": 0}).status_code == 422
        again = api.post(f"/webhooks/{hook['id']}/deliveries/{first.payload['id']}/redeliver")
        assert again.status_code == 200, again.text
        eventually(
            lambda: sum(r.payload["id"] == first.payload["id"] for r in receiver.verified()) == 3,
            what="redelivered",
        )
        assert receiver.types() == wanted  # de-duplicated by id: nothing new


def test_a_disabled_webhook_gets_nothing_and_deliveries_stop_after_max_attempts(
    hooks_api: Api,
) -> None:
    api = hooks_api
    with receiving(SECRET) as receiver:
        receiver.fail_all = True
        hook = create_hook(api, receiver, ["flag.created"])
        api.post("/flags", {"key": "one"})
        # the default maximum is 8 attempts; backoff is capped at 0.5 s here
        eventually(
            lambda: [d["status"] for d in deliveries(api, hook)] == ["failed"],
            timeout=30,
            what="failed after its attempts",
        )
        (delivery,) = deliveries(api, hook)
        assert delivery["attempts"] == 8
        assert {a["statusCode"] for a in delivery["log"]} == {503}
        assert delivery["lastError"] == "answered 503"
        assert len(receiver.requests) == 8
        receiver.fail_all = False
        watcher = create_hook(api, receiver, ["flag.created"])  # sees what follows, not "one"
        api.patch(f"/webhooks/{hook['id']}", {"enabled": False})
        api.post("/flags", {"key": "two"})
        eventually(
            lambda: [d["status"] for d in deliveries(api, watcher)] == ["delivered"],
            what="the enabled webhook got the change",
        )
        assert deliveries(api, watcher)[0]["data"]["resource"]["key"] == "two"
        again = api.post(f"/webhooks/{hook['id']}/deliveries/{delivery['id']}/redeliver")
        assert again.status_code == 200, again.text
        assert again.json()["status"] == "pending"
        assert again.json()["attempts"] == 0
        api.patch(f"/webhooks/{hook['id']}", {"enabled": True})
        eventually(
            lambda: [d["status"] for d in deliveries(api, hook)] == ["delivered"],
            what="redelivered once enabled again",
        )
        (delivery,) = deliveries(api, hook)  # the change made while disabled never came
        assert delivery["data"]["resource"]["key"] == "one"
        assert [a["statusCode"] for a in delivery["log"]][-2:] == [503, 200]
        assert len(receiver.unique()) == 2


def test_a_webhook_answers_its_version_and_refuses_a_stale_if_match(hooks_api: Api) -> None:
    """Like every resource: ``ETag`` is the version, a write naming an older one is 412 with the
    current version and changes nothing; without If-Match the write goes through."""
    api = hooks_api
    created = api.post("/webhooks", {"url": "https://example.com/h", "events": ["*"]})
    hook = created.json()
    assert (hook["version"], created.headers["etag"]) == (1, '"1"')
    path = f"/webhooks/{hook['id']}"
    first = api.patch(path, {"description": "one"}, headers={"If-Match": '"1"'})
    assert first.status_code == 200, first.text
    assert (first.json()["version"], first.headers["etag"]) == (2, '"2"')
    stale = api.patch(path, {"description": "two"}, headers={"If-Match": '"1"'})
    assert stale.status_code == 412
    assert stale.json()["error"]["currentVersion"] == 2
    assert api.get(path).json()["description"] == "one"
    assert api.delete(path, headers={"If-Match": '"1"'}).status_code == 412
    assert api.get(path).status_code == 200
    assert api.patch(path, {"enabled": False}).json()["version"] == 3
    assert api.delete(path, headers={"If-Match": '"3"'}).status_code == 200


def test_deliveries_done_with_are_pruned_after_the_retention_and_pending_ones_stay(
    database_url: str,
) -> None:
    with (
        hooks_app(
            database_url, webhook_retention_days=2 / 86400, webhook_max_attempts=10_000
        ) as api,
        receiving(SECRET) as ok,
        receiving(SECRET) as down,
    ):
        down.fail_next = 10**9  # answers 500 to everything: its delivery stays pending
        kept = create_hook(api, ok, ["flag.created"])
        stuck = create_hook(api, down, ["flag.created"])
        assert api.post("/flags", {"key": "pruned"}).status_code == 201
        eventually(lambda: [d["status"] for d in deliveries(api, kept)] == ["delivered"])
        (pending,) = deliveries(api, stuck)
        # two seconds on, the delivered one (and nothing else) is gone
        eventually(lambda: deliveries(api, kept) == [], what="the delivered one pruned")
        assert [d["id"] for d in deliveries(api, stuck)] == [pending["id"]]
        assert deliveries(api, stuck)[0]["status"] == "pending"
        assert down.verified()  # it was tried all along
        assert api.get(f"/webhooks/{kept['id']}").status_code == 200


def test_an_attempt_connects_to_the_address_it_checked(
    hooks_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS rebinding (found from outside): the address was checked by resolving the name, then
    httpx resolved it again, and the name could answer anything the second time. Here the name
    answers the checked receiver once and another address ever after: the delivery must reach
    the first, and the name be resolved once."""
    api = hooks_api
    real = socket.getaddrinfo
    answers: list[str] = []

    def rebinding(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "hooks.rebind.test":
            target = "127.0.0.1" if not answers else "127.0.0.3"
            answers.append(target)
            return real(target, port, *args, **kwargs)
        return real(host, port, *args, **kwargs)

    with receiving(SECRET) as checked:
        port = int(checked.url.rsplit(":", 1)[1].split("/", 1)[0])
        with receiving(SECRET, host="127.0.0.3", port=port) as elsewhere:
            url = f"http://hooks.rebind.test:{port}/hooks"
            created = api.post("/webhooks", {"url": url, "events": ["flag.*"], "secret": SECRET})
            assert created.status_code == 201, created.text
            monkeypatch.setattr(socket, "getaddrinfo", rebinding)
            assert api.post("/flags", {"key": "rebound"}).status_code == 201
            hook = created.json()
            eventually(
                lambda: [d["status"] for d in deliveries(api, hook)] == ["delivered"],
                what="the delivery delivered",
            )
            assert checked.types() == ["flag.created"]
            assert elsewhere.types() == []
            assert answers == ["127.0.0.1"]  # resolved once, at the check
            assert checked.verified()[0].headers.get("host") == f"hooks.rebind.test:{port}"


def test_an_invitation_reaches_webhooks_with_its_link_and_the_audit_keeps_none(
    hooks_api: Api,
) -> None:
    """No mail server: ``user.invited`` carries the single-use link so a team can deliver it;
    the audit entry of the invitation never holds it."""
    api = hooks_api
    with receiving(SECRET) as receiver:
        create_hook(api, receiver, ["user.*"])
        invited = api.post("/users/invitations", {"email": "new@example.com", "role": "editor"})
        assert invited.status_code == 201, invited.text
        url = invited.json()["url"]
        eventually(lambda: receiver.types() == ["user.invited"], what="user.invited delivered")
        [got] = receiver.verified()
        data = got.payload["data"]
        assert (data["email"], data["role"], data["url"]) == ("new@example.com", "editor", url)
    entries = api.get("/audit", params={"action": "user.invite"}).json()["entries"]
    assert len(entries) == 1
    assert url.rsplit("/", 1)[1] not in str(entries)


def test_an_invitations_link_leaves_storage_once_delivered_and_only_an_admin_lists_deliveries(
    database_url: str,
) -> None:
    """Audit of issue #34: the link of ``user.invited`` (its single-use token) stayed in the
    outbox in plain text, and any management principal, a viewer's token included, read it back
    from the deliveries and joined with the invited role. Listing deliveries is an admin's, and
    once a delivery is final (delivered, or given up) the stored event holds no link."""
    with hooks_app(database_url, webhook_max_attempts=2) as api, receiving(SECRET) as receiver:
        viewer = person(api, "vera@example.com", "viewer")
        hook = create_hook(api, receiver, ["user.invited"])
        invited = api.post("/users/invitations", {"email": "new@example.com", "role": "admin"})
        assert invited.status_code == 201, invited.text
        token = invited.json()["url"].rsplit("/", 1)[1]
        eventually(lambda: receiver.types() == ["user.invited"], what="user.invited delivered")
        [got] = receiver.verified()
        assert token in got.payload["data"]["url"]  # the receiver gets the link, once

        refused = api.get(f"/webhooks/{hook['id']}/deliveries", key=viewer)
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["details"] == [{"field": "permission", "message": "admin"}]
        assert token not in refused.text

        eventually(
            lambda: [d["status"] for d in deliveries(api, hook)] == ["delivered"],
            what="the delivery recorded",
        )
        listed = api.get(f"/webhooks/{hook['id']}/deliveries")
        assert token not in listed.text
        [delivery] = listed.json()["deliveries"]
        data = delivery["data"]
        assert (data["email"], data["role"], data["invitationId"]) == (
            "new@example.com",
            "admin",
            invited.json()["id"],
        )
        assert "url" not in data
        # what is stored is what a redelivery sends: the link is gone from it too
        again = api.post(f"/webhooks/{hook['id']}/deliveries/{delivery['id']}/redeliver")
        assert again.status_code == 200, again.text
        assert token not in again.text
        eventually(lambda: len(receiver.verified()) == 2, what="redelivered")
        resent = receiver.verified()[1]
        assert resent.payload["id"] == delivery["id"]
        assert token not in resent.body.decode()
        assert resent.payload["data"]["invitationId"] == invited.json()["id"]

        # a delivery given up on keeps no link either
        receiver.fail_all = True
        second = api.post("/users/invitations", {"email": "two@example.com", "role": "editor"})
        assert second.status_code == 201, second.text
        eventually(
            lambda: deliveries(api, hook)[0]["status"] == "failed",
            what="the second invitation's delivery given up",
        )
        assert token not in receiver.verified()[-1].body.decode()
        assert second.json()["url"] in receiver.verified()[-1].body.decode()
        link = second.json()["url"].rsplit("/", 1)[1]
        failed = api.get(f"/webhooks/{hook['id']}/deliveries")
        assert link not in failed.text
        receiver.fail_all = False
        given_up = failed.json()["deliveries"][0]["id"]
        assert (
            api.post(f"/webhooks/{hook['id']}/deliveries/{given_up}/redeliver").status_code == 200
        )
        eventually(lambda: receiver.verified()[-1].status == 200, what="redelivered")
        assert receiver.verified()[-1].payload["id"] == given_up
        assert link not in receiver.verified()[-1].body.decode()
        # the first link still works: it was the receiver's to deliver
        join(api, urlsplit(invited.json()["url"]).path)


def test_an_invitations_link_leaves_storage_when_the_last_pending_delivery_goes(
    database_url: str,
) -> None:
    """One event, two webhooks: the link stays while one delivery is pending (its receiver
    failing, retried), and goes when that webhook is deleted with its deliveries."""
    with (
        hooks_app(database_url, webhook_max_attempts=10_000) as api,
        receiving(SECRET) as receiver,
        receiving(SECRET) as failing,
    ):
        failing.fail_all = True
        retried = create_hook(api, failing, ["user.invited"])
        live = create_hook(api, receiver, ["user.invited"])
        invited = api.post("/users/invitations", {"email": "new@example.com", "role": "viewer"})
        assert invited.status_code == 201, invited.text
        token = invited.json()["url"].rsplit("/", 1)[1]
        eventually(
            lambda: [d["status"] for d in deliveries(api, live)] == ["delivered"],
            what="the live webhook's delivery recorded",
        )
        eventually(lambda: len(failing.requests) >= 2, what="the other one retried")
        assert [d["status"] for d in deliveries(api, retried)] == ["pending"]
        [delivered] = deliveries(api, live)

        def redelivered() -> str:
            done = len(receiver.verified())
            again = api.post(f"/webhooks/{live['id']}/deliveries/{delivered['id']}/redeliver")
            assert again.status_code == 200, again.text
            eventually(lambda: len(receiver.verified()) == done + 1, what="redelivered")
            return receiver.verified()[-1].body.decode()

        assert token in redelivered()  # still pending elsewhere: the stored event keeps it
        assert api.delete(f"/webhooks/{retried['id']}").status_code == 200
        assert token not in redelivered()
