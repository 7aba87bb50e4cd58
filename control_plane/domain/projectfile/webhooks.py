"""Webhooks in a document, each named by its url (webhooks have ids, not keys), never with its
secret; the steps that create, change or (pruning) delete one, each one call of the webhooks'
own services under the instance's address policy. A webhook made from a document gets a
generated secret that is never shown: the plan's notes say to set one with the API."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import msgspec
from sqlalchemy import select

from control_plane.db.models import Webhook
from control_plane.domain.common import Scope
from control_plane.domain.problems import Problems
from control_plane.domain.projectfile import compare
from control_plane.domain.projectfile import schemas as s
from control_plane.domain.projectfile.export import plain
from control_plane.domain.projectfile.steps import Phase, Run, Unit
from control_plane.domain.webhooks import schemas as wh
from control_plane.domain.webhooks import services as webhooks

if TYPE_CHECKING:
    from control_plane.domain.projectfile.planner import Planner

DELETE, WRITE = 0, 1  # within Phase.WEBHOOK


def webhook(given: s.WebhookDoc) -> dict[str, Any]:
    """Its fields but the url that names it, an event listed twice kept once (as stored)."""
    out: dict[str, Any] = plain(given)
    del out["url"]
    out["events"] = list(dict.fromkeys(given.events))
    return out


def check(problems: Problems, doc: s.ProjectDoc, live: s.ProjectDoc) -> None:
    """A url listed twice, or one that names more than one live webhook."""
    counts = Counter(w.url for w in live.webhooks)
    seen: set[str] = set()
    for i, given in enumerate(doc.webhooks):
        if given.url in seen:
            problems.add(f"webhooks[{i}].url", f"{given.url!r} is listed twice")
        seen.add(given.url)
        if counts[given.url] > 1:
            problems.add(
                f"webhooks[{i}].url",
                f"{counts[given.url]} webhooks have this url and the document names a webhook by "
                "its url: change or delete the others with the API (PATCH or DELETE "
                "/webhooks/{id})",
            )


async def _id(scope: Scope, url: str) -> str:
    found = await scope.session.scalar(
        select(Webhook.id).where(Webhook.project_id == scope.project_id, Webhook.url == url)
    )
    return str(found)


def _create(url: str, after: dict[str, Any], policy: str) -> Run:
    body = msgspec.convert({**after, "url": url}, wh.WebhookCreate)
    return lambda unit: webhooks.create_webhook(unit.scope, body, policy)


def _patch(url: str, after: dict[str, Any], names: set[str], policy: str) -> Run:
    body = msgspec.convert({k: v for k, v in after.items() if k in names}, wh.WebhookPatch)

    async def run(unit: Unit) -> wh.Webhook:
        scope = unit.scope
        return await webhooks.patch_webhook(scope, await _id(scope, url), body, policy)

    return run


def _delete(url: str) -> Run:
    async def run(unit: Unit) -> wh.Deleted:
        scope = unit.scope
        return await webhooks.delete_webhook(scope, await _id(scope, url))

    return run


def plan(p: Planner) -> None:
    live = {w.url: w for w in reversed(p.live.doc.webhooks)}
    for i, given in enumerate(p.doc.webhooks):
        before, after, where = live.get(given.url), webhook(given), f"webhooks[{i}]"
        if before is None:
            p.note("webhook", given.url, "create", compare.diff({}, after))
            p.step(Phase.WEBHOOK, where, _create(given.url, after, p.webhook_private), WRITE)
            p.notes.append(
                f"webhook {given.url}: made with a generated secret that is never shown; set "
                'your own with PATCH /webhooks/{id} {"secret": "…"} (GET /webhooks lists its id)'
            )
            continue
        changes = compare.diff(webhook(before), after)
        if not changes:
            p.unchanged.append(f"webhook {given.url}")
            continue
        p.note("webhook", given.url, "update", changes)
        run = _patch(given.url, after, compare.fields(changes), p.webhook_private)
        p.step(Phase.WEBHOOK, where, run, WRITE)
    if p.prune:
        for url in sorted(set(live) - {w.url for w in p.doc.webhooks}):
            p.note("webhook", url, "delete", [])
            p.step(Phase.WEBHOOK, f"webhooks ({url})", _delete(url), DELETE)
