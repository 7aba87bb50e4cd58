"""The flags list and the flag page: toggles, settings, rules, targets, "evaluate as", history.

Each form posts to a handler that calls the flags service the API's handler calls, inside the
API's unit of work; an ``ApiError`` comes back as the same page with the API's message beside the
field it names, and a stale version (412) as the conflict with what changed meanwhile.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from litestar import Request, get, post
from litestar.datastructures import FormMultiDict
from litestar.params import FromPath
from litestar.response import Response, Template

from control_plane.console import forms, proposals
from control_plane.console.diff import history as _history
from control_plane.console.pager import SIZES, Pager, number_of, size_of
from control_plane.console.pages import ListPage, write_or_show
from control_plane.console.web import (
    FRAGMENT,
    Who,
    back_to,
    error_page,
    field_errors,
    page,
    reading,
)
from control_plane.domain.audit import services as audit
from control_plane.domain.changes import schemas as changes_s
from control_plane.domain.coderefs import services as coderefs
from control_plane.domain.common import Scope
from control_plane.domain.environments import services as environments
from control_plane.domain.flags import reads, services
from control_plane.domain.flags import schemas as s
from control_plane.domain.flags import settings as flag_settings
from control_plane.domain.metrics import flag_metrics
from control_plane.domain.paging import MAX_LIMIT
from control_plane.domain.protection import protected
from control_plane.domain.schedules import schemas as schedules_s
from control_plane.domain.schedules import services as schedules
from control_plane.domain.segments import services as segments
from control_plane.errors import ApiError, FieldError

PREREQUISITE_ROWS = 3  # rows of the prerequisites form (one more than a flag usually has)


async def _environments(scope: Scope) -> list[Any]:
    return (await environments.list_environments(scope, limit=MAX_LIMIT, cursor=None)).items


def _filters(request: Request[Any, Any, Any]) -> dict[str, str]:
    names = ("q", "tag", "type", "temporary", "stale", "archived")
    return {name: request.query_params.get(name, "") for name in names}


def _flag_filter(filters: dict[str, str]) -> reads.FlagFilter:
    temporary = {"yes": True, "no": False}.get(filters["temporary"])
    stale = int(filters["stale"]) if filters["stale"].isdigit() else None
    archived = filters["archived"] if filters["archived"] in ("true", "only") else "false"
    flag_type = (
        filters["type"] if filters["type"] in ("boolean", "string", "number", "json") else None
    )
    return reads.FlagFilter(
        archived=archived,  # type: ignore[arg-type]
        q=filters["q"] or None,
        tag=filters["tag"] or None,
        type=flag_type,
        temporary=temporary,
        stale_days=stale,
    )


class FlagPages(ListPage):
    path = "/console/flags"
    template = "flags.html"
    title = "Flags"

    async def context(self, scope: Scope, request: Request[Any, Any, Any]) -> dict[str, Any]:
        """The flags list's page: the flags of the page asked for (``page``, ``size``) under the
        filters given, the environments (a column each) and the pager."""
        filters = _filters(request)
        where = _flag_filter(filters)
        pager = Pager(
            "/console/flags",
            filters,
            total=await reads.count_flags(scope, where),
            size=size_of(request.query_params.get("size", "")),
            asked=number_of(request.query_params.get("page", "")),
        )
        found = await reads.list_flags(
            scope, where, limit=pager.size, cursor=None, offset=pager.offset
        )
        return {
            "flags": found.items,
            "environments": await _environments(scope),
            "filters": filters,
            "pager": pager,
            "sizes": SIZES,
        }

    @get("/")
    async def flags(self, request: Request[Any, Any, Any], who: Who) -> Template:
        async with reading(request, who) as scope:
            try:
                listing = await self.context(scope, request)
            except ApiError as exc:
                return error_page(request, who, exc, "Flags")
        template = "flags_main.html" if request.headers.get(FRAGMENT) else self.template
        return page(request, who, template, title=self.title, **listing)

    @post("/")
    async def create(self, request: Request[Any, Any, Any], who: Who) -> Response[Any]:
        form = await request.form()
        flag_type = forms.text(form, "type") or "boolean"
        lines = [
            line.strip() for line in forms.text(form, "variations").splitlines() if line.strip()
        ]
        variations = None
        if flag_type != "boolean" or lines:
            variations = [s.VariationIn(value=_typed(flag_type, line)) for line in lines]
        body = s.FlagCreate(
            key=forms.text(form, "key").strip(),
            name=forms.text(form, "name").strip() or None,
            description=forms.text(form, "description"),
            type=flag_type if flag_type in ("boolean", "string", "number", "json") else "boolean",  # type: ignore[arg-type]
            variations=variations,
            temporary=forms.text(form, "temporary") == "on",
            tags=[t.strip() for t in forms.text(form, "tags").split(",") if t.strip()],
            client_side=forms.text(form, "clientSide") == "on",
        )
        return await self.write(
            request,
            who,
            lambda scope: services.create_flag(scope, body),
            done=lambda created: f"/console/flags/{created.key}",
            form=form,
        )

    @get("/{key:str}")
    async def flag(self, request: Request[Any, Any, Any], who: Who, key: FromPath[str]) -> Template:
        async with reading(request, who) as scope:
            try:
                context = await _flag_context(scope, key, request.query_params.get("env"))
            except ApiError as exc:
                return error_page(request, who, exc, key)
        template = "flag_main.html" if request.headers.get(FRAGMENT) else "flag.html"
        return page(request, who, template, title=key, **context)

    @post("/{key:str}/environments/{env:str}/toggle")
    async def toggle(
        self, request: Request[Any, Any, Any], who: Who, key: FromPath[str], env: FromPath[str]
    ) -> Response[Any]:
        form = await request.form()
        if not forms.text(form, "version") and request.query_params.get("version"):
            # a switch of the flags list: the list is one form, each switch's version is in the
            # address it sends that form to (its formaction)
            form = FormMultiDict(
                [*form.multi_items(), ("version", request.query_params["version"])]
            )
        enabled = forms.text(form, "enabled") == "true"
        async with reading(request, who) as scope:
            try:
                environment = await scope.environment(env)
            except ApiError as exc:
                return error_page(request, who, exc, key)
        back = back_to(request, f"/console/flags/{key}?env={env}")
        if enabled and protected(environment):
            # turning on where approvals are required is proposed, never done at once
            settings = s.EnvironmentSettingsIn(enabled=True)
            return await self._propose_or_write(
                request, who, key, env, form, "toggle", settings=settings, title=f"Turn {key} on"
            )
        if environment.critical and forms.text(form, "confirm") != "yes":
            return page(
                request,
                who,
                "confirm.html",
                title="Confirm",
                flag=key,
                environment=env,
                enabled=enabled,
                version=forms.text(form, "version"),
                back=back,
            )
        return await write_or_show(
            request,
            who,
            lambda scope: flag_settings.toggle(scope, key, env, enabled),
            done=lambda _: back,
            shown=lambda error: self._failed(request, who, key, env, error, "toggle"),
            version=forms.text(form, "version"),
        )

    @post("/{key:str}/environments/{env:str}/settings")
    async def settings(
        self, request: Request[Any, Any, Any], who: Who, key: FromPath[str], env: FromPath[str]
    ) -> Response[Any]:
        form = await request.form()
        weights = {
            int(name[len("weights[") : -1]): value
            for name, value in form.items()
            if name.startswith("weights[") and name[len("weights[") : -1].isdigit()
        }
        off = forms.text(form, "offVariation")
        body = s.EnvironmentSettingsIn(
            off_variation=int(off) if off.lstrip("-").isdigit() else -1,
            fallthrough=forms.serve_in(
                forms.text(form, "fallthrough"),
                weights,
                forms.text(form, "bucketBy"),
                forms.text(form, "contextKind"),
            ),
        )
        return await self._propose_or_write(
            request, who, key, env, form, "settings", settings=body, typed=dict(form)
        )

    @post("/{key:str}/environments/{env:str}/targets")
    async def targets(
        self, request: Request[Any, Any, Any], who: Who, key: FromPath[str], env: FromPath[str]
    ) -> Response[Any]:
        form = await request.form()
        # each row: a kind (blank: users), the variation, its keys; a row with no key says nothing
        rows, positions = forms.listing(forms.groups_from_form(form, "targets"))
        body = s.EnvironmentSettingsIn(targets=forms.targets_in(rows))
        return await self._propose_or_write(
            request,
            who,
            key,
            env,
            form,
            "targets",
            settings=body,
            typed=dict(form),
            rename=lambda name: forms.renumbered(name, "targets", positions),
        )

    @post("/{key:str}/environments/{env:str}/prerequisites")
    async def prerequisites(
        self, request: Request[Any, Any, Any], who: Who, key: FromPath[str], env: FromPath[str]
    ) -> Response[Any]:
        form = await request.form()
        wanted = []
        for i in range(PREREQUISITE_ROWS):
            flag_key = forms.text(form, f"prerequisites[{i}].key").strip()
            variation = forms.text(form, f"prerequisites[{i}].variation").strip()
            if flag_key:
                number = int(variation) if variation.lstrip("-").isdigit() else -1
                wanted.append(s.PrerequisiteIn(key=flag_key, variation=number))
        body = s.EnvironmentSettingsIn(prerequisites=wanted)
        return await self._propose_or_write(
            request, who, key, env, form, "prerequisites", settings=body, typed=dict(form)
        )

    @post("/{key:str}/environments/{env:str}/rules")
    async def rules(
        self, request: Request[Any, Any, Any], who: Who, key: FromPath[str], env: FromPath[str]
    ) -> Response[Any]:
        form = await request.form()
        typed = forms.rules_from_form(form)
        action = forms.text(form, "action") or "save"
        if action != "save":  # an editor button: show the rules as edited, save nothing
            async with reading(request, who) as scope:
                context = await _flag_context(scope, key, env)
            context["rule_forms"] = forms.edit_rules(typed, action)
            context["rules_version"] = forms.text(form, "version") or context["rules_version"]
            return page(request, who, "flag.html", title=key, **context)
        return await self._propose_or_write(
            request,
            who,
            key,
            env,
            form,
            "rules",
            rules=[rule.to_api() for rule in typed],
            rule_forms=typed,
        )

    @post("/{key:str}/environments/{env:str}/schedules")
    async def schedule(
        self, request: Request[Any, Any, Any], who: Who, key: FromPath[str], env: FromPath[str]
    ) -> Response[Any]:
        form = await request.form()
        at = _instant(forms.text(form, "at"))
        if at is None:  # refused as the API refuses it, before anything is written
            missing = ApiError(
                422, "at: a date and time", details=[FieldError("at", "a date and time (UTC)")]
            )
            return await self._failed(request, who, key, env, missing, "schedules", dict(form))
        body = schedules_s.ScheduleIn(at=at, enabled=forms.text(form, "enabled") == "true")
        return await write_or_show(
            request,
            who,
            lambda scope: schedules.create(scope, key, env, body),
            done=lambda _: f"/console/flags/{key}?env={env}#schedules",
            shown=lambda error: self._failed(
                request, who, key, env, error, "schedules", dict(form)
            ),
        )

    @post("/{key:str}/environments/{env:str}/schedules/{schedule_id:str}/cancel")
    async def cancel_schedule(
        self,
        request: Request[Any, Any, Any],
        who: Who,
        key: FromPath[str],
        env: FromPath[str],
        schedule_id: FromPath[str],
    ) -> Response[Any]:
        return await write_or_show(
            request,
            who,
            lambda scope: schedules.cancel(scope, key, env, schedule_id),
            done=lambda _: f"/console/flags/{key}?env={env}#schedules",
            shown=lambda error: self._failed(request, who, key, env, error, "schedules"),
        )

    @post("/{key:str}/evaluate")
    async def evaluate(
        self, request: Request[Any, Any, Any], who: Who, key: FromPath[str]
    ) -> Template:
        form = await request.form()
        env = forms.text(form, "env")
        text = forms.text(form, "context")
        context_value, problem = forms.context_of(text)
        async with reading(request, who) as scope:
            context = await _flag_context(scope, key, env)
            result = None
            if context_value is not None:
                try:
                    result = await reads.preview(scope, key, env, context_value)
                except ApiError as exc:
                    problem = exc.message
        return page(
            request,
            who,
            "flag.html",
            title=key,
            evaluated=result,
            evaluate_error=problem,
            evaluate_context=text,
            **context,
        )

    @post("/{key:str}/archive")
    async def archive(
        self, request: Request[Any, Any, Any], who: Who, key: FromPath[str]
    ) -> Response[Any]:
        form = await request.form()
        restore = forms.text(form, "restore") == "yes"

        async def work(scope: Scope) -> Any:
            guarding = await proposals.most_demanding(scope)
            if guarding is not None:  # archiving changes what every environment serves
                return await proposals.propose(
                    scope,
                    guarding.key,
                    form,
                    changes_s.ChangeIn(flag=key, archived=not restore),
                    live_version=(await reads.get_flag(scope, key)).version,
                    title=f"{'Restore' if restore else 'Archive'} {key}",
                )
            if restore:
                return await services.restore_flag(scope, key)
            return await services.archive_flag(scope, key)

        return await write_or_show(
            request,
            who,
            work,
            done=proposals.review_or(f"/console/flags/{key}"),
            shown=lambda error: self._failed(
                request, who, key, None, proposals.unprefixed(error), "archive"
            ),
            version=forms.text(form, "version"),
        )

    async def _propose_or_write(
        self,
        request: Request[Any, Any, Any],
        who: Who,
        key: str,
        env: str,
        form: Any,
        form_name: str,
        *,
        settings: s.EnvironmentSettingsIn | None = None,
        rules: list[s.RuleIn] | None = None,
        typed: dict[str, Any] | None = None,
        rule_forms: list[forms.RuleForm] | None = None,
        title: str = "",
        rename: Callable[[str], str] | None = None,
    ) -> Response[Any]:
        """A form of the flag page: written at once, or, in an environment that requires
        approvals, proposed as a change request of the same body (then its review page)."""

        async def work(scope: Scope) -> changes_s.ChangeRequest | None:
            environment = await scope.environment(env)
            if protected(environment):
                # based on the flag setting the form was shown
                return await proposals.propose(
                    scope,
                    env,
                    form,
                    changes_s.ChangeIn(flag=key, settings=settings, rules=rules),
                    live_version=(await reads.get_settings(scope, key, env)).version,
                    title=f"{title or f'Change {key}'} in {env}",
                )
            if settings is not None:
                await flag_settings.put_settings(scope, key, env, settings)
            if rules is not None:
                await flag_settings.put_rules(scope, key, env, s.RulesIn(rules=rules))
            return None

        anchor = {"rules": "#rules", "prerequisites": "#prerequisites"}.get(form_name, "")
        return await write_or_show(
            request,
            who,
            work,
            done=proposals.review_or(f"/console/flags/{key}?env={env}{anchor}"),
            shown=lambda error: self._failed(
                request,
                who,
                key,
                env,
                proposals.unprefixed(error, rename),
                form_name,
                typed,
                rule_forms,
            ),
            version=forms.text(form, "version"),
        )

    async def _failed(
        self,
        request: Request[Any, Any, Any],
        who: Who,
        key: str,
        env: str | None,
        exc: ApiError,
        form_name: str,
        typed: dict[str, Any] | None = None,
        rule_forms: list[forms.RuleForm] | None = None,
    ) -> Template:
        """The flag page again, with the API's error beside the fields it names; a stale version
        (412) shows what changed meanwhile, and nothing was written."""
        async with reading(request, who) as scope:
            try:
                context = await _flag_context(scope, key, env)
            except ApiError as missing:
                return error_page(request, who, missing, key)
        if rule_forms is not None and exc.status != 412:
            context["rule_forms"] = rule_forms
        if form_name == "targets" and typed and exc.status != 412:
            context["target_rows"] = forms.groups_from_form(typed, "targets")  # as typed
        return page(
            request,
            who,
            "flag.html",
            status=exc.status,
            title=key,
            error={
                "form": form_name,
                "message": exc.message,
                "status": exc.status,
                "fields": field_errors(exc.details),
                "current": exc.current_version,
            },
            typed=typed or {},
            **context,
        )


def _instant(text: str) -> datetime | None:
    """A ``datetime-local`` input's value (or ISO 8601), read as UTC."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _typed(flag_type: str, line: str) -> Any:
    """A variation value as typed: numbers and JSON parsed for those types."""
    if flag_type in ("number", "json"):
        try:
            return json.loads(line)
        except ValueError:
            return line  # the API names the field and says what it must be
    return line


