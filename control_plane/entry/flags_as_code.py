"""``vane export``, ``vane plan FILE`` and ``vane apply FILE``: flags as code over the API.

The commands talk to a control plane's ``/api/v1/export``, ``/plan`` and ``/apply`` (``--url``
or ``$VANE_URL``, a management key in ``--key`` or ``$VANE_API_KEY``), as a CI job or a
Terraform provider would. ``plan`` exits 0 when nothing would change, 2 when something would,
1 on an error (as ``terraform plan -detailed-exitcode``); ``apply`` plans, prints the plan,
then applies it with the versions the plan read, so a change made meanwhile is refused.
With ``--from-env A --to-env B`` instead of FILE they promote: the project is exported, the
chosen flags' settings in A are copied to B (``domain.projectfile.promotion``), and that document
is planned and applied as a file would be."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import httpx
import yaml

from control_plane.domain.projectfile.imports import (
    Converted,
    Refused,
    flagd,
    launchdarkly,
    unleash,
)
from control_plane.domain.projectfile.imports.environments import Wanted, malformed
from control_plane.domain.projectfile.promotion import PromotionRefused, promote

CONVERTERS: dict[str, Callable[[Any, Wanted], Converted]] = {
    "launchdarkly": launchdarkly.convert,
    "flagd": flagd.convert,
    "unleash": unleash.convert,
}

NOTHING, CHANGES, ERROR = 0, 2, 1
MAX_FILE_BYTES = 32 << 20  # the API's limit for a document
SIGNS = {
    "create": "+",
    "update": "~",
    "restore": "~",
    "archive": "-",
    "delete": "-",
    "propose": "?",
}


class Failed(Exception):
    """A problem to print, and exit 1."""


class Parser(argparse.ArgumentParser):
    """Usage errors exit 1, not argparse's 2: 2 is ``plan``'s "something would change", so a CI
    job gating on it (``vane plan FILE || [ $? -eq 2 ]``) would pass a mistyped command."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(ERROR, f"{self.prog}: error: {message}\n")


def _client(args: argparse.Namespace) -> httpx.Client:
    key = args.key or os.environ.get("VANE_API_KEY")
    if not key:
        raise Failed("a management key is needed: --key or $VANE_API_KEY")
    base = (args.url or os.environ.get("VANE_URL") or "http://127.0.0.1:8000").rstrip("/")
    return httpx.Client(
        base_url=base + "/api/v1", headers={"Authorization": f"Bearer {key}"}, timeout=300
    )


def _answer(response: httpx.Response, *, as_json: bool = True) -> Any:
    if response.status_code < 300:
        return response.json() if as_json else response.text
    try:
        error = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        raise Failed(f"HTTP {response.status_code}: {response.text[:500]}") from None
    lines = [f"{error['message']} (HTTP {response.status_code})"]
    lines += [f"  {d['field']}: {d['message']}" for d in error.get("details", [])[:50]]
    raise Failed("\n".join(lines))


def read_document(path: str) -> Any:
    file = Path(path)
    if not file.is_file():
        raise Failed(f"no such file: {path}")
    if file.stat().st_size > MAX_FILE_BYTES:
        raise Failed(f"{path} is larger than {MAX_FILE_BYTES >> 20} MiB, the API's limit")
    text = file.read_text(encoding="utf-8")
    try:
        return json.loads(text) if file.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise Failed(
            f"{path} is not {'JSON' if file.suffix == '.json' else 'YAML'}: {exc}"
        ) from exc


def _short(value: Any) -> str:
    text = "(none)" if value is None else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


def render(plan: dict[str, Any]) -> str:
    """The plan as people read it: one line per resource, one per changed field, then its
    notes (what to do by hand: a new webhook's secret)."""
    lines = []
    for change in plan["changes"]:
        where = f" in {change['environment']}" if change.get("environment") else ""
        action = change["action"]
        note = " (requires approval: a change request)" if action == "propose" else ""
        lines.append(f"{SIGNS[action]} {change['kind']} {change['key']}{where}: {action}{note}")
        lines += [
            f"    {c['path']}: {_short(c['before'])} -> {_short(c['after'])}"
            for c in change["changes"]
        ]
    counts: dict[str, int] = {}
    for change in plan["changes"]:
        counts[change["action"]] = counts.get(change["action"], 0) + 1
    summary = ", ".join(f"{n} to {a}" for a, n in sorted(counts.items())) or "nothing to change"
    lines.append(f"Plan: {summary}; {len(plan['unchanged'])} left alone.")
    lines += [f"Note: {note}" for note in plan.get("notes", [])]
    return "\n".join(lines)


