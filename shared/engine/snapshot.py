"""A whole snapshot compiled once into an immutable, indexed ``CompiledEnvironment``, in full
(``compile_snapshot``) or from the previous version and the keys a patch names
(``compile_patch``).

Segments compile first, then flags, each after what it names (``shared.engine.graph`` orders
them and refuses cycles and nesting deeper than ``MAX_NESTING``); each flag becomes its closure
(``shared.engine.closures``). With ``strict=False`` what does not compile is kept as a malformed
flag and listed in ``errors``, so the healthy flags of a bad snapshot keep serving.

The engine leaves the garbage collector alone: compiling allocates about a hundred objects per
flag, all kept, so a cyclic collection triggered on the way rescans the growing heap again and
again (about 40 % of a 10,000-flag compile). Pausing it is the caller's choice, made for the
whole process: the relay, which owns its process, does (``relay.store.gc_paused``); the
in-process provider, a library inside someone else's application, does not.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, TypeVar

from shared.engine.closures import FlagFn, build_flag, constant_run
from shared.engine.graph import (
    Edges,
    flag_edges,
    moved,
    order_keys,
    prerequisite_keys,
    references,
    segment_edges,
    segment_references,
    segments_named,
    with_dependents,
)
from shared.engine.model import MALFORMED_FLAG, CompileError, InvalidAt, join
from shared.engine.rules import compile_segment
from shared.wire.snapshot import FlagSnapshot, SegmentSnapshot, Snapshot

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class CompiledFlag:
    key: str
    version: int
    enabled: bool
    client_side: bool
    run: FlagFn
    error: CompileError | None = None  # set when compiled with strict=False and malformed


@dataclass(frozen=True, slots=True)
class _Reusable:
    """What compiling the next version of the same environment may take over unchanged."""

    strict: bool
    flags: Mapping[str, Any]  # the flag data compiled, by key
    segments: Mapping[str, Any]  # the segment data compiled, by key
    built: Mapping[str, Any]  # flag key -> its compiled ``Prereq`` or ``CompileError``
    segments_built: Mapping[str, Any]  # segment key -> its ``Matcher`` or ``CompileError``
    # who names what: prerequisite key -> flags naming it; segment key -> flags naming it
    dependents: Mapping[str, frozenset[str]]
    segment_users: Mapping[str, frozenset[str]]
    positions: Mapping[str, int]  # flag key -> index in ``all_runs``
    client_positions: Mapping[str, int]  # flag key -> index in ``client_runs``


@dataclass(frozen=True, slots=True, eq=False)
class CompiledEnvironment:
    """An environment's flags and segments, ready to evaluate. Never mutated: swap it whole."""

    project: str
    environment: str
    version: int
    generated_at: int
    flags: Mapping[str, CompiledFlag]
    segment_keys: frozenset[str]
    errors: tuple[CompileError, ...]
    runs: Mapping[str, FlagFn]
    all_runs: tuple[tuple[str, FlagFn], ...]
    client_runs: tuple[tuple[str, FlagFn], ...]
    reusable: _Reusable | None = None


# ---------------------------------------------------------------------------- building

Resolver = Callable[[str, str], Any]
"""``(key, path)`` -> the compiled item ``key`` names (None when unknown); see ``_resolver``."""

Reuse = Callable[[str, Any, set[str]], Any]
"""``(key, data, keys reused so far)`` -> an earlier compiled item to take over, or None."""


def _check_map(items: Any, name: str, kind: type) -> Mapping[str, Any]:
    if not isinstance(items, Mapping):
        raise CompileError(name, "expected a map")
    for key, value in items.items():
        if not isinstance(key, str) or not key:
            raise CompileError(name, f"invalid key {key!r}")
        own_key = getattr(value, "key", key) if isinstance(value, kind) else key
        if own_key != key:
            raise CompileError(f"{name}.{key}.key", f"{own_key!r} does not match its map key")
    return items


def _resolver(built: Mapping[str, Any], known: Collection[str], what: str) -> Resolver:
    """The one resolve helper: how an item finds a compiled item it names, for full compiles
    and patches, flags and segments alike. Raises the named item's ``CompileError`` (its
    failure is the namer's), or ``InvalidAt`` when a ``known`` key was not compiled; None for
    an unknown key. ``built`` may still grow."""

    def resolve(key: str, path: str) -> Any:
        found = built.get(key)
        if isinstance(found, CompileError):
            raise found
        if found is None and key in known:
            raise InvalidAt(path, f"{what} {key!r} could not be compiled")
        return found

    return resolve


