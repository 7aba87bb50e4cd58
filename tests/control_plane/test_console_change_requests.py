"""Change requests in the console (issue #34), over HTTP as people with roles use it: the flag
page proposes in a protected environment, the review page approves, rejects, applies and closes
through the change requests' services, and shows their refusals with their messages."""

from __future__ import annotations

import re
from typing import Any

from tests.conftest import Api
from tests.control_plane.people import (
    PASSWORD,
    console_token,
    csrf_of,
    invite,
    join,
    sign_in_form,
)

COOKIE = "vane_console"


class Console:
    """Each person's console session in the one client, switched as the test goes."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.cookies: dict[str, str] = {}

    def join(self, email: str, role: str) -> None:
        self.cookies[email] = join(self.api, invite(self.api, email, role))

    def as_(self, email: str) -> Console:
        self.api.client.cookies.delete(COOKIE)
        self.api.client.cookies.set(COOKIE, self.cookies[email], path="/console")
        return self

    def get(self, path: str) -> Any:
        answer = self.api.client.get(path)
        assert answer.status_code == 200, answer.text[:500]
        return answer

    def post(self, page: str, to: str, /, **data: str) -> Any:
        """Send a form of ``page`` (its CSRF token) to ``to``."""
        csrf = csrf_of(self.get(page).text)
        return self.api.client.post(to, data={"_csrf": csrf, **data}, follow_redirects=False)


def protected_flag(api: Api, key: str = "checkout") -> None:
    assert api.post("/flags", {"key": key}).status_code == 201
    patched = api.patch("/environments/production", {"requiredApprovals": 1})
    assert patched.status_code == 200, patched.text


def request_id(answer: Any) -> str:
    assert answer.status_code == 303, answer.text[:800]
    found = re.fullmatch(r"/console/change-requests/([\w-]+)", answer.headers["location"])
    assert found is not None, answer.headers["location"]
    return found.group(1)


def settings_version(api: Api, flag: str, env: str = "production") -> str:
    return str(api.get(f"/flags/{flag}/environments/{env}").json()["version"])


def approve_and_apply(console: Console, cr: str) -> None:
    """The signed-in reviewer approves version 1 of ``cr`` on its review page, then applies it."""
    page = f"/console/change-requests/{cr}"
    approved = console.post(page, f"{page}/review", decision="approve", version="1")
    assert approved.status_code == 303, approved.text[:500]
    applied = console.post(page, f"{page}/apply", version="1")
    assert applied.status_code == 303, applied.text[:500]


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).replace("&#39;", "'")


def test_an_editor_proposes_from_the_flag_page_and_an_admin_approves_and_applies(
    api: Api,
) -> None:
    protected_flag(api)
    console = Console(api)
    console.join("ed@example.com", "editor")
    console.join("ada@example.com", "admin")
    flag_page = "/console/flags/checkout?env=production"

    # the editor's flag page reads "Request change" and offers to request turning it on
    shown = console.as_("ed@example.com").get(flag_page).text
    assert "Request change" in shown
    assert "Save settings" not in shown
    assert "Request to turn on" in shown
    assert 'name="title" value="Change checkout in production"' in shown

    proposed = console.post(
        flag_page,
        "/console/flags/checkout/environments/production/settings",
        version=settings_version(api, "checkout"),
        offVariation="1",
        fallthrough="1",
        title="",
    )
    cr = request_id(proposed)
    live = api.get("/flags/checkout/environments/production").json()
    assert live["fallthrough"] == {"variation": 0}  # nothing written yet
    stored = api.get(f"/change-requests/{cr}").json()
    assert stored["title"] == "Change checkout in production"  # the title left empty: defaulted
    assert stored["author"] == "ed@example.com"
    assert stored["changes"][0]["settings"]["fallthrough"] == {"variation": 1}

    review = console.get(f"/console/change-requests/{cr}").text
    words = text_of(review)
    assert "0 of 1 required" in words
    assert "Needs 1 more approval" in words
    assert "fallthrough" in words
    assert 'action="/console/change-requests/' + cr + '/review"' not in review  # not to its author
    assert f"/console/change-requests/{cr}/apply" not in review
    # hiding is not what refuses: the author's own approval, posted anyway, is the service's 403
    own = console.post(
        f"/console/change-requests/{cr}",
        f"/console/change-requests/{cr}/review",
        decision="approve",
        version="1",
    )
    assert own.status_code == 403
    assert f"you wrote change request {cr}" in own.text
    applied_early = console.as_("ada@example.com").post(
        f"/console/change-requests/{cr}", f"/console/change-requests/{cr}/apply", version="1"
    )
    assert applied_early.status_code == 409
    assert "requires 1" in text_of(applied_early.text)

    # the admin approves with a comment, then applies
    review = console.get(f"/console/change-requests/{cr}").text
    assert f'action="/console/change-requests/{cr}/review"' in review
    approved = console.post(
        f"/console/change-requests/{cr}",
        f"/console/change-requests/{cr}/review",
        decision="approve",
        comment="looks right",
        version="1",
    )
    assert approved.status_code == 303, approved.text[:500]
    words = text_of(console.get(f"/console/change-requests/{cr}").text)
    assert "1 of 1 required: ada@example.com" in words
    assert "looks right" in words
    applied = console.post(
        f"/console/change-requests/{cr}", f"/console/change-requests/{cr}/apply", version="1"
    )
    assert applied.status_code == 303, applied.text[:500]
    live = api.get("/flags/checkout/environments/production").json()
    assert live["fallthrough"] == {"variation": 1}
    assert live["offVariation"] == 1
    assert api.get(f"/change-requests/{cr}").json()["status"] == "applied"
    listed = console.get("/console/change-requests?status=applied").text
    assert f"/console/change-requests/{cr}" in listed
    assert f"/console/change-requests/{cr}" not in console.get("/console/change-requests").text


def test_rules_and_targets_are_proposed_and_a_bad_one_is_refused_beside_its_field(
    api: Api,
) -> None:
    protected_flag(api)
    console = Console(api)
    console.join("ed@example.com", "editor")
    page = "/console/flags/checkout?env=production"
    version = settings_version(api, "checkout")
    rules = console.as_("ed@example.com").post(
        page,
        "/console/flags/checkout/environments/production/rules",
        version=version,
        action="save",
        title="Germany first",
        **{
            "rules[0].clauses[0].attribute": "country",
            "rules[0].clauses[0].op": "in",
            "rules[0].clauses[0].values": "DE",
            "rules[0].serve": "0",
        },
    )
    cr = request_id(rules)
    stored = api.get(f"/change-requests/{cr}").json()
    assert stored["title"] == "Germany first"
    assert stored["changes"][0]["rules"][0]["clauses"][0]["values"] == ["DE"]
    assert api.get("/flags/checkout/environments/production/rules").json()["rules"] == []

    targets = console.post(
        page,
        "/console/flags/checkout/environments/production/targets",
        version=version,
        **{"targets[0].variation": "0", "targets[0].values": "user-1\nuser-2"},
    )
    assert api.get(f"/change-requests/{request_id(targets)}").json()["changes"][0]["settings"][
        "targets"
    ] == [{"variation": 0, "values": ["user-1", "user-2"]}]

    # a rollout that does not add up is the flags' own 422, shown beside the field: nothing made
    before = len(api.get("/change-requests").json()["changeRequests"])
    bad = console.post(
        page,
        "/console/flags/checkout/environments/production/settings",
        version=version,
        offVariation="1",
        fallthrough="rollout",
        **{"weights[0]": "30", "weights[1]": "30"},
    )
    assert bad.status_code == 422, bad.text[:500]
    assert 'class="field-error"' in bad.text
    assert len(api.get("/change-requests").json()["changeRequests"]) == before

    # a form older than what is live is the same conflict as a direct write, nothing proposed
    api.patch("/environments/production", {"requiredApprovals": 0})
    assert (
        api.put("/flags/checkout/environments/production", {"offVariation": 0}).status_code == 200
    )
    api.patch("/environments/production", {"requiredApprovals": 1})
    stale = console.post(
        page,
        "/console/flags/checkout/environments/production/settings",
        version=version,
        offVariation="1",
        fallthrough="0",
    )
    assert stale.status_code == 412
    assert "someone changed this flag since you opened it" in stale.text
    assert len(api.get("/change-requests").json()["changeRequests"]) == before


def test_turning_on_is_requested_and_turning_off_acts_at_once_for_those_who_may(
    api: Api,
) -> None:
    protected_flag(api)
    console = Console(api)
    console.join("ed@example.com", "editor")
    console.join("ada@example.com", "admin")
    page = "/console/flags/checkout?env=production"
    toggle = "/console/flags/checkout/environments/production/toggle"
    asked = console.as_("ed@example.com").post(
        page, toggle, enabled="true", version=settings_version(api, "checkout")
    )
    cr = request_id(asked)
    assert api.get(f"/change-requests/{cr}").json()["changes"][0]["settings"] == {"enabled": True}
    assert api.get("/flags/checkout/environments/production").json()["enabled"] is False
    assert api.get(f"/change-requests/{cr}").json()["title"] == "Turn checkout on in production"

    # approved and applied by the admin: on
    console.as_("ada@example.com")
    review = f"/console/change-requests/{cr}"
    approved = console.post(review, f"{review}/review", decision="approve", version="1")
    assert approved.status_code == 303
    assert console.post(review, f"{review}/apply", version="1").status_code == 303
    assert api.get("/flags/checkout/environments/production").json()["enabled"] is True

    # the editor may not turn it off here (no "may turn off"): no switch, and the service's 403
    shown = console.as_("ed@example.com").get(page).text
    assert 'role="switch"' not in shown
    refused = console.post(
        page, toggle, enabled="false", confirm="yes", version=settings_version(api, "checkout")
    )
    assert refused.status_code == 403
    assert "turn-off" in refused.text
    assert api.get("/flags/checkout/environments/production").json()["enabled"] is True

    # the admin turns it off at once (production is critical: confirmed), no request made
    shown = console.as_("ada@example.com").get(page).text
    assert 'aria-label="Serve checkout in production"' in shown
    before = len(api.get("/change-requests").json()["changeRequests"])
    off = console.post(
        page, toggle, enabled="false", confirm="yes", version=settings_version(api, "checkout")
    )
    assert off.status_code == 303, off.text[:500]
    assert api.get("/flags/checkout/environments/production").json()["enabled"] is False
    assert len(api.get("/change-requests").json()["changeRequests"]) == before


def test_reject_needs_a_comment_a_moved_base_is_shown_and_refused_and_close(api: Api) -> None:
    protected_flag(api)
    console = Console(api)
    console.join("ed@example.com", "editor")
    console.join("eve@example.com", "editor")
    console.join("ada@example.com", "admin")
    page = "/console/flags/checkout?env=production"
    proposed = console.as_("ed@example.com").post(
        page,
        "/console/flags/checkout/environments/production/settings",
        version=settings_version(api, "checkout"),
        offVariation="0",
        fallthrough="0",
    )
    cr = request_id(proposed)
    review = f"/console/change-requests/{cr}"

    # another editor rejects: without a comment the service's 422, shown at the comment
    console.as_("eve@example.com")
    bare = console.post(review, f"{review}/review", decision="reject", version="1")
    assert bare.status_code == 422
    assert 'id="comment-error"' in bare.text
    assert "say why it is rejected" in bare.text
    rejected = console.post(
        review, f"{review}/review", decision="reject", comment="not this week", version="1"
    )
    assert rejected.status_code == 303
    words = text_of(console.get(review).text)
    assert "rejected by eve@example.com" in words
    assert "not this week" in words
    # closing is its author's or an admin's: the other editor is refused with the service's 403
    not_hers = console.post(review, f"{review}/close")
    assert not_hers.status_code == 403
    assert "admin" in not_hers.text
    closed = console.as_("ed@example.com").post(review, f"{review}/close")
    assert closed.status_code == 303
    assert api.get(f"/change-requests/{cr}").json()["status"] == "closed"

    # a second request, then what is live moves (an emergency turn-off... of an on flag)
    api.patch("/environments/production", {"requiredApprovals": 0})
    assert api.put("/flags/checkout/environments/production", {"enabled": True}).status_code == 200
    api.patch("/environments/production", {"requiredApprovals": 1})
    again = request_id(
        console.post(
            page,
            "/console/flags/checkout/environments/production/targets",
            version=settings_version(api, "checkout"),
            **{"targets[0].variation": "0", "targets[0].values": "user-9"},
        )
    )
    review = f"/console/change-requests/{again}"
    console.as_("ada@example.com")
    assert (
        console.post(review, f"{review}/review", decision="approve", version="1").status_code == 303
    )
    off = api.post("/flags/checkout/environments/production/toggle", {"enabled": False})
    assert off.status_code == 200, off.text
    shown = console.get(review).text
    assert 'id="moved"' in shown
    assert "Moved since the request was made" in shown
    moved = console.post(review, f"{review}/apply", version="1")
    assert moved.status_code == 409
    assert "what is live moved since the request was based on it" in text_of(moved.text)
    assert api.get("/flags/checkout/environments/production").json()["targets"] == []


def test_a_viewer_sees_no_write_forms_and_is_refused_anyway(api: Api) -> None:
    protected_flag(api)
    console = Console(api)
    console.join("ed@example.com", "editor")
    console.join("val@example.com", "viewer")
    proposed = console.as_("ed@example.com").post(
        "/console/flags/checkout?env=production",
        "/console/flags/checkout/environments/production/toggle",
        enabled="true",
        version=settings_version(api, "checkout"),
    )
    cr = request_id(proposed)
    review = f"/console/change-requests/{cr}"
    console.as_("val@example.com")
    flag = console.get("/console/flags/checkout?env=production").text
    assert 'fieldset class="bare" disabled' in flag
    assert "Request to turn on" not in flag
    assert "/archive" not in flag
    shown = console.get(review).text
    assert f"{review}/review" not in shown
    assert f"{review}/close" not in shown
    refused = console.post(review, f"{review}/review", decision="approve", version="1")
    assert refused.status_code == 403
    assert "edit" in refused.text
    asked = console.post(
        "/console/flags/checkout?env=production",
        "/console/flags/checkout/environments/production/toggle",
        enabled="true",
    )
    assert asked.status_code == 403
    assert api.get(f"/change-requests/{cr}").json()["approvals"] == 0


def test_an_admin_sets_the_approvals_an_environment_requires(api: Api) -> None:
    console = Console(api)
    console.join("ada@example.com", "admin")
    console.join("ed@example.com", "editor")
    page = "/console/environments"
    shown = console.as_("ada@example.com").get(page).text
    assert "Require an approval for production" in shown
    version = str(api.get("/environments/production").json()["version"])
    made = console.post(
        page, "/console/environments/production/approvals", version=version, requiredApprovals="1"
    )
    assert made.status_code == 303, made.text[:500]
    assert api.get("/environments/production").json()["requiredApprovals"] == 1
    shown = console.get(page).text
    assert "Require an approval for production" not in shown
    assert re.search(r'<option value="1" selected>1</option>', shown)
    too_many = console.post(page, "/console/environments/staging/approvals", requiredApprovals="9")
    assert too_many.status_code == 422
    assert "from 0 (not protected) to 5" in too_many.text
    # an editor sees the number, not the form, and is refused if they post it anyway
    console.as_("ed@example.com")
    assert "/approvals" not in console.get(page).text
    refused = console.post(
        page, "/console/environments/production/approvals", requiredApprovals="0"
    )
    assert refused.status_code == 403
    assert api.get("/environments/production").json()["requiredApprovals"] == 1


def test_a_segment_change_is_reviewed_and_applied_on_the_review_page(api: Api) -> None:
    assert api.post("/flags", {"key": "checkout"}).status_code == 201
    assert api.post("/segments", {"key": "vips", "included": ["u1"]}).status_code == 201
    rules = [{"clauses": [{"segment": "vips", "op": "segmentMatch"}], "variation": 1}]
    used = api.put("/flags/checkout/environments/production/rules", {"rules": rules})
    assert used.status_code == 200, used.text
    assert api.patch("/environments/production", {"requiredApprovals": 1}).status_code == 200
    body = {
        "environment": "production",
        "title": "More VIPs",
        "changes": [{"segment": "vips", "patch": {"included": ["u1", "u2"]}}],
    }
    made = api.post("/change-requests", body)
    assert made.status_code == 201, made.text
    cr = made.json()["id"]
    console = Console(api)
    console.join("ada@example.com", "admin")

    review = console.as_("ada@example.com").get(f"/console/change-requests/{cr}").text
    words = text_of(review)
    assert "Segment vips" in words
    assert '<a href="/console/segments/vips">vips</a>' in review
    assert "included[1]" in words  # the one key added, a row of the diff table
    assert "u2" in words
    listed = text_of(console.get("/console/change-requests").text)
    assert "segment vips" in listed

    approve_and_apply(console, cr)
    assert api.get("/segments/vips").json()["included"] == ["u1", "u2"]


def test_archiving_where_an_environment_is_protected_is_requested_and_reviewed(api: Api) -> None:
    protected_flag(api)
    console = Console(api)
    console.join("ed@example.com", "editor")
    console.join("ada@example.com", "admin")
    flag_page = "/console/flags/checkout"
    shown = console.as_("ed@example.com").get(flag_page).text
    assert "Request to archive" in shown
    version = str(api.get("/flags/checkout").json()["version"])
    cr = request_id(console.post(flag_page, "/console/flags/checkout/archive", version=version))
    assert api.get("/flags/checkout").json()["archived"] is False  # proposed, not done

    review = console.as_("ada@example.com").get(f"/console/change-requests/{cr}").text
    words = text_of(review)
    assert "Flag checkout itself" in words
    assert "archived" in words
    assert "Archive checkout" in words  # the title it was given
    approve_and_apply(console, cr)
    assert api.get("/flags/checkout").json()["archived"] is True
    assert "Request to restore" in console.get(flag_page).text


def test_the_segment_page_requests_a_change_where_a_protected_flag_uses_the_segment(
    api: Api,
) -> None:
    assert api.post("/flags", {"key": "checkout"}).status_code == 201
    for key in ("vips", "loose"):
        assert api.post("/segments", {"key": key, "included": ["u1"]}).status_code == 201
    rules = [{"clauses": [{"segment": "vips", "op": "segmentMatch"}], "variation": 1}]
    used = api.put("/flags/checkout/environments/production/rules", {"rules": rules})
    assert used.status_code == 200, used.text
    assert api.patch("/environments/production", {"requiredApprovals": 1}).status_code == 200
    console = Console(api)
    console.join("ed@example.com", "editor")
    console.join("ada@example.com", "admin")
    page = "/console/segments/vips"
    version = str(api.get("/segments/vips").json()["version"])

    shown = console.as_("ed@example.com").get(page).text
    assert "Request change" in shown
    assert "Save segment" not in shown
    assert 'name="title" value="Change segment vips in production"' in shown
    assert "production requires 1 approval" in text_of(shown)
    form = {"name": "vips", "description": "", "included": "u1\nu2", "excluded": ""}
    # a form older than what is live: the same 412 a direct save gets, nothing proposed
    stale = console.post(page, page, **form, version="0", action="save", title="")
    assert stale.status_code == 412, stale.text[:500]
    # a bad field: named beside its input, as the direct save names it
    bad = console.post(page, page, **{**form, "name": "x" * 300}, version=version, action="save")
    assert bad.status_code == 422, bad.text[:500]
    assert "name: must be at most" in text_of(bad.text)
    assert api.get("/change-requests").json()["changeRequests"] == []

    cr = request_id(console.post(page, page, **form, version=version, action="save", title=""))
    assert api.get("/segments/vips").json()["included"] == ["u1"]  # nothing written yet
    stored = api.get(f"/change-requests/{cr}").json()
    assert stored["title"] == "Change segment vips in production"  # left empty: defaulted
    assert stored["environment"] == "production"
    assert stored["author"] == "ed@example.com"
    assert stored["changes"][0]["segment"] == "vips"
    assert stored["changes"][0]["patch"]["included"] == ["u1", "u2"]
    assert "Change segment vips in production" in text_of(console.get(page).text)  # listed open

    console.as_("ada@example.com")
    approve_and_apply(console, cr)
    assert api.get("/segments/vips").json()["included"] == ["u1", "u2"]

    # a segment no protected flag uses is saved at once
    loose = console.get("/console/segments/loose").text
    assert "Save segment" in loose
    assert "Request change" not in loose
    saved = console.post(
        "/console/segments/loose",
        "/console/segments/loose",
        **{**form, "name": "loose"},
        version=str(api.get("/segments/loose").json()["version"]),
        action="save",
    )
    assert saved.status_code == 303
    assert saved.headers["location"] == "/console/segments/loose"
    assert api.get("/segments/loose").json()["included"] == ["u1", "u2"]


def test_the_author_signed_in_twice_cannot_approve_from_the_second_session(api: Api) -> None:
    """Nobody approves their own request, not through a second session: the author signed in
    in a second browser (a cookie of its own) sends the approve form there and is refused with
    the API's own message; nothing is approved until someone else does."""
    protected_flag(api)
    console = Console(api)
    console.join("ed@example.com", "editor")  # the first browser: joined by the link
    console.join("ada@example.com", "admin")
    flag_page = "/console/flags/checkout?env=production"
    cr = request_id(
        console.as_("ed@example.com").post(
            flag_page,
            "/console/flags/checkout/environments/production/settings",
            version=settings_version(api, "checkout"),
            offVariation="1",
            fallthrough="1",
            title="",
        )
    )
    # the second browser: the same person signs in with their password, a session of its own
    api.client.cookies.delete(COOKIE)
    assert sign_in_form(api, "ed@example.com", PASSWORD).status_code == 303  # type: ignore[attr-defined]
    second = api.client.cookies.get(COOKIE)
    assert second
    assert second != console.cookies["ed@example.com"]
    console.cookies["ed, second browser"] = second
    # what the API answers the same person (their personal token) is what the console shows
    token = console_token(api, "ed's token")
    by_api = api.post(f"/change-requests/{cr}/approve", {}, key=token)
    assert by_api.status_code == 403, by_api.text
    assert by_api.json()["error"]["code"] == "own_change_request"
    message = by_api.json()["error"]["message"]

    page = f"/console/change-requests/{cr}"
    own = console.as_("ed, second browser").post(
        page, f"{page}/review", decision="approve", version="1"
    )
    assert own.status_code == 403, own.text[:500]
    assert message in text_of(own.text)
    stored = api.get(f"/change-requests/{cr}").json()
    assert stored["status"] == "open"
    assert stored["approvals"] == 0
    assert stored["approvedBy"] == []
    assert stored["reviews"] == []
    # the first session is refused alike; someone else's approval is what counts
    again = console.as_("ed@example.com").post(
        page, f"{page}/review", decision="approve", version="1"
    )
    assert again.status_code == 403
    approved = console.as_("ada@example.com").post(
        page, f"{page}/review", decision="approve", version="1"
    )
    assert approved.status_code == 303, approved.text[:500]
    stored = api.get(f"/change-requests/{cr}").json()
    assert stored["approvedBy"] == ["ada@example.com"]
    assert stored["approvals"] == 1
