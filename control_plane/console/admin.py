"""Segments, metrics, environments, keys, webhooks and the audit log: each a list, a create form
and its few actions, every one through the domain's service as the API calls it."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Controller, Request, get, post
from litestar.di import Provide
from litestar.params import FromPath
from litestar.response import Response, Template

from control_plane.access import ROLE_NAMES, Permission
from control_plane.console import forms, proposals
from control_plane.console.diff import history
from control_plane.console.pages import ListPage, write_or_show
from control_plane.console.web import Who, error_page, field_errors, page, provide_signed, reading
from control_plane.db.models import Environment
from control_plane.domain.audit import services as audit
from control_plane.domain.changes import schemas as change_s
from control_plane.domain.common import Scope
from control_plane.domain.environments import schemas as env_s
from control_plane.domain.environments import services as environments
from control_plane.domain.keys import schemas as key_s
from control_plane.domain.keys import services as keys
from control_plane.domain.metrics import schemas as metric_s
from control_plane.domain.metrics import services as metrics
from control_plane.domain.paging import MAX_LIMIT
from control_plane.domain.segments import schemas as seg_s
from control_plane.domain.segments import services as segments
from control_plane.domain.webhooks import schemas as hook_s
from control_plane.domain.webhooks import services as webhooks
from control_plane.errors import ApiError, invalid

PAGE_SIZE = 50
AGGREGATIONS = ("conversion", "count", "sum", "mean", "ratio", "quantile")


def _number(text: str | None) -> float | None:
    """A number typed in a form (``None`` when it is not one: the API then names the field)."""
    try:
        return float((text or "").strip())
    except ValueError:
        return None


def _part(form: Any, side: str) -> metric_s.PartAggregation:
    """A ratio's side: ``sum`` of value or ``count`` of events, as the form's select says."""
    return "count" if forms.text(form, side) == "count" else "sum"


KINDS = ("management", "server", "relay", "public")


def _known_role(role: str) -> None:
    """A role as the API's body reads it (a form may send anything): else the API's 422."""
    if role not in ROLE_NAMES:
        raise invalid("role", f"one of {', '.join(ROLE_NAMES)}")


CONTEXT_LISTS = ("includedContexts", "excludedContexts")


def _lines(text: str | None) -> list[str]:
    return [line.strip() for line in (text or "").splitlines() if line.strip()]


def _renumbered(field: str, listed: dict[str, tuple[list[forms.KeysForm], list[int]]]) -> str:
    """An error about the k-th item of a list sent, named as the form's row it came from."""
    for name, (_, positions) in listed.items():
        field = forms.renumbered(field, name, positions)
    return field


async def _guarding(scope: Scope, key: str) -> Environment | None:
    """The protected environment requiring the most approvals where a live flag uses segment
    ``key`` (None: its changes are saved at once)."""
    return await proposals.most_demanding(scope, await segments.environments_using(scope, key))