def _build(
    keys: Sequence[str],
    data: Mapping[str, Any],
    prefix: str,
    what: str,
    build: Callable[[Any, Resolver], Any],
    built: dict[str, Any],
    *,
    edges: Edges,
    reuse: Reuse | None = None,
    only: Collection[str] | None = None,
) -> dict[str, Any]:
    """Compile ``keys`` of ``data`` into ``built`` (returned), each after what it references;
    failures become errors. With ``only``, what the walk meets outside it is already in
    ``built``; ``reuse`` may hand over an earlier compiled item instead of compiling it."""
    order, failed = order_keys(keys, edges, prefix, what)
    resolve = _resolver(built, data, what)
    reused: set[str] = set()
    for key in order:
        if only is not None and key not in only:
            continue  # an unchanged prerequisite: already compiled
        if key in failed:
            built[key] = failed[key]
            continue
        if reuse is not None:
            earlier = reuse(key, data[key], reused)
            if earlier is not None:
                built[key] = earlier
                reused.add(key)
                continue
        try:
            built[key] = build(data[key], resolve)
        except InvalidAt as exc:
            built[key] = CompileError(join(f"{prefix}.{key}", exc.path), exc.message)
        except CompileError as exc:
            built[key] = exc
    return built


def _segments(segment_data: Mapping[str, Any]) -> dict[str, Any]:
    """Every segment compiled (segment key -> its ``Matcher`` or ``CompileError``)."""
    edges = segment_edges(segment_data)
    return _build(
        list(segment_data), segment_data, "segments", "segment", compile_segment, {}, edges=edges
    )


def _flag_builder(segments: Mapping[str, Any]) -> Callable[[Any, Resolver], Any]:
    """How a flag is built against compiled ``segments`` and its resolved prerequisites."""
    resolve_segment = _resolver(segments, (), "segment")
    return lambda flag, resolve: build_flag(flag, resolve, resolve_segment)


def _compiled_flag(key: str, data: Any, item: Any, strict: bool) -> CompiledFlag:
    """A built flag (or its ``CompileError``: raised when ``strict``, else a malformed flag)."""
    if not isinstance(item, CompileError):
        return CompiledFlag(key, data.version, data.enabled, data.client_side, item.run)
    if strict:
        raise item
    version = data.version if isinstance(getattr(data, "version", None), int) else 0
    client_side = getattr(data, "client_side", True) is not False
    return CompiledFlag(key, version, False, client_side, constant_run(MALFORMED_FLAG), item)


def _copy(mapping: Mapping[str, T]) -> dict[str, T]:
    """A copy of a dict or of the dict behind a ``MappingProxyType`` (a C-level copy)."""
    if isinstance(mapping, dict | MappingProxyType):
        return mapping.copy()
    return dict(mapping)


def _environment(
    snapshot: Snapshot,
    flags: dict[str, CompiledFlag],
    segment_data: Mapping[str, Any],
    errors: tuple[CompileError, ...],
    reusable: Callable[[tuple[dict[str, int], dict[str, int]]], _Reusable],
) -> CompiledEnvironment:
    """The compiled environment of ``flags``, in their order; ``reusable`` gets the positions
    of each flag in ``all_runs`` and ``client_runs`` (so a patch can replace one in place)."""
    runs = {key: flag.run for key, flag in flags.items()}
    client = [key for key, flag in flags.items() if flag.client_side]
    return CompiledEnvironment(
        project=str(snapshot.project),
        environment=str(snapshot.environment),
        version=snapshot.version,
        generated_at=snapshot.generated_at,
        flags=MappingProxyType(flags),
        segment_keys=frozenset(segment_data),
        errors=errors,
        runs=runs,
        all_runs=tuple(runs.items()),
        client_runs=tuple((key, runs[key]) for key in client),
        reusable=reusable(
            ({key: i for i, key in enumerate(runs)}, {key: i for i, key in enumerate(client)})
        ),
    )


# --------------------------------------------------------------------------- full compile


