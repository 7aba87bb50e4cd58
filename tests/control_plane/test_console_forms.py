"""Every form of the console, as a new user meets it: found on the pages themselves (over HTTP,
by parsing the HTML they serve), then sent with each field a person may leave alone left alone.

Whatever is left out, a form answers a redirect back into the console or a page with its
message: never a 5xx, never the API's JSON error in place of a page (issue #35: "Save metrics"
with no guardrail ticked answered a raw JSON 500)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from urllib.parse import urlsplit

from hypothesis import given
from hypothesis import strategies as st
from litestar.datastructures import FormMultiDict

from control_plane.console import forms
from tests.conftest import Api
from tests.control_plane.people import person

MAX_PAGES = 60
# forms that end or undo something are sent after the others, so that the rest meet live things
REDELIVER = "/console/webhooks/{webhook_id:str}/deliveries/{delivery_id:str}/redeliver"
LAST = ("/archive", "/delete", "/revoke", "/cancel", "/sign-out", "/withdraw")
PERSON_ONLY = {
    "/console/welcome/{token:str}",  # a link's form, posted without a session
    "/console/people/tokens",  # a person's own tokens: not shown to a service account
    "/console/people/tokens/{token_id:str}/revoke",
}
"""Walked in tests/control_plane/test_people.py, signed in as a person."""


@dataclass
class Field:
    tag: str  # input, select, textarea, button
    type: str  # an input's or a button's type ("" for select and textarea)
    name: str
    value: str
    required: bool = False
    checked: bool = False
    multiple: bool = False
    options: list[tuple[str, bool]] = field(default_factory=list)  # (value, selected)


@dataclass
class Form:
    page: str  # where it was found ("": in the answer to another form)
    method: str
    action: str
    fields: list[Field] = field(default_factory=list)


class Page(HTMLParser):
    """The forms of a page (with their fields, as a browser would submit them) and its links."""

    def __init__(self, url: str) -> None:
        super().__init__(convert_charrefs=True)
        self.url = url
        self.forms: list[Form] = []
        self.links: list[str] = []
        self._form: Form | None = None
        self._select: Field | None = None
        self._option: tuple[str | None, bool, list[str]] | None = None
        self._textarea: Field | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v if v is not None else "" for k, v in attrs}
        if tag == "a" and a.get("href", "").startswith("/console"):
            self.links.append(a["href"].split("#", 1)[0])
        elif tag == "form" and a.get("method", "get").lower() in ("get", "post"):
            action = a.get("action") or urlsplit(self.url).path
            self._form = Form(self.url, a.get("method", "get").lower(), action.split("#", 1)[0])
            self.forms.append(self._form)
        elif self._form is None or ("name" not in a and tag != "option"):
            return
        elif tag in ("input", "button"):
            kind = a.get("type", "submit" if tag == "button" else "text").lower()
            self._form.fields.append(
                Field(tag, kind, a["name"], a.get("value", ""), "required" in a, "checked" in a)
            )
        elif tag == "select":
            self._select = Field(
                "select", "", a["name"], "", "required" in a, False, "multiple" in a
            )
            self._form.fields.append(self._select)
        elif tag == "textarea":
            self._textarea = Field("textarea", "", a["name"], "", "required" in a)
            self._form.fields.append(self._textarea)
        elif tag == "option" and self._select is not None:
            self._option = (a.get("value"), "selected" in a, [])

    def parse(self, html: str) -> Page:
        self.feed(html)
        self.close()
        return self

    def handle_data(self, data: str) -> None:
        if self._option is not None:
            self._option[2].append(data)
        elif self._textarea is not None:
            self._textarea.value += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "option" or (tag == "select" and self._option is not None):
            if self._option is not None and self._select is not None:
                value, selected, text = self._option
                self._select.options.append(
                    (value if value is not None else "".join(text).strip(), selected)
                )
            self._option = None
        if tag == "select":
            self._select = None
        elif tag == "textarea":
            self._textarea = None
        elif tag == "form":
            self._form = None


def console_forms(api: Api, start: str = "/console/flags") -> Iterator[Form]:
    """Every form on every console page reachable by links from ``start`` (one of each kind:
    a form is known by its method, action and field names)."""
    seen_pages: set[str] = set()
    seen_forms: set[tuple[str, str, tuple[str, ...]]] = set()
    kind = kinds_of(api)
    queue = [start]
    while queue and len(seen_pages) < MAX_PAGES:
        url = queue.pop(0)
        if url in seen_pages or url.startswith(("/console/static", "/console/live")):
            continue
        seen_pages.add(url)
        answer = api.client.get(url)
        assert answer.status_code == 200, (url, answer.status_code, answer.text[:300])
        parsed = Page(url)
        parsed.feed(answer.text)
        for form in parsed.forms:
            if kind(form) not in seen_forms:
                seen_forms.add(kind(form))
                yield form
        queue += [link for link in parsed.links if "cursor=" not in link]


def kinds_of(api: Api) -> Callable[[Form], tuple[str, str, tuple[str, ...]]]:
    """A form's kind: its method, the console route it is sent to (``/console/flags/{key}/…``,
    whatever the flag) and its field names (one of each row: a rules editor with two rules is
    the same form as with one)."""
    routes = [
        (
            re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(route.path)) + "/?$"),
            route.path,
        )
        for route in api.client.app.routes
        if route.path.startswith("/console")
    ]

    def kind(form: Form) -> tuple[str, str, tuple[str, ...]]:
        route = next((path for rx, path in routes if rx.match(form.action)), form.action)
        names = {re.sub(r"\[\d+\]", "[]", f.name) for f in form.fields}
        return form.method, route, tuple(sorted(names))

    return kind


def as_now(api: Api, form: Form) -> Form:
    """The form as its page shows it now (its hidden version is the current one, so that an
    earlier write does not make every later one a 412 that never reads the fields); a form
    found in an answer (no page of its own) as it was."""
    if not form.page:
        return form
    parsed = Page(form.page)
    parsed.feed(api.client.get(form.page).text)
    return next((again for again in parsed.forms if same(again, form)), form)


def same(one: Form, other: Form) -> bool:
    return (one.method, one.action, names(one)) == (other.method, other.action, names(other))


def names(form: Form) -> set[str]:
    return {f.name for f in form.fields}


def buttons(form: Form) -> list[tuple[str, str] | None]:
    """Each way to send the form: one per named submit button (the rules editor's, the status
    buttons), or with no button's name when none is named."""
    named = [(f.name, f.value) for f in form.fields if f.tag == "button" or f.type == "submit"]
    return list(dict.fromkeys(named)) or [None]