class SegmentPages(ListPage):
    path = "/console/segments"
    template = "segments.html"
    title = "Segments"

    async def context(self, scope: Scope, request: Request[Any, Any, Any]) -> dict[str, Any]:
        found = await segments.list_segments(
            scope, limit=PAGE_SIZE, cursor=request.query_params.get("cursor") or None
        )
        used = {seg.key: await segments.flags_using(scope, seg.key) for seg in found.items}
        return {"segments": found.items, "used": used, "next_cursor": found.next_cursor}

    @get("/")
    async def segments(self, request: Request[Any, Any, Any], who: Who) -> Template:
        return await self.listing(request, who)

    @post("/")
    async def create(self, request: Request[Any, Any, Any], who: Who) -> Response[Any]:
        form = await request.form()
        body = seg_s.SegmentCreate(
            key=forms.text(form, "key").strip(),
            name=forms.text(form, "name").strip() or None,
            included=_lines(forms.text(form, "included")),
            excluded=_lines(forms.text(form, "excluded")),
        )
        return await self.write(
            request,
            who,
            lambda scope: segments.create_segment(scope, body),
            done=lambda created: f"/console/segments/{created.key}",
            form=form,
        )

    @get("/{key:str}")
    async def segment(
        self, request: Request[Any, Any, Any], who: Who, key: FromPath[str]
    ) -> Template:
        return await self._show(request, who, key)

    async def _show(
        self, request: Request[Any, Any, Any], who: Who, key: str, status: int = 200, **extra: Any
    ) -> Template:
        async with reading(request, who) as scope:
            try:
                found = await segments.get_segment(scope, key)
            except ApiError as exc:
                return error_page(request, who, exc, key)
            used = await segments.flags_using(scope, key)
            guarding = await _guarding(scope, key)
            pending = []
            if guarding is not None:
                pending = await proposals.open_requests(
                    scope, None, lambda change: change.segment == key
                )
        typed = extra.pop("rule_forms", None)
        rows = extra.pop("context_rows", None) or {
            "includedContexts": forms.context_rows(found.included_contexts),
            "excludedContexts": forms.context_rows(found.excluded_contexts),
        }
        return page(
            request,
            who,
            "segment.html",
            status=status,
            title=key,
            segment=found,
            typed=extra.pop("typed", None),  # name, description, members as typed
            used=used,
            guarding=guarding,
            pending_requests=pending,
            rule_forms=typed if typed is not None else forms.segment_rules_from_api(found.rules),
            context_rows=rows,
            operators=forms.OPERATORS,
            **extra,
        )

    @post("/{key:str}")
    async def save(
        self, request: Request[Any, Any, Any], who: Who, key: FromPath[str]
    ) -> Response[Any]:
        form = await request.form()
        typed = forms.rules_from_form(form)
        action = forms.text(form, "action") or "save"
        as_typed = {
            name: forms.text(form, name) for name in ("name", "description", "included", "excluded")
        }
        # keys of other kinds: a row per kind; a row with no key lists nothing
        rows = {name: forms.groups_from_form(form, name) for name in CONTEXT_LISTS}
        listed = {name: forms.listing(typed_rows) for name, typed_rows in rows.items()}
        if action != "save":  # an editor button: show the segment as edited, save nothing
            return await self._show(
                request,
                who,
                key,
                rule_forms=forms.edit_rules(typed, action),
                typed=as_typed,
                context_rows=rows,
            )
        body = seg_s.SegmentPatch(
            name=forms.text(form, "name").strip() or msgspec.UNSET,
            description=forms.text(form, "description"),
            included=_lines(forms.text(form, "included")),
            excluded=_lines(forms.text(form, "excluded")),
            included_contexts=forms.contexts_in(listed["includedContexts"][0]),
            excluded_contexts=forms.contexts_in(listed["excludedContexts"][0]),
            rules=[forms.segment_rule_in(rule) for rule in typed],
        )

        async def save(scope: Scope) -> seg_s.Segment | change_s.ChangeRequest:
            """Saved; or, where a flag of a protected environment uses the segment, proposed as
            a change request of the same body in the most demanding such environment."""
            guarding = await _guarding(scope, key)
            if guarding is None:
                return await segments.patch_segment(scope, key, body)
            return await proposals.propose(
                scope,
                guarding.key,
                form,
                change_s.ChangeIn(segment=key, patch=body),
                live_version=(await segments.get_segment(scope, key)).version,
                title=f"Change segment {key} in {guarding.key}",
            )

        async def shown(error: ApiError) -> Response[Any]:
            error = proposals.unprefixed(error)
            message = (
                error.message
                if error.status != 412
                else (
                    "Not saved: someone changed this segment since you opened it. Nothing was "
                    "overwritten; the form shows what is stored now."
                )
            )
            first = error.details[0].field if error.details else None
            if first is not None and message.startswith(first + ":"):  # "field: why", renamed
                message = _renumbered(first, listed) + message[len(first) :]
            stale = error.status == 412  # show what is stored now; else what was typed
            return await self._show(
                request,
                who,
                key,
                error.status,
                error=message,
                errors={
                    _renumbered(field, listed): why
                    for field, why in field_errors(error.details).items()
                },
                rule_forms=None if stale else typed,
                typed=None if stale else as_typed,
                context_rows=None if stale else rows,
            )

        return await write_or_show(
            request,
            who,
            save,
            done=proposals.review_or(f"/console/segments/{key}"),
            shown=shown,
            version=forms.text(form, "version"),
        )


