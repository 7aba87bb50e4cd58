"""The console over plain HTTP (no browser): its cookie, and its same-origin check behind a
TLS-terminating proxy (the browser's Origin says https, the control plane hears http)."""

from __future__ import annotations

import re

from tests.conftest import Api


def signed_in(api: Api, **headers: str) -> tuple[str, str]:
    """(the Set-Cookie of the session, the page's CSRF token)."""
    form = api.client.get("/console/sign-in", headers=headers).text
    token = re.search(r'name="_login" value="([^"]+)"', form)
    assert token is not None
    answer = api.client.post(
        "/console/sign-in",
        data={"key": api.key, "_login": token.group(1), "next": "/console/flags"},
        headers=headers,
        follow_redirects=False,
    )
    assert answer.status_code == 303, answer.text
    cookie = answer.headers["set-cookie"]
    page = api.client.get("/console/flags").text
    csrf = re.search(r'name="_csrf" value="([^"]+)"', page)
    assert csrf is not None
    return cookie, csrf.group(1)


def test_the_session_cookie_is_httponly_strict_and_secure_behind_https(api: Api) -> None:
    cookie, _ = signed_in(api)
    assert "HttpOnly" in cookie
    assert "samesite=strict" in cookie.lower()
    assert "Path=/console" in cookie
    assert "Secure" not in cookie  # plain http here: a Secure cookie would never come back
    behind_tls = api.client.get("/console/sign-in", headers={"X-Forwarded-Proto": "https"})
    assert "Secure" in behind_tls.headers["set-cookie"]


def test_a_write_through_a_tls_proxy_is_same_site_and_another_site_is_not(api: Api) -> None:
    assert api.post("/flags", {"key": "proxied"}).status_code == 201
    _, csrf = signed_in(api)
    path = "/console/flags/proxied/environments/staging/toggle"
    body = {"_csrf": csrf, "enabled": "true"}
    host = (
        api.client.base_url.netloc.decode()
        if isinstance(api.client.base_url.netloc, bytes)
        else api.client.base_url.netloc
    )
    ours = api.client.post(
        path, data=body, headers={"Origin": f"https://{host}"}, follow_redirects=False
    )
    assert ours.status_code == 303, ours.text
    theirs = api.client.post(
        path, data=body, headers={"Origin": "https://evil.example"}, follow_redirects=False
    )
    assert theirs.status_code == 403
    assert "script-src 'self'" in theirs.headers["content-security-policy"]
    state = api.get("/flags/proxied").json()["environments"]["staging"]
    assert state["enabled"] is True  # the first toggle only


def test_the_time_series_is_a_page_of_its_own_without_script_and_a_part_with_it(
    api: Api,
) -> None:
    """The results page comes as fast as the API's results: its time series is computed apart.
    Without the script the page links to it (a page with the chart and its numbers in words);
    the script loads the same chart into the page (X-Vane-Fragment)."""
    created = api.post("/experiments", {"name": "Daily", "type": "manual", "goal": "buy"})
    assert created.status_code == 201, created.text
    assert api.post("/experiments/daily", {"status": "running"}).status_code == 200
    for unit in ("a", "b", "c", "d"):
        assert api.post("/experiments/daily/assign", {"unit": unit}).status_code == 200
    assert api.post("/track", {"unit": "a", "event": "buy"}).status_code == 200
    signed_in(api)
    results = api.client.get("/console/experiments/daily")
    assert results.status_code == 200
    assert 'href="/console/experiments/daily/daily"' in results.text
    assert "svg" not in results.text.split('id="daily"')[1].split("</div>")[0]
    whole = api.client.get("/console/experiments/daily/daily")
    assert whole.status_code == 200
    assert '<header class="top">' in whole.text
    assert 'class="timeseries"' in whole.text
    description = re.search(r'<desc id="ts-desc">([^<]+)</desc>', whole.text)
    assert description is not None
    assert "control" in description.group(1)
    part = api.client.get("/console/experiments/daily/daily", headers={"X-Vane-Fragment": "part"})
    assert part.status_code == 200
    assert '<header class="top">' not in part.text
    assert 'class="timeseries"' in part.text