def left_alone(
    form: Form, button: tuple[str, str] | None, *, absent: bool
) -> list[tuple[str, str]]:
    """What the form sends when nothing a person may leave alone is touched: what the page set
    (hidden inputs) as it is; text empty (``absent``: not sent at all, as a client that is not a
    browser may do); boxes unticked; a select at its empty choice, or the one it shows."""
    out: list[tuple[str, str]] = []
    for f in form.fields:
        if f.tag == "button" or f.type in ("submit", "button", "reset", "image"):
            continue
        if f.type == "hidden":
            out.append((f.name, f.value))
        elif f.type == "checkbox":
            continue
        elif f.type == "radio":
            if f.checked and not any(name == f.name for name, _ in out):
                out.append((f.name, f.value))
        elif f.tag == "select":
            if f.multiple or not f.options:
                continue
            values = [v for v, _ in f.options]
            shown = next((v for v, selected in f.options if selected), values[0])
            out.append((f.name, "" if "" in values else shown))
        elif not absent:
            out.append((f.name, ""))
    if button is not None:
        out.append(button)
    return out


def as_dict(pairs: list[tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, value in pairs:
        out.setdefault(name, []).append(value)
    return out


def sign_in(api: Api) -> str:
    """Sign in with the management key; the session cookie's value."""
    form = api.client.get("/console/sign-in").text
    token = re.search(r'name="_login" value="([^"]+)"', form)
    assert token is not None
    answer = api.client.post(
        "/console/sign-in",
        data={"key": api.key, "_login": token.group(1), "next": "/console/flags"},
        follow_redirects=False,
    )
    assert answer.status_code == 303, answer.text
    cookie = api.client.cookies.get("vane_console")
    assert cookie
    return cookie


def seed(api: Api) -> None:
    seed_things(api)
    walker = person(api, "walker@example.com", "editor")  # a person for the People page's forms
    seed_change_requests(api, walker)


def seed_change_requests(api: Api, author: str) -> None:
    """A protected environment (the flag page's forms there propose change requests) and two
    requests in it by ``author`` (a person's token): one to review, one approved by the
    management key the walk signs in with (so its page offers Apply)."""
    made = api.post("/environments", {"key": "walk-protected", "requiredApprovals": 1})
    assert made.status_code == 201, made.text
    for title, approve in (("Walk review", False), ("Walk apply", True)):
        body = {
            "environment": "walk-protected",
            "title": title,
            "changes": [{"flag": "walk", "settings": {"enabled": True}}],
        }
        created = api.post("/change-requests", body, key=author)
        assert created.status_code == 201, created.text
        if approve:
            approved = api.post(f"/change-requests/{created.json()['id']}/approve", {})
            assert approved.status_code == 200, approved.text


def seed_things(api: Api) -> None:
    """One of each thing the console shows, so that every form appears: a flag with a rule and
    a prerequisite, a segment, one metric (only one: issue #35), an experiment, a webhook, a
    pending schedule, a critical environment, a management key."""
    made = [
        api.post("/flags", {"key": "walk", "tags": ["a"]}),
        api.post("/flags", {"key": "walk-pre"}),
        api.post("/segments", {"key": "walkers", "included": ["u1"]}),
        api.post(
            "/metrics", {"key": "revenue", "name": "Revenue", "event": "buy", "aggregation": "sum"}
        ),
        api.post("/experiments", {"name": "Walk", "type": "manual", "goal": "buy"}),
        api.post("/webhooks", {"url": "https://example.com/hook", "events": ["*"]}),
        api.post("/environments", {"key": "walk-critical", "critical": True}),
        api.post("/users/invitations", {"email": "pending@example.com", "role": "viewer"}),
        # a service account besides the key the walk signs in with (its row has a role form)
        api.post("/keys", {"kind": "management", "role": "editor", "name": "walk-ci"}),
    ]
    for answer in made:
        assert answer.status_code == 201, answer.text
    rules = {
        "rules": [
            {
                "clauses": [{"attribute": "country", "op": "in", "values": ["DE"]}],
                "serve": {"variation": 1},
            }
        ]
    }
    assert api.put("/flags/walk/environments/staging/rules", rules).status_code == 200
    at = (datetime.now(UTC) + timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    schedule = {"at": at, "enabled": True}
    scheduled = api.post("/flags/walk/environments/staging/schedule", schedule)
    assert scheduled.status_code in (200, 201), scheduled.text


def test_every_console_form_answers_a_page_or_a_redirect_with_its_optional_fields_left_empty(
    api: Api,
) -> None:
    seed(api)
    sign_in(api)
    found = list(console_forms(api))
    kind = kinds_of(api)
    # every write of the console is met (the deliveries of a webhook appear once its dispatcher
    # has run, whenever that is: their one field is the CSRF token)
    posted = {kind(form)[1] for form in found if form.method == "post"}
    writes = {
        route.path
        for route in api.client.app.routes
        if route.path.startswith("/console/") and "POST" in getattr(route, "methods", ())
    }
    missing = writes - posted - {"/console/sign-in", REDELIVER, *PERSON_ONLY}
    assert not missing, missing
    # the flag page's forms in a protected environment (they propose a change request, titled)
    assert any("title" in names(form) and "walk-protected" in form.action for form in found)
    found.sort(key=lambda form: any(form.action.endswith(end) for end in LAST))
    sign_out = [form for form in found if form.action == "/console/sign-out"]
    tried = 0
    to_send = [form for form in found if form.action != "/console/sign-out"]
    known = {kind(form) for form in found}
    i = 0
    while i < len(to_send):
        form = to_send[i]
        for button in buttons(form):
            for absent in (False, True):
                data = as_dict(left_alone(as_now(api, form), button, absent=absent))
                if form.method == "get":
                    answer = api.client.get(form.action, params=data, follow_redirects=False)
                else:
                    answer = api.client.post(form.action, data=data, follow_redirects=False)
                tried += 1
                what = (form.page, form.method, form.action, data, answer.status_code)
                assert answer.status_code < 500, (what, answer.text[:500])
                if answer.is_redirect:
                    location = answer.headers["location"]
                    assert location.startswith("/console"), what
                    assert not location.startswith("/console/sign-in"), what  # still signed in
                    continue
                assert answer.headers["content-type"].startswith("text/html"), (
                    what,
                    answer.text[:500],
                )
                if form.page and form.method == "post":
                    # a form only an answer shows (the confirmation of a critical toggle, the
                    # rules editor after "add a rule"): sent next, as it stands in the answer
                    shown = Page(form.action)
                    shown.feed(answer.text)
                    for new in shown.forms:
                        if kind(new) not in known and new.action != "/console/sign-out":
                            known.add(kind(new))
                            new.page = ""
                            to_send.insert(i + 1, new)
        i += 1
    assert tried > 30
    [form] = sign_out
    answer = api.client.post(
        form.action, data=as_dict(left_alone(form, None, absent=True)), follow_redirects=False
    )
    assert answer.status_code == 303
    assert answer.headers["location"] == "/console/sign-in"
    sign_in_forms = Page("/console/sign-in").parse(api.client.get("/console/sign-in").text).forms
    assert len(sign_in_forms) == 2  # a person's email and password; a management key
    for form in sign_in_forms:
        for absent in (False, True):
            data = as_dict(left_alone(form, None, absent=absent))
            answer = api.client.post(form.action, data=data, follow_redirects=False)
            assert answer.status_code == 401, answer.text  # "do not match", "not a live key"
            assert answer.headers["content-type"].startswith("text/html")


def test_a_primary_metric_is_set_with_only_one_metric_and_no_guardrail(api: Api) -> None:
    """Issue #35: the one metric chosen as primary, no guardrail ticked: saved, not a 500."""
    created = api.post(
        "/metrics", {"key": "revenue", "name": "Revenue", "event": "buy", "aggregation": "sum"}
    )
    assert created.status_code == 201, created.text
    assert (
        api.post("/experiments", {"name": "Solo", "type": "manual", "goal": "buy"}).status_code
        == 201
    )
    sign_in(api)
    page = api.client.get("/console/experiments/solo").text
    csrf = re.search(r'name="_csrf" value="([^"]+)"', page)
    assert csrf is not None
    path = "/console/experiments/solo/metrics"
    saved = api.client.post(
        path, data={"_csrf": csrf.group(1), "primary": "revenue"}, follow_redirects=False
    )
    assert saved.status_code == 303, saved.text
    experiment = api.get("/experiments/solo").json()
    assert experiment["primary"] in ("revenue", created.json()["id"])
    assert experiment["guardrails"] == []
    shown = api.client.get("/console/experiments/solo").text
    assert re.search(r'<option value="revenue" selected>', shown)
    both = {"_csrf": csrf.group(1), "primary": "revenue", "guardrails": "revenue"}
    refused = api.client.post(path, data=both, follow_redirects=False)
    assert refused.status_code == 422
    assert refused.headers["content-type"].startswith("text/html")
    assert "the primary metric is not also a guardrail" in refused.text
    cleared = api.client.post(
        path, data={"_csrf": csrf.group(1), "primary": ""}, follow_redirects=False
    )
    assert cleared.status_code == 303, cleared.text
    assert api.get("/experiments/solo").json()["primary"] is None


_values = st.one_of(st.text(max_size=8), st.binary(max_size=4))  # bytes: not text, as a file


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), _values), max_size=6))
def test_a_posted_field_reads_as_text_or_empty_whatever_was_sent(
    pairs: list[tuple[str, str | bytes]],
) -> None:
    """The one way the console reads a form: an absent field, or one that is not text (a file
    posted in its place), is empty; a repeated field is every text value, in order."""
    form = FormMultiDict(pairs)
    for name in ("a", "b", "c", "absent"):
        sent = [value for key, value in pairs if key == name]
        first = sent[0] if sent else None
        assert forms.text(form, name) == (first if isinstance(first, str) else "")
        assert forms.texts(form, name) == [value for value in sent if isinstance(value, str)]