class MetricPages(ListPage):
    path = "/console/metrics"
    template = "metrics.html"
    title = "Metrics"

    async def context(self, scope: Scope, request: Request[Any, Any, Any]) -> dict[str, Any]:
        cursor = request.query_params.get("cursor") or None
        found = await metrics.list_metrics(scope, limit=PAGE_SIZE, cursor=cursor, event=None)
        return {"metrics": found.items, "next_cursor": found.next_cursor}

    @get("/")
    async def metrics(self, request: Request[Any, Any, Any], who: Who) -> Template:
        return await self.listing(request, who)

    @post("/")
    async def create(self, request: Request[Any, Any, Any], who: Who) -> Response[Any]:
        form = await request.form()
        aggregation = forms.text(form, "aggregation") or "conversion"
        event = forms.text(form, "event").strip()
        numerator = denominator = None
        if aggregation == "ratio":  # the event is the numerator's
            numerator = metric_s.RatioPart(event=event, aggregation=_part(form, "numerator"))
            denominator = metric_s.RatioPart(
                event=forms.text(form, "denominator_event").strip(),
                aggregation=_part(form, "denominator"),
            )
        body = metric_s.MetricCreate(
            name=forms.text(form, "name").strip(),
            event=None if aggregation == "ratio" else event,
            aggregation=aggregation if aggregation in AGGREGATIONS else "conversion",  # type: ignore[arg-type]
            direction="lower" if forms.text(form, "direction") == "lower" else "higher",
            currency=forms.text(form, "currency").strip() or None,
            numerator=numerator,
            denominator=denominator,
            quantile=_number(forms.text(form, "quantile")) if aggregation == "quantile" else None,
        )
        return await self.write(
            request,
            who,
            lambda scope: metrics.create_metric(scope, body),
            done=lambda _: "/console/metrics",
            form=form,
        )


class EnvironmentPages(ListPage):
    path = "/console/environments"
    template = "environments.html"
    title = "Environments"

    async def context(self, scope: Scope, request: Request[Any, Any, Any]) -> dict[str, Any]:
        found = await environments.list_environments(scope, limit=MAX_LIMIT, cursor=None)
        return {
            "environments": found.items,
            "max_approvals": env_s.MAX_APPROVALS,
        }

    @get("/")
    async def environments(self, request: Request[Any, Any, Any], who: Who) -> Template:
        return await self.listing(request, who)

    @post("/")
    async def create(self, request: Request[Any, Any, Any], who: Who) -> Response[Any]:
        form = await request.form()
        body = env_s.EnvironmentCreate(
            key=forms.text(form, "key").strip(),
            name=forms.text(form, "name").strip() or None,
            copy_from=forms.text(form, "copyFrom") or None,
            critical=forms.text(form, "critical") == "on",
        )
        return await self.write(
            request,
            who,
            lambda scope: environments.create_environment(scope, body),
            done=lambda _: "/console/environments",
            form=form,
        )

    @post("/{key:str}/critical")
    async def critical(
        self, request: Request[Any, Any, Any], who: Who, key: FromPath[str]
    ) -> Response[Any]:
        form = await request.form()
        body = env_s.EnvironmentPatch(critical=forms.text(form, "critical") == "true")
        return await self.write(
            request,
            who,
            lambda scope: environments.patch_environment(scope, key, body),
            done=lambda _: "/console/environments",
            version=forms.text(form, "version"),
        )

    @post("/{key:str}/approvals")
    async def approvals(
        self, request: Request[Any, Any, Any], who: Who, key: FromPath[str]
    ) -> Response[Any]:
        """How many approvals a change there needs (0: none, the environment is not protected)."""
        form = await request.form()
        wanted = forms.text(form, "requiredApprovals").strip()
        body = env_s.EnvironmentPatch(required_approvals=int(wanted) if wanted.isdigit() else -1)
        return await self.write(
            request,
            who,
            lambda scope: environments.patch_environment(scope, key, body),
            done=lambda _: "/console/environments",
            version=forms.text(form, "version"),
        )

    @post("/{key:str}/delete")
    async def delete(
        self, request: Request[Any, Any, Any], who: Who, key: FromPath[str]
    ) -> Response[Any]:
        form = await request.form()
        if forms.text(form, "confirm") != key:
            message = f"Type the environment's key ({key}) to delete it."
            return await self.listing(request, who, 422, error=message)
        revoke = keys.revoke_key if forms.text(form, "revokeKeys") == "on" else None
        return await self.write(
            request,
            who,
            lambda scope: environments.delete_environment(scope, key, revoke=revoke),
            done=lambda _: "/console/environments",
        )