def test_deleting_an_environment_from_the_console_revokes_its_keys_as_the_api_does(
    api: Api,
) -> None:
    """The console's delete goes through the same service, handed the keys' revocation: the
    same refusal while keys are bound, the same audit entries once they are revoked with it."""
    assert api.post("/environments", {"key": "qa"}).status_code == 201
    key = api.post("/keys", {"kind": "public", "environment": "qa"}).json()
    _, csrf = signed_in(api)
    path = "/console/environments/qa/delete"
    refused = api.client.post(path, data={"_csrf": csrf, "confirm": "qa"}, follow_redirects=False)
    assert refused.status_code == 409
    assert key["id"] in refused.text
    assert api.get("/environments/qa").status_code == 200
    deleted = api.client.post(
        path, data={"_csrf": csrf, "confirm": "qa", "revokeKeys": "on"}, follow_redirects=False
    )
    assert deleted.status_code == 303, deleted.text
    assert api.get("/environments/qa").status_code == 404
    assert api.get("/flags", key=key["key"]).status_code == 401
    actions = [e["action"] for e in api.get("/audit").json()["entries"][:2]]
    assert actions == ["environment.delete", "key.revoke"]


def test_a_rule_on_another_context_kind_is_written_from_the_console(api: Api) -> None:
    """Issue #23: the rules editor's clause names its kind, through the same service as the API;
    a kind that cannot be is the API's error, shown at that field."""
    assert api.post("/flags", {"key": "kinds"}).status_code == 201
    _, csrf = signed_in(api)
    path = "/console/flags/kinds/environments/staging/rules"
    form = {
        "_csrf": csrf,
        "rules[0].clauses[0].contextKind": "organization",
        "rules[0].clauses[0].attribute": "/address/city",
        "rules[0].clauses[0].op": "in",
        "rules[0].clauses[0].values": "Lyon",
        "rules[0].serve": "0",
    }
    saved = api.client.post(path, data=form, follow_redirects=False)
    assert saved.status_code == 303, saved.text
    [clause] = api.get("/flags/kinds/environments/staging/rules").json()["rules"][0]["clauses"]
    assert (clause["contextKind"], clause["attribute"]) == ("organization", "/address/city")
    page = api.client.get("/console/flags/kinds?env=staging").text
    assert 'value="organization"' in page
    refused = api.client.post(
        path, data={**form, "rules[0].clauses[0].contextKind": "multi"}, follow_redirects=False
    )
    assert refused.status_code == 422
    assert "is not a context kind" in refused.text


def test_an_experiment_on_accounts_is_created_from_the_console(api: Api) -> None:
    _, csrf = signed_in(api)
    form = {"_csrf": csrf, "name": "Team plan", "type": "manual", "goal": "upgrade"}
    made = api.client.post(
        "/console/experiments", data={**form, "unitKind": "organization"}, follow_redirects=False
    )
    assert made.status_code == 303, made.text
    assert api.get("/experiments/team-plan").json()["unitKind"] == "organization"
    assert "organization units exposed" in api.client.get("/console/experiments/team-plan").text
    refused = api.client.post(
        "/console/experiments", data={**form, "name": "Bad", "unitKind": "multi"}
    )
    assert refused.status_code == 422
    assert "is not a context kind" in refused.text


def test_a_ratio_metric_is_created_from_the_console_with_the_api_s_audit(api: Api) -> None:
    _, csrf = signed_in(api)
    form = {
        "_csrf": csrf,
        "name": "Revenue per session",
        "event": "purchase",
        "aggregation": "ratio",
        "numerator": "sum",
        "denominator_event": "session",
        "denominator": "count",
        "direction": "higher",
    }
    made = api.client.post("/console/metrics/", data=form, follow_redirects=False)
    assert made.status_code == 303, made.text
    created = api.get("/metrics/revenue-per-session").json()
    assert created["numerator"] == {"event": "purchase", "aggregation": "sum"}
    assert created["denominator"] == {"event": "session", "aggregation": "count"}
    audit = api.get("/audit", params={"resourceType": "metric"}).json()
    assert [e["action"] for e in audit["entries"]][:1] == ["metric.create"]
    listing = api.client.get("/console/metrics").text
    assert "<code>purchase</code> sum per <code>session</code> count" in listing
    refused = api.client.post(
        "/console/metrics/", data={**form, "name": "No denominator", "denominator_event": ""}
    )
    assert refused.status_code == 422
    assert "the event name the metric reads" in refused.text


def test_a_quantile_metric_is_created_from_the_console(api: Api) -> None:
    _, csrf = signed_in(api)
    form = {"_csrf": csrf, "name": "Load p90", "event": "page_load", "aggregation": "quantile"}
    refused = api.client.post("/console/metrics/", data={**form, "quantile": "ninety"})
    assert refused.status_code == 422
    assert "from 0.001 to 0.999" in refused.text
    made = api.client.post("/console/metrics/", data={**form, "quantile": "0.9"})
    assert made.status_code in (200, 303), made.text
    assert api.get("/metrics/load-p90").json()["quantile"] == 0.9
    assert "quantile p90" in api.client.get("/console/metrics").text


