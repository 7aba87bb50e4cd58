"""The sans-I/O core of the in-process providers: a snapshot feed's events in, evaluations out.

``SseParser`` turns the lines of a server-sent event stream into ``(event, id, data)``; it is four
rules of the format (``event:``, ``id:``, ``data:``, a blank line ends an event; ``:`` a comment),
written here rather than taken from a library so the client keeps httpx as its only dependency.

``FlagSet`` holds the compiled snapshot of one environment and applies the feed's events
(``relay.routes.feed``): a full ``snapshot``, a ``patch`` from the version it holds, or ``current``.
Each change compiles with ``compile_snapshot(previous=...)``, which takes over every flag whose
definition (and prerequisites and segments) did not change, so the flags whose compiled function
is new are exactly the flags that changed: that is ``flagsChanged``. It compiles with the garbage
collector left running, deliberately: the provider is a library inside someone else's
application, whose collector is not ours to pause (the relay, a process of its own, pauses it
while compiling: ``relay.store.gc_paused``; the engine itself never touches it).

``details`` maps an engine ``Evaluation`` to what an OpenFeature provider answers, exactly as a
relay's OFREP answer carries it (value, variant, reason, error code, ``{"version"}`` metadata).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from shared.engine import (
    CompiledEnvironment,
    Evaluation,
    compile_patch,
    compile_snapshot,
    exposure_unit,
    ofrep_error_code,
    openfeature_reason,
)
from shared.wire import protocol as p
from shared.wire.events import FLAG_EXPOSURE, exposure_event_id
from shared.wire.kinds import qualified_unit
from shared.wire.snapshot import Snapshot

_snapshot_decoder = msgspec.json.Decoder(p.SnapshotMessage)
_patch_decoder = msgspec.json.Decoder(p.Patch)


class SseParser:
    """Lines of a ``text/event-stream`` in, complete events out."""

    def __init__(self) -> None:
        self._event = ""
        self._id: str | None = None
        self._data: list[str] = []

    def feed(self, line: str) -> tuple[str, str | None, str] | None:
        """One line (without its end of line); an ``(event, id, data)`` when one is complete."""
        if not line:
            if not self._data and not self._event:
                return None
            done = (self._event or "message", self._id, "\n".join(self._data))
            self._event, self._data = "", []
            return done
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            self._id = value
        return None


class FeedOutOfStep(Exception):
    """A patch that does not follow the version held: reconnect for a full snapshot."""


@dataclass(frozen=True, slots=True)
class Details:
    """One resolution, in OpenFeature's terms."""

    value: Any
    variant: str | None
    reason: str
    error_code: str | None
    error_message: str | None
    version: int


_ERROR_MESSAGES = {
    "FLAG_NOT_FOUND": "flag not found",
    "PARSE_ERROR": "the flag's configuration could not be compiled",
    "TARGETING_KEY_MISSING": "context needs a non-empty targetingKey (or key)",
    "GENERAL": "the flag could not be evaluated",
}


class FlagSet:
    """The compiled snapshot of one environment, replaced whole on every change."""

    def __init__(self) -> None:
        self.snapshot: Snapshot | None = None
        self.compiled: CompiledEnvironment | None = None

    @property
    def version(self) -> int | None:
        return self.snapshot.version if self.snapshot is not None else None

    def apply(self, event: str, data: str) -> list[str] | None:
        """Apply one feed event; the keys of the flags it changed (``None`` for ``current``).

        ``FeedOutOfStep`` for a patch that does not follow the version held.
        """
        if event == "current":
            return None
        if event == "snapshot":
            snapshot = _snapshot_decoder.decode(data).snapshot
        elif event == "patch":
            patch = _patch_decoder.decode(data)
            if self.snapshot is None or patch.from_version != self.snapshot.version:
                raise FeedOutOfStep(f"patch from {patch.from_version}, holding {self.version}")
            snapshot = p.apply_patch(self.snapshot, patch)
            flags, segments = p.patched_keys(patch)
            if self.compiled is not None:  # only what the patch names is compiled
                return self._swap(
                    snapshot,
                    compile_patch(self.compiled, snapshot, flags=flags, segments=segments),
                )
        else:
            return None
        return self._swap(snapshot)

    def _swap(self, snapshot: Snapshot, compiled: CompiledEnvironment | None = None) -> list[str]:
        before = self.compiled
        if compiled is None:  # CompileError: keep the old
            compiled = compile_snapshot(snapshot, previous=before)
        self.snapshot, self.compiled = snapshot, compiled
        if before is None:
            return sorted(compiled.flags)
        old_runs = before.runs
        changed = {key for key, run in compiled.runs.items() if old_runs.get(key) is not run}
        changed.update(key for key in old_runs if key not in compiled.runs)
        return sorted(changed)


def details(evaluation: Evaluation, version: int) -> Details:
    code = ofrep_error_code(evaluation)
    if code is not None:
        return Details(None, None, "ERROR", code, _ERROR_MESSAGES.get(code), version)
    variant = evaluation.variation_name or str(evaluation.variation)
    return Details(evaluation.value, variant, openfeature_reason(evaluation), None, None, version)


class FirstExposures:
    """The ``$flag_exposure`` events to report: the first evaluation of each (flag, unit,
    variation) of a flag with metrics, remembered in a bounded set (oldest forgotten first).
    The event ids are the relays' own (``flagexp:<flag>:<unit>:<variation>``, built by
    ``shared.wire.events.exposure_event_id``), so however many
    relays and backends see a unit, one exposure is stored."""

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self._seen: OrderedDict[str, None] = OrderedDict()

    def new(
        self, snapshot: Snapshot, key: str, context: Mapping[str, Any], evaluation: Evaluation
    ) -> Iterator[tuple[str, str | None, str, dict[str, Any], str]]:
        """``(unit, unit kind, event, props, event_id)`` if this evaluation is a first
        exposure (the kind None for a user)."""
        flag = snapshot.flags.get(key)
        if flag is None or not flag.track_exposures or evaluation.variation is None:
            return
        found = exposure_unit(context)
        if found is None:
            return
        unit, kind = found
        qualified = qualified_unit(kind, unit)
        event_id = exposure_event_id("flagexp", key, qualified, str(evaluation.variation))
        if event_id in self._seen:
            return
        self._seen[event_id] = None
        if len(self._seen) > self.limit:
            self._seen.popitem(last=False)
        yield unit, kind, FLAG_EXPOSURE, {"flag": key, "variation": evaluation.variation}, event_id

    def forget(self, event_id: str) -> None:
        self._seen.pop(event_id, None)