class KeyPages(ListPage):
    path = "/console/keys"
    template = "keys.html"
    title = "Keys"

    async def context(self, scope: Scope, request: Request[Any, Any, Any]) -> dict[str, Any]:
        found = await keys.list_keys(
            scope,
            limit=PAGE_SIZE,
            cursor=request.query_params.get("cursor") or None,
            include_revoked=request.query_params.get("revoked") == "yes",
            kind=None,
            environment=None,
        )
        envs = (await environments.list_environments(scope, limit=MAX_LIMIT, cursor=None)).items
        return {
            "keys": found.items,
            "environments": envs,
            "next_cursor": found.next_cursor,
            "roles": ROLE_NAMES,
        }

    @get("/")
    async def keys(self, request: Request[Any, Any, Any], who: Who) -> Template:
        return await self.listing(request, who)

    @post("/")
    async def create(self, request: Request[Any, Any, Any], who: Who) -> Response[Any]:
        form = await request.form()
        kind = forms.text(form, "kind")
        # the role is a management key's alone (its select is in the management keys' fieldset,
        # which the page's script disables for other kinds): another kind's key gets the API's
        # default; a ticked "may turn off" is sent whatever the kind, and refused as the API does
        management = kind == "management"
        role = forms.text(form, "role") if management else "admin"
        body = key_s.KeyCreate(
            kind=kind if kind in KINDS else "public",  # type: ignore[arg-type]
            name=forms.text(form, "name").strip(),
            environment=forms.text(form, "environment") or None,
            origins=_lines(forms.text(form, "origins")),
            role=role,  # type: ignore[arg-type]
            may_turn_off=forms.text(form, "mayTurnOff") == "on",
        )

        async def create(scope: Scope) -> key_s.CreatedKey:
            _known_role(role)
            return await keys.create_key(scope, body)

        # no redirect: the new key's secret is shown on this answer, once
        return await self.write(request, who, create, done=None, form=form)

    @post("/{key_id:str}")
    async def update(
        self, request: Request[Any, Any, Any], who: Who, key_id: FromPath[str]
    ) -> Response[Any]:
        """A management key's role and "may turn off" grant, as ``PATCH /keys/{id}`` sets them."""
        form = await request.form()
        role = forms.text(form, "role")
        body = key_s.KeyPatch(role=role, may_turn_off=forms.text(form, "mayTurnOff") == "on")  # type: ignore[arg-type]

        async def change(scope: Scope) -> key_s.Key:
            _known_role(role)
            return await keys.patch_key(scope, key_id, body)

        return await self.write(request, who, change, done=lambda _: "/console/keys")

    @post("/{key_id:str}/revoke")
    async def revoke(
        self, request: Request[Any, Any, Any], who: Who, key_id: FromPath[str]
    ) -> Response[Any]:
        return await self.write(
            request,
            who,
            lambda scope: keys.revoke_key(scope, key_id),
            done=lambda _: "/console/keys",
        )