def cmd_export(args: argparse.Namespace) -> int:
    with _client(args) as client:
        fmt = "json" if args.json or args.format == "flagd" else "yaml"
        response = client.get("/export", params={"format": fmt})
        _answer(response, as_json=False)
    content = response.content
    if args.format == "flagd":
        converted = flagd.export(response.json(), args.env)
        for note in converted.notes:
            print(f"not exported: {note}", file=sys.stderr)
        content = (json.dumps(converted.document, indent=2, ensure_ascii=False) + "\n").encode()
    if args.out:
        Path(args.out).write_bytes(content)
        print(f"exported to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(content.decode())
    return NOTHING


def _plan(client: httpx.Client, document: Any, prune: bool) -> dict[str, Any]:
    found: dict[str, Any] = _answer(
        client.post("/plan", json={"document": document, "prune": prune})
    )
    print(render(found))
    return found


def promoted(client: httpx.Client, args: argparse.Namespace) -> dict[str, Any]:
    """The document promoting ``--flag``s (every flag not archived by default) from
    ``--from-env`` to ``--to-env``: from this project's export, or from ``--from-file`` (an
    export of another instance) with the target checked against this project's
    environments."""
    live = _answer(client.get("/export", params={"format": "json"}))
    source = live
    if args.from_file is not None:
        source = read_document(args.from_file)
        if not isinstance(source, dict):
            raise Failed(f"{args.from_file} is not a project document (an object)")
    targets = [str(e["key"]) for e in live.get("environments", [])]
    try:
        document = promote(source, args.from_env, args.to_env, args.flag, targets=targets)
    except PromotionRefused as exc:
        raise Failed(f"cannot promote: {exc}") from exc
    count = len(document["flags"])
    print(f"promoting {count} flag(s) from {args.from_env} to {args.to_env}", file=sys.stderr)
    return document


def _document(client: httpx.Client, args: argparse.Namespace) -> tuple[Any, str]:
    """The document to plan or apply, and its name in the audit."""
    if args.file is not None:
        return read_document(args.file), Path(args.file).name
    name = f"promotion {args.from_env} -> {args.to_env}"
    if args.from_file is not None:
        name += f" (from {Path(args.from_file).name})"
    return promoted(client, args), name


def cmd_plan(args: argparse.Namespace) -> int:
    with _client(args) as client:
        document, _ = _document(client, args)
        found = _plan(client, document, args.prune)
    return CHANGES if found["hasChanges"] else NOTHING


def cmd_apply(args: argparse.Namespace) -> int:
    with _client(args) as client:
        document, name = _document(client, args)
        found = _plan(client, document, args.prune)
        if not found["hasChanges"]:
            return NOTHING
        body = {
            "document": document,
            "prune": args.prune,
            "versions": found["versions"],
            "fileName": name,
        }
        done = _answer(client.post("/apply", json=body))
    print(done["message"])
    return NOTHING


def convert(source: str, path: str, wanted: Wanted) -> Converted:
    """The file at ``path``, written for ``source``, as a Vane document and its notes."""
    data = read_document(path)
    try:
        return CONVERTERS[source](data, wanted)
    except Refused as exc:
        raise Failed(f"{path} cannot be imported: {exc}") from exc


def _environment_keys(client: httpx.Client) -> set[str]:
    """The keys of the project's environments, every page."""
    keys: set[str] = set()
    params: dict[str, Any] = {"limit": 500}
    while True:
        page = _answer(client.get("/environments", params=params))
        keys |= {str(e["key"]) for e in page["environments"]}
        if not page.get("hasMore"):
            return keys
        params["cursor"] = page["nextCursor"]


def check_environments(client: httpx.Client, converted: Converted) -> None:
    """Every Vane environment the import sets exists, or nothing is imported: each one missing
    is named, with the file's environment that would go to it."""
    known = _environment_keys(client)
    missing = [(theirs, ours) for theirs, ours in converted.environments if ours not in known]
    if not missing:
        return
    lines = ["nothing imported: the project lacks an environment the import sets"]
    for theirs, ours in missing:
        if theirs is None:
            lines.append(f"  no Vane environment {ours!r} (--env {ours})")
        else:
            lines.append(
                f"  no Vane environment {ours!r} (the file's {theirs!r}): create it, or map "
                f"the file's to another with --env {theirs}=OURS"
            )
    raise Failed("\n".join(lines))


def _targets(converted: Converted) -> str:
    return ", ".join(
        ours if theirs is None else f"{theirs} -> {ours}" for theirs, ours in converted.environments
    )


def cmd_import(args: argparse.Namespace) -> int:
    converted = convert(args.source, args.file, Wanted(tuple(args.env or ()), args.every))
    for note in converted.notes:
        print(f"not converted: {note}", file=sys.stderr)
    print(f"environments: {_targets(converted)}", file=sys.stderr)
    with _client(args) as client:
        check_environments(client, converted)
        found = _plan(client, converted.document, False)
        if args.dry_run or not found["hasChanges"]:
            return CHANGES if found["hasChanges"] else NOTHING
        body = {
            "document": converted.document,
            "versions": found["versions"],
            "fileName": Path(args.file).name,
        }
        done = _answer(client.post("/apply", json=body))
    print(done["message"])
    return NOTHING


def _environment(value: str) -> str:
    if malformed(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not ENV or THEIRS=OURS")
    return value


IMPORT_HELP = """\
Convert another product's flag file into a project document, plan it and apply it (one
transaction: every environment at once). A LaunchDarkly data file ({"flags", "segments"}) and a
flagd file hold one environment's flags: they are set in each --env given (default production).
An Unleash export and LaunchDarkly's REST list of flags ({"items"}) hold several: --env NAME
imports the file's NAME into the Vane environment of the same key (lowercased), --env
THEIRS=OURS the file's THEIRS into Vane's OURS, --all-environments every one of the file's into
the Vane environment of the same key. An environment the project lacks refuses the import, named,
with nothing written: create it, or map it with --env THEIRS=OURS."""


def _import_parser(sub: Any) -> None:
    command = sub.add_parser(
        "import",
        help="convert another product's flag file, plan it and apply it",
        description=IMPORT_HELP,
    )
    command.add_argument("file")
    command.add_argument("--from", dest="source", choices=sorted(CONVERTERS), required=True)
    command.add_argument(
        "--env",
        action="append",
        type=_environment,
        metavar="ENV|THEIRS=OURS",
        help="a Vane environment the file's settings go to (default: production); repeat for "
        "several. For a file of several environments: the file's ENV into Vane's ENV, or the "
        "file's THEIRS into Vane's OURS",
    )
    command.add_argument(
        "--all-environments",
        dest="every",
        action="store_true",
        help="every environment of an Unleash export or LaunchDarkly REST list, each into the "
        "Vane environment of the same key (--env THEIRS=OURS for those named otherwise)",
    )
    command.add_argument(
        "--dry-run", action="store_true", help="print the plan only (exit 0: nothing, 2: some)"
    )
    command.set_defaults(func=cmd_import, parser=command)


def _promotion_arguments(command: argparse.ArgumentParser) -> None:
    group = command.add_argument_group(
        "promotion", "instead of FILE: copy flags' settings from one environment to another"
    )
    group.add_argument("--from-env", metavar="ENV", help="the environment copied from")
    group.add_argument("--to-env", metavar="ENV", help="the environment copied to")
    group.add_argument(
        "--flag",
        action="append",
        metavar="KEY",
        help="a flag to promote (repeat for more; default: every flag not archived)",
    )
    group.add_argument(
        "--from-file",
        metavar="EXPORT",
        help="copy from this export (of another instance) instead of this project's",
    )


def check_arguments(args: argparse.Namespace) -> None:
    """Exactly one of FILE or the pair ``--from-env``/``--to-env``; the promotion's other
    options only with the pair, and never ``--prune`` (it would archive every flag not
    promoted). An import of a flagd file (one environment's): no ``--all-environments``, no
    ``THEIRS=OURS``."""
    if args.command == "import":
        _check_import(args)
    if not hasattr(args, "from_env"):
        return
    parser: argparse.ArgumentParser = args.parser
    pair = (args.from_env is not None, args.to_env is not None)
    if pair[0] != pair[1]:
        parser.error("--from-env and --to-env go together")
    if args.file is not None and pair[0]:
        parser.error("give FILE or --from-env/--to-env, not both")
    if args.file is None and not pair[0]:
        parser.error("give FILE, or --from-env and --to-env to promote")
    if not pair[0] and (args.flag is not None or args.from_file is not None):
        parser.error("--flag and --from-file go with --from-env/--to-env")
    if pair[0] and args.prune:
        parser.error("--prune does not go with --from-env/--to-env")


def _check_import(args: argparse.Namespace) -> None:
    if args.source != "flagd":
        return
    one = "a flagd file holds one environment's flags: give --env OURS (repeat it for several)"
    if args.every:
        args.parser.error(f"--all-environments: {one}")
    for value in args.env or ():
        if "=" in value:
            args.parser.error(f"--env {value}: {one}")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="vane")
    sub = parser.add_subparsers(dest="command", required=True)
    export = sub.add_parser("export", help="write the project as one document (YAML)")
    export.add_argument("--json", action="store_true", help="JSON instead of YAML")
    export.add_argument("--out", help="write to FILE (default: standard output)")
    export.add_argument(
        "--format", choices=("vane", "flagd"), default="vane", help="flagd: a flagd flag file"
    )
    export.add_argument(
        "--env", default="production", help="with --format flagd: the environment exported"
    )
    export.set_defaults(func=cmd_export)
    for name, func, summary in (
        ("plan", cmd_plan, "what applying FILE would change (exit 0: nothing, 2: something)"),
        ("apply", cmd_apply, "apply FILE in one transaction, after showing its plan"),
    ):
        command = sub.add_parser(name, help=summary)
        command.add_argument("file", nargs="?", help="the document (or --from-env/--to-env)")
        command.add_argument(
            "--prune",
            action="store_true",
            help="also archive flags and delete segments not in FILE",
        )
        _promotion_arguments(command)
        command.set_defaults(func=func, parser=command)
    _import_parser(sub)
    for command in sub.choices.values():
        command.add_argument("--url", help="the control plane (default: $VANE_URL or :8000)")
        command.add_argument("--key", help="a management key (default: $VANE_API_KEY)")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    check_arguments(args)
    try:
        return int(args.func(args))
    except Failed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ERROR
    except httpx.HTTPError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ERROR