def console_writes(api: Api) -> list[str]:
    """Every POST the console answers (from the app's routes, so a new one is in), its path
    parameters filled in."""
    paths = []
    for route in api.client.app.routes:
        if route.path.startswith("/console/") and "POST" in getattr(route, "methods", ()):
            paths.append(re.sub(r"\{[^}]+\}", "walk", route.path))
    return sorted(set(paths) - SIGN_IN_FORMS)


SIGN_IN_FORMS = {"/console/sign-in", "/console/welcome/walk"}
"""Forms posted without a session (signing in, joining by a link): a double-submit token of
their own stands for the session's CSRF token."""


def test_a_request_without_the_session_cookie_never_clears_it(api: Api) -> None:
    """Issue #35: a page of another site that posts a form to the console (the Strict cookie is
    not sent) is sent to sign in, and the browser keeps its cookie: no Set-Cookie clearing a
    cookie the request did not carry. The session stays live; nothing was done."""
    assert api.post("/flags", {"key": "walk"}).status_code == 201
    _, csrf = signed_in(api)
    value = api.client.cookies["vane_console"]
    writes = console_writes(api)
    assert "/console/sign-out" in writes
    assert "/console/flags/walk/environments/walk/toggle" in writes
    cross_site = {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
    api.client.cookies.clear()
    for path in [*writes, "/console/flags", "/console/flags/walk"]:
        method = "GET" if path in ("/console/flags", "/console/flags/walk") else "POST"
        data = {"_csrf": csrf, "enabled": "true"} if method == "POST" else None
        answer = api.client.request(
            method, path, data=data, headers=cross_site, follow_redirects=False
        )
        assert answer.status_code == 303, (path, answer.status_code)
        assert answer.headers["location"].startswith("/console/sign-in"), path
        assert "vane_console" not in answer.headers.get("set-cookie", ""), (
            path,
            answer.headers["set-cookie"],
        )
    for path in SIGN_IN_FORMS:  # another site's sign-in or join: refused, and no cookie set
        answer = api.client.post(
            path, data={"key": api.key}, headers=cross_site, follow_redirects=False
        )
        assert answer.status_code in (403, 404), (path, answer.status_code)
        assert "vane_console" not in answer.headers.get("set-cookie", ""), path
    api.client.cookies.set("vane_console", value, path="/console")
    assert api.client.get("/console/flags", follow_redirects=False).status_code == 200
    assert api.get("/flags/walk").json()["environments"]["staging"]["enabled"] is False


def test_a_cookie_received_but_dead_is_cleared_and_sign_out_clears_a_live_one(api: Api) -> None:
    stale = api.client.get(
        "/console/flags", headers={"Cookie": "vane_console=not-a-session"}, follow_redirects=False
    )
    assert stale.status_code == 303
    assert re.search(r'vane_console="?"?;', stale.headers["set-cookie"])
    _, csrf = signed_in(api)
    out = api.client.post("/console/sign-out", data={"_csrf": csrf}, follow_redirects=False)
    assert out.status_code == 303
    assert out.headers["location"] == "/console/sign-in"
    assert re.search(r'vane_console="?"?;', out.headers["set-cookie"])
    assert api.client.get("/console/flags", follow_redirects=False).status_code == 303


def test_a_switch_of_the_flags_list_sends_the_version_it_shows(api: Api) -> None:
    """The flags list is one form; each switch sends it to its flag's toggle with the version
    it shows in the address (its formaction). A version changed meanwhile is refused with the
    conflict, and nothing is written, as from the flag page's own form."""
    assert api.post("/flags", {"key": "listed"}).status_code == 201
    _, csrf = signed_in(api)
    page = api.client.get("/console/flags?q=listed").text
    assert page.count('form="toggles"') == 2  # a switch per environment, no form of its own
    assert ' action="/console/flags/listed/' not in page
    actions = re.findall(r'formaction="(/console/flags/listed/environments/staging/[^"]+)"', page)
    [action] = actions
    assert action.endswith("/toggle?version=1")
    sent = {"_csrf": csrf, "confirm": "", "enabled": "true"}
    assert (
        api.post("/flags/listed/environments/staging/toggle", {"enabled": True}).status_code == 200
    )
    stale = api.client.post(action, data=sent, follow_redirects=False)
    assert stale.status_code == 412
    assert "someone changed this flag since you opened it" in stale.text
    assert api.get("/flags/listed").json()["environments"]["staging"]["enabled"] is True
    page = api.client.get("/console/flags?q=listed").text
    [action] = re.findall(r'formaction="(/console/flags/listed/environments/staging/[^"]+)"', page)
    turned = api.client.post(action, data={**sent, "enabled": "false"}, follow_redirects=False)
    assert turned.status_code == 303
    assert api.get("/flags/listed").json()["environments"]["staging"]["enabled"] is False