class WebhookPages(ListPage):
    path = "/console/webhooks"
    template = "webhooks.html"
    title = "Webhooks"

    async def context(self, scope: Scope, request: Request[Any, Any, Any]) -> dict[str, Any]:
        found = await webhooks.list_webhooks(scope, limit=PAGE_SIZE, cursor=None)
        return {"webhooks": found.webhooks}

    @get("/")
    async def webhooks(self, request: Request[Any, Any, Any], who: Who) -> Template:
        return await self.listing(request, who)

    @post("/")
    async def create(self, request: Request[Any, Any, Any], who: Who) -> Response[Any]:
        form = await request.form()
        body = hook_s.WebhookCreate(
            url=forms.text(form, "url").strip(),
            events=[e.strip() for e in (forms.text(form, "events") or "*").split(",") if e.strip()],
            description=forms.text(form, "description"),
        )
        policy = request.app.state.settings.webhook_private
        # no redirect: the signing secret is shown on this answer, once
        return await self.write(
            request,
            who,
            lambda scope: webhooks.create_webhook(scope, body, policy),
            done=None,
            form=form,
        )

    @get("/{webhook_id:str}")
    async def deliveries(
        self, request: Request[Any, Any, Any], who: Who, webhook_id: FromPath[str]
    ) -> Template:
        return await self._deliveries(request, who, webhook_id)

    async def _deliveries(
        self,
        request: Request[Any, Any, Any],
        who: Who,
        webhook_id: str,
        status: int = 200,
        **extra: Any,
    ) -> Template:
        async with reading(request, who) as scope:
            try:
                hook = await webhooks.get_webhook(scope, webhook_id)
                found = (  # an admin's, as the API's are
                    await webhooks.deliveries(
                        scope, webhook_id, status=None, limit=PAGE_SIZE, cursor=None
                    )
                    if scope.holds(Permission.ADMIN)
                    else None
                )
            except ApiError as exc:
                return error_page(request, who, exc, "Webhook")
        return page(
            request,
            who,
            "webhook.html",
            status=status,
            title="Webhook",
            webhook=hook,
            deliveries=found.deliveries if found is not None else None,
            **extra,
        )

    @post("/{webhook_id:str}/deliveries/{delivery_id:str}/redeliver")
    async def redeliver(
        self,
        request: Request[Any, Any, Any],
        who: Who,
        webhook_id: FromPath[str],
        delivery_id: FromPath[str],
    ) -> Response[Any]:
        return await write_or_show(
            request,
            who,
            lambda scope: webhooks.redeliver(scope, webhook_id, delivery_id),
            done=lambda _: f"/console/webhooks/{webhook_id}",
            shown=lambda error: self._deliveries(
                request, who, webhook_id, error.status, error=error.message
            ),
        )


class AuditPages(Controller):
    path = "/console/audit"
    dependencies = {"who": Provide(provide_signed)}
    include_in_schema = False

    @get("/")
    async def audit(self, request: Request[Any, Any, Any], who: Who) -> Template:
        query = request.query_params
        where = audit.AuditFilter(
            resource_type=query.get("type") or None,
            resource_key=query.get("key") or None,
            action=query.get("action") or None,
        )
        async with reading(request, who) as scope:
            try:
                found = await audit.entries(
                    scope, where, limit=PAGE_SIZE, cursor=query.get("cursor") or None
                )
            except ApiError as exc:
                return error_page(request, who, exc, "Audit")
        items = history(found.entries)
        return page(
            request,
            who,
            "audit.html",
            title="Audit log",
            items=items,
            next_cursor=found.next_cursor,
            filters={
                "type": query.get("type", ""),
                "key": query.get("key", ""),
                "action": query.get("action", ""),
            },
        )


__all__ = [
    "AuditPages",
    "EnvironmentPages",
    "KeyPages",
    "MetricPages",
    "SegmentPages",
    "WebhookPages",
]