async def _flag_context(scope: Scope, key: str, env: str | None) -> dict[str, Any]:
    flag = await reads.get_flag(scope, key)
    envs = await _environments(scope)
    keys = [e.key for e in envs]
    current: str = env if env is not None and env in keys else (keys[0] if keys else "")
    settings = await reads.get_settings(scope, key, current)
    rules = await reads.get_rules(scope, key, current)
    segment_keys = [
        seg.key for seg in (await segments.list_segments(scope, limit=MAX_LIMIT, cursor=None)).items
    ]
    history = await audit.entries(
        scope, audit.AuditFilter(resource_type="flag", resource_key=key), limit=20, cursor=None
    )
    planned = await schedules.list_schedules(scope, key, current, None, limit=50, cursor=None)
    references = await coderefs.refs_of_flag(scope, key)
    attached = await flag_metrics.flag_metric_keys(scope, key)
    prerequisites = [{"key": p.key, "variation": p.variation} for p in settings.prerequisites]
    prerequisites += [{"key": "", "variation": ""}] * max(0, PREREQUISITE_ROWS - len(prerequisites))
    environment = next((e for e in envs if e.key == current), None)
    required = environment.required_approvals if environment is not None else 0
    pending = []
    if required:
        pending = await proposals.open_requests(scope, current, lambda change: change.flag == key)
    return {
        "flag": flag,
        "environments": envs,
        "env": current,
        "required_approvals": required,
        # archiving changes what every environment serves: proposed where any is protected
        "guarded_anywhere": any(e.required_approvals > 0 for e in envs),
        "pending_requests": pending,
        "critical": next((e.critical for e in envs if e.key == current), False),
        "settings": settings,
        "fallthrough": forms.serve_form(settings.fallthrough),
        "rules_version": rules.version,
        "rule_forms": forms.rules_from_api(rules.rules),
        "operators": forms.OPERATORS,
        "segments": segment_keys,
        "target_rows": forms.target_rows(settings.targets, [v.idx for v in flag.variations]),
        "prerequisites": prerequisites,
        "schedules": planned.items,
        "references": references.references,
        "attached_metrics": attached,
        "history": _history(history.entries),
        "example_context": json.dumps({"key": "user-1"}),
    }