def compile_snapshot(
    snapshot: Snapshot, *, strict: bool = True, previous: CompiledEnvironment | None = None
) -> CompiledEnvironment:
    """Compile a snapshot, or raise ``CompileError`` naming a problem.

    With ``strict=False`` a flag that does not compile (or whose prerequisites or segments do
    not) is kept and evaluates to ``ERROR``/``MALFORMED_FLAG``; ``errors`` lists the problems.
    That suits a relay, which should keep serving the healthy flags of a bad snapshot.

    ``previous``, the compiled earlier version of the same environment, lets an unchanged flag
    keep its compiled form: one whose data is equal, whose prerequisites are the same keys and
    were all kept themselves, while no segment changed. So a one-flag change to a 10,000-flag
    environment compiles one flag, not 10,000; the result evaluates exactly as a full compile.

    The garbage collector is the caller's to pause, or not (see the module's docstring).
    """
    if not isinstance(snapshot, Snapshot):
        raise CompileError("", "expected a snapshot")
    flag_data = _check_map(snapshot.flags, "flags", FlagSnapshot)
    segment_data = _check_map(snapshot.segments, "segments", SegmentSnapshot)
    reuse = _flag_reuse(
        previous.reusable if previous is not None else None, strict, flag_data, segment_data
    )
    segments = _segments(segment_data)
    compiled = _build(
        list(flag_data),
        flag_data,
        "flags",
        "prerequisite",
        _flag_builder(segments),
        {},
        edges=flag_edges(flag_data),
        reuse=reuse,
    )
    errors: dict[tuple[str, str], CompileError] = {}
    for item in [*segments.values(), *compiled.values()]:
        if isinstance(item, CompileError):
            if strict:
                raise item
            errors.setdefault((item.path, item.message), item)
    flags = {
        key: _compiled_flag(key, data, compiled[key], strict) for key, data in flag_data.items()
    }
    return _environment(
        snapshot,
        flags,
        segment_data,
        tuple(errors.values()),
        lambda positions: _Reusable(
            strict, flag_data, segment_data, compiled, segments, *references(flag_data), *positions
        ),
    )


def _same(before: Any, after: Any) -> bool:
    return before is after or before == after


def _flag_reuse(
    earlier: _Reusable | None, strict: bool, flags: Mapping[str, Any], segments: Mapping[str, Any]
) -> Reuse | None:
    """How ``_build`` may take over flags compiled for ``earlier`` (None: compile all)."""
    if earlier is None or earlier.strict != strict:
        return None
    if earlier.segments.keys() != segments.keys() or not all(
        _same(earlier.segments[key], value) for key, value in segments.items()
    ):
        return None  # segments are compiled into the flags that use them: start afresh
    old_edges, new_edges = flag_edges(earlier.flags), flag_edges(flags)

    def reuse(key: str, data: Any, reused: set[str]) -> Any:
        before = earlier.flags.get(key)
        if before is None or not _same(before, data):
            return None
        targets = [other for _, other in new_edges(key)]
        if targets != [other for _, other in old_edges(key)]:
            return None  # a prerequisite appeared or went away
        if not all(other in reused for other in targets):
            return None  # a prerequisite was compiled afresh: this flag holds its old form
        return earlier.built.get(key)

    return reuse


# ---------------------------------------------------------------------------------- patch


def compile_patch(
    previous: CompiledEnvironment,
    snapshot: Snapshot,
    *,
    flags: Collection[str],
    segments: Collection[str] = (),
    strict: bool = True,
) -> CompiledEnvironment:
    """``snapshot`` compiled from ``previous``, the compiled version it was patched from, where
    ``flags`` and ``segments`` name every flag and segment the patch changed, added or removed.

    Only those flags are compiled, with the flags that use a named segment (directly or through
    other segments) and every flag that depends on any of them through prerequisites; every
    other compiled flag is taken over as it is, so the cost follows the patch, not the size of
    the environment. Evaluates exactly as ``compile_snapshot(snapshot)`` (tested over random
    edits). Without what to take over (``previous`` compiled another way), compiles it whole.

    The garbage collector is the caller's to pause, or not (see the module's docstring).
    """
    earlier = previous.reusable
    if earlier is None or earlier.strict != strict:
        return compile_snapshot(snapshot, strict=strict, previous=previous)
    named, named_segments = set(flags), set(segments)
    if not isinstance(snapshot, Snapshot):
        raise CompileError("", "expected a snapshot")
    flag_data = snapshot.flags
    segment_data = _check_map(snapshot.segments, "segments", SegmentSnapshot)
    _check_map({k: flag_data[k] for k in named if k in flag_data}, "flags", FlagSnapshot)
    segment_built, rebuild = _patched_segments(earlier, segment_data, named_segments)
    dependents, users = _patched_references(earlier, flag_data, named)
    rebuild = with_dependents(rebuild | named, dependents) & flag_data.keys()
    # not ``named - flag_data.keys()``: a set minus a dict's keys walks every key of the dict
    gone = [key for key in named if key not in flag_data]
    built = _copy(earlier.built)
    for key in gone:
        built.pop(key, None)
    built = _build(
        sorted(rebuild),
        flag_data,
        "flags",
        "prerequisite",
        _flag_builder(segment_built),
        built,
        edges=flag_edges(flag_data),
        only=rebuild,
    )
    compiled_flags = _copy(previous.flags)
    for key in gone:
        compiled_flags.pop(key, None)
    for key in rebuild:
        compiled_flags[key] = _compiled_flag(key, flag_data[key], built[key], strict)
    errors = _patch_errors(segment_built, built, strict)
    reusable = replace(
        earlier,
        flags=flag_data,
        segments=segment_data,
        built=built,
        segments_built=segment_built,
        dependents=dependents,
        segment_users=users,
    )
    same_keys = all((key in flag_data) == (key in previous.flags) for key in named)
    if same_keys and all(
        compiled_flags[key].client_side == previous.flags[key].client_side for key in rebuild
    ):
        # the same flags in the same order: replace the rebuilt ones in place (no 10,000 walk)
        return _replaced_in_place(
            previous, snapshot, compiled_flags, rebuild, segment_data, errors, reusable
        )
    if list(compiled_flags) != list(flag_data):
        compiled_flags = {key: compiled_flags[key] for key in flag_data}  # the snapshot's order
    return _environment(
        snapshot,
        compiled_flags,
        segment_data,
        errors,
        lambda positions: _Reusable(
            strict, flag_data, segment_data, built, segment_built, dependents, users, *positions
        ),
    )


