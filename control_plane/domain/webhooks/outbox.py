"""The transactional outbox: what leaves the system, written in the transaction of the change.

``Scope.audit`` (which every write calls) hands each audit entry to :func:`emit_audited`, and
``Scope.announce`` (the experiment results' new decisions) to :func:`emit`, through the hooks the
app injects into every unit of work (:data:`OUTBOX`): the domains do not import webhooks. Either adds an ``outbox_events`` row
to the caller's session, so a change and its notification commit together or not at all. The
dispatcher (``dispatcher.py``) later fans each row out into one delivery per matching webhook.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from typing import Any

from sqlalchemy import exists, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from control_plane.db.ids import new_id
from control_plane.db.models import AuditEntry, OutboxEvent, Webhook, WebhookDelivery
from control_plane.domain.common import Hooks

AUDIT_TO_WEBHOOK: dict[str, str] = {
    # flags
    "flag.create": "flag.created",
    "flag.update": "flag.updated",  # name, description, tags, variations, bucketBy, ...
    "flag.settings.update": "flag.updated",  # one environment's settings
    "flag.rules.update": "flag.updated",
    "flag.metrics": "flag.updated",
    "flag.toggle": "flag.toggled",
    "flag.archive": "flag.archived",
    "flag.restore": "flag.restored",
    "flag.delete": "flag.deleted",
    # scheduled changes of a flag
    "schedule.create": "flag.schedule.created",
    "schedule.cancel": "flag.schedule.cancelled",
    "schedule.fail": "flag.schedule.failed",
    # change requests (a protected environment's changes)
    "change_request.create": "change_request.created",
    "change_request.update": "change_request.updated",
    "change_request.approve": "change_request.approved",
    "change_request.reject": "change_request.rejected",
    "change_request.apply": "change_request.applied",
    "change_request.close": "change_request.closed",
    "change_request.skip": "change_request.skipped",  # its applyAt passed, not applied
    # segments
    "segment.create": "segment.created",
    "segment.update": "segment.updated",
    "segment.delete": "segment.deleted",
    # experiments
    "experiment.create": "experiment.created",
    "experiment.update": "experiment.updated",
    "experiment.metrics": "experiment.updated",
    "experiment.status": "experiment.status",
    "experiment.delete": "experiment.deleted",
    # layers and holdouts (a holdout's status change is an update)
    "layer.create": "layer.created",
    "layer.update": "layer.updated",
    "layer.delete": "layer.deleted",
    "holdout.create": "holdout.created",
    "holdout.update": "holdout.updated",
    "holdout.delete": "holdout.deleted",
    # metrics
    "metric.create": "metric.created",
    "metric.update": "metric.updated",
    "metric.delete": "metric.deleted",
    # keys
    "key.create": "key.created",
    "key.update": "key.updated",
    "key.revoke": "key.revoked",
    # environments
    "environment.create": "environment.created",
    "environment.rename": "environment.updated",
    "environment.update": "environment.updated",
    "environment.delete": "environment.deleted",
    # people (an invitation is announced as ``user.invited``, with its link: see ANNOUNCED)
    "user.update": "user.updated",
    "user.deactivate": "user.deactivated",
    "user.uninvite": "user.invitation_withdrawn",
    "token.create": "token.created",
    "token.revoke": "token.revoked",
    # webhooks themselves
    "webhook.create": "webhook.created",
    "webhook.update": "webhook.updated",
    "webhook.delete": "webhook.deleted",
}
"""Audit action → webhook event type. An action not listed here is audited but not sent (today:
``code_refs.upload``, ``webhook.redeliver`` and ``user.invite``, announced as ``user.invited``); ``docs/webhooks.md`` lists the same table, and a
test holds every action the code audits to one of the two."""

DECISION_TYPES = ("experiment.winner", "experiment.srm_failed")
"""Experiment decisions, emitted once each by the results computation (not audit actions)."""

ANNOUNCED_TYPES = ("user.invited",)
"""Announced by a service beside its audit entry, with what the audit must not keep (the
invitation's single-use link)."""

SECRETS: dict[str, tuple[str, ...]] = {"user.invited": ("url",)}
"""Fields of an event meant for its receivers alone (the invitation's single-use link): sent in
its deliveries, never listed (:func:`without_secrets`), and taken out of the stored event once
no delivery of it is pending (:func:`forget_secrets`), so a redelivery sends the event without
them."""

EVENT_TYPES: frozenset[str] = (
    frozenset(AUDIT_TO_WEBHOOK.values()) | frozenset(DECISION_TYPES) | frozenset(ANNOUNCED_TYPES)
)


def matches(patterns: list[str], event_type: str) -> bool:
    """``flag.toggled`` matches ``flag.toggled``, ``flag.*`` and ``*`` (shell-style patterns)."""
    return any(fnmatch.fnmatchcase(event_type, pattern) for pattern in patterns)


def valid_pattern(pattern: str) -> bool:
    """A pattern that can match at least one event type Vane sends."""
    return any(fnmatch.fnmatchcase(t, pattern) for t in EVENT_TYPES)


def without_secrets(event_type: str, data: Any) -> Any:
    """``data`` as anyone but its receivers may see it: without the fields of ``SECRETS``."""
    hidden = SECRETS.get(event_type)
    if not hidden or not isinstance(data, dict):
        return data
    return {name: value for name, value in data.items() if name not in hidden}


async def forget_secrets(session: AsyncSession, event_ids: Iterable[str]) -> None:
    """Take the secrets out of each stored event no delivery is pending for any more (each one
    delivered or given up, or its webhook deleted). The event's row is locked first, so of two
    replicas recording an event's last two deliveries at once, the second to commit sees the
    first's and forgets (SQLite serialises writers)."""
    for event_id in sorted(set(event_ids)):
        event = await session.scalar(
            select(OutboxEvent)
            .where(OutboxEvent.id == event_id, OutboxEvent.type.in_(SECRETS))
            .with_for_update()
        )
        if event is None:
            continue
        pending = await session.scalar(
            select(WebhookDelivery.id)
            .where(WebhookDelivery.event_id == event_id, WebhookDelivery.status == "pending")
            .limit(1)
        )
        if pending is None:
            event.data = without_secrets(event.type, event.data)
    await session.flush()


def emit(session: AsyncSession, project_id: str, event_type: str, data: Any) -> None:
    session.add(OutboxEvent(id=new_id("evt"), project_id=project_id, type=event_type, data=data))


def _audited_event(entry: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The webhook event of an audited change (its type and data), if its action has one."""
    event_type = AUDIT_TO_WEBHOOK.get(entry["action"])
    if event_type is None:
        return None
    return event_type, {
        "action": entry["action"],
        "resource": {"type": entry["resource_type"], "key": entry["resource_key"]},
        "environment": entry["environment"],
        "actor": entry["actor"],
        "auditId": entry["id"],
        "before": entry["before"],
        "after": entry["after"],
    }


AUDITED = (  # the audit entry's columns its event says
    "id",
    "action",
    "resource_type",
    "resource_key",
    "environment",
    "actor",
    "before",
    "after",
)


def emit_audited(session: AsyncSession, entry: AuditEntry) -> None:
    """The webhook event of an audited change, if its action has one."""
    event = _audited_event({column: getattr(entry, column) for column in AUDITED})
    if event is not None:
        emit(session, entry.project_id, *event)


async def emit_audited_rows(
    session: AsyncSession, project_id: str, entries: list[dict[str, Any]]
) -> None:
    """The webhook events of many audited changes (``Scope.write_audits``), in one statement.
    None while the project has no webhook: the dispatcher sends an event only to webhooks that
    existed when it was written (``dispatcher.fan_out``), so it would drop every one of them
    (a project's writes are serialised, so no webhook can be added meanwhile)."""
    if not await session.scalar(select(exists().where(Webhook.project_id == project_id))):
        return
    rows = [
        {"id": new_id("evt"), "project_id": project_id, "type": event[0], "data": event[1]}
        for event in map(_audited_event, entries)
        if event is not None
    ]
    if rows:
        await session.execute(insert(OutboxEvent), rows)


OUTBOX = Hooks(audited=emit_audited, announced=emit, audited_rows=emit_audited_rows)
"""The hooks every unit of work is given (``Scope.hooks``): audited changes and announcements
become outbox rows in the same transaction."""