def _patched_segments(
    earlier: _Reusable, segment_data: Mapping[str, Any], named_segments: set[str]
) -> tuple[Mapping[str, Any], set[str]]:
    """The compiled segments, and the flags that use a changed one (or a segment that names it,
    at any depth). Segments are few: recompiled whole when any changed."""
    if not named_segments:
        return earlier.segments_built, set()
    segment_built = _segments(segment_data)
    namers: dict[str, set[str]] = {}
    for version_of_segments in (earlier.segments, segment_data):
        for key, segment in version_of_segments.items():
            for _, other in segment_references(segment):
                namers.setdefault(other, set()).add(key)
    touched = with_dependents(set(named_segments), namers)
    rebuild: set[str] = set()
    for key in touched:
        rebuild |= earlier.segment_users.get(key, frozenset())
    return segment_built, rebuild


def _patched_references(
    earlier: _Reusable, flag_data: Mapping[str, Any], named: set[str]
) -> tuple[Mapping[str, frozenset[str]], Mapping[str, frozenset[str]]]:
    """(prerequisite -> dependents, segment -> users) with the named flags' references moved."""
    dependents, users = earlier.dependents, earlier.segment_users
    for key in named:
        before, after = earlier.flags.get(key), flag_data.get(key)
        old_prereqs = set(prerequisite_keys(before)) if before is not None else set()
        new_prereqs = set(prerequisite_keys(after)) if after is not None else set()
        if old_prereqs != new_prereqs:
            dependents = moved(dependents, key, old_prereqs, new_prereqs)
        old_segments = segments_named(getattr(before, "rules", ()))
        new_segments = segments_named(getattr(after, "rules", ()))
        if old_segments != new_segments:
            users = moved(users, key, old_segments, new_segments)
    return dependents, users


def _patch_errors(
    segment_built: Mapping[str, Any], built: Mapping[str, Any], strict: bool
) -> tuple[CompileError, ...]:
    """Every distinct compile error (``strict``: the first segment error is raised instead)."""
    if strict:
        for item in segment_built.values():
            if isinstance(item, CompileError):
                raise item
        return ()
    found: dict[tuple[str, str], CompileError] = {}
    for item in [*segment_built.values(), *built.values()]:
        if isinstance(item, CompileError):
            found.setdefault((item.path, item.message), item)
    return tuple(found.values())


def _replaced_in_place(
    previous: CompiledEnvironment,
    snapshot: Snapshot,
    compiled_flags: dict[str, CompiledFlag],
    rebuild: set[str],
    segment_data: Mapping[str, Any],
    errors: tuple[CompileError, ...],
    reusable: _Reusable,
) -> CompiledEnvironment:
    runs = _copy(previous.runs)
    all_runs, client_runs = list(previous.all_runs), list(previous.client_runs)
    for key in rebuild:
        run = runs[key] = compiled_flags[key].run
        all_runs[reusable.positions[key]] = (key, run)
        if key in reusable.client_positions:
            client_runs[reusable.client_positions[key]] = (key, run)
    return CompiledEnvironment(
        project=str(snapshot.project),
        environment=str(snapshot.environment),
        version=snapshot.version,
        generated_at=snapshot.generated_at,
        flags=MappingProxyType(compiled_flags),
        segment_keys=frozenset(segment_data),
        errors=errors,
        runs=runs,
        all_runs=tuple(all_runs),
        client_runs=tuple(client_runs),
        reusable=reusable,
    )
