"""Cached JSON fragments of one environment state.

``View`` holds JSON fragments derived from one ``EnvironmentState``. The engine returns shared,
immutable ``Evaluation`` objects built at compile time, so the encoded form of each one (per flag,
per API) is computed once and joined into responses; the view keeps a reference to every
evaluation it has encoded (so an ``id()`` is never reused while cached) and is replaced with the
state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from relay.http import json_encode
from relay.store import EnvironmentState
from shared.engine import Evaluation, Reason, ofrep_error_code, openfeature_reason

MAX_CACHED_PER_FLAG = 1024  # compile-time evaluations per flag are few; this only guards memory

_ERROR_DETAILS = {
    "FLAG_NOT_FOUND": "flag not found",
    "PARSE_ERROR": "the flag's configuration could not be compiled",
    "TARGETING_KEY_MISSING": "context needs a non-empty targetingKey (or key)",
    "GENERAL": "the flag could not be evaluated",
}


class _PerFlag(dict[str, dict[int, bytes]]):
    """Per-flag fragment caches, each made on first use: a new state (every patch) must not
    cost the first request after it a walk over all of the environment's flags."""

    def __missing__(self, key: str) -> dict[int, bytes]:
        cache: dict[int, bytes] = {}
        self[key] = cache
        return cache


class View:
    """JSON fragments for one environment state: per flag and evaluation, for each API."""

    __slots__ = (
        "_pinned",
        "bulk_metadata",
        "etag_seed",
        "ofrep",
        "ofrep_by_id",
        "sdk",
        "sdk_by_id",
        "state",
        "version_bytes",
    )

    def __init__(self, state: EnvironmentState) -> None:
        self.state = state
        self.version_bytes = str(state.version).encode()
        self.etag_seed = state.etag.encode()
        self.bulk_metadata = b'"metadata":{"version":' + self.version_bytes + b"}"
        self.ofrep: dict[str, dict[int, bytes]] = _PerFlag()
        self.sdk: dict[str, dict[int, bytes]] = _PerFlag()
        # The hot path's lookup: one flat map from an evaluation's id to its encoding. Only for
        # results the engine builds per flag at compile time (every reason but ERROR): its error
        # results are shared constants, which encode a different key for each flag, so those
        # go through the per-flag maps.
        self.ofrep_by_id: dict[int, bytes] = {}
        self.sdk_by_id: dict[int, bytes] = {}
        self._pinned: list[Evaluation] = []

    def _remember(
        self,
        cache: dict[int, bytes],
        by_id: dict[int, bytes],
        evaluation: Evaluation,
        item: bytes,
    ) -> None:
        if len(cache) >= MAX_CACHED_PER_FLAG:
            return
        cache[id(evaluation)] = item
        self._pinned.append(evaluation)
        if evaluation.reason is not Reason.ERROR:
            by_id[id(evaluation)] = item

    def ofrep_items(self, evaluations: Mapping[str, Evaluation]) -> list[bytes]:
        """The OFREP bulk items of ``evaluations``, in order (cached encodings where known)."""
        get = self.ofrep_by_id.get
        item = self.ofrep_item
        return [get(id(e)) or item(key, e) for key, e in evaluations.items()]

    def sdk_items(self, evaluations: Mapping[str, Evaluation]) -> list[bytes]:
        """The ``"key":{...}`` members of Vane's own API for ``evaluations``, in order."""
        get = self.sdk_by_id.get
        item = self.sdk_item
        return [get(id(e)) or item(key, e) for key, e in evaluations.items()]

    def ofrep_item(self, key: str, evaluation: Evaluation) -> bytes:
        """One OFREP bulk item: ``evaluationSuccess`` or ``evaluationFailure`` (cached)."""
        cache = self.ofrep[key] if key in self.state.compiled.flags else None  # not for any key
        if cache is not None:
            item = cache.get(id(evaluation))
            if item is not None:
                return item
        item = json_encode(self.ofrep_object(key, evaluation))
        if cache is not None:
            self._remember(cache, self.ofrep_by_id, evaluation, item)
        return item

    def ofrep_object(self, key: str, evaluation: Evaluation) -> dict[str, Any]:
        metadata: dict[str, Any] = {"version": self.state.version}
        code = ofrep_error_code(evaluation)
        if code is not None:
            return {
                "key": key,
                "errorCode": code,
                "errorDetails": _ERROR_DETAILS.get(code, _ERROR_DETAILS["GENERAL"]),
                "metadata": metadata,
            }
        variant = evaluation.variation_name or str(evaluation.variation)
        if evaluation.reason is Reason.PREREQUISITE_FAILED and evaluation.prerequisite_key:
            # OFREP's reasons have none for it: DISABLED (the off variation), and which one
            metadata["prerequisiteFailed"] = evaluation.prerequisite_key
        return {
            "key": key,
            "value": evaluation.value,
            "reason": openfeature_reason(evaluation),
            "variant": variant,
            "metadata": metadata,
        }

    def sdk_item(self, key: str, evaluation: Evaluation) -> bytes:
        """``"key":{value, variation, reason[, variationName | errorCode]}`` (cached)."""
        cache = self.sdk[key] if key in self.state.compiled.flags else None
        if cache is not None:
            item = cache.get(id(evaluation))
            if item is not None:
                return item
        entry: dict[str, Any] = {
            "value": evaluation.value,
            "variation": evaluation.variation,
            "reason": evaluation.reason.value,
        }
        if evaluation.reason is Reason.ERROR:
            entry["errorCode"] = ofrep_error_code(evaluation)
        elif evaluation.variation_name:
            entry["variationName"] = evaluation.variation_name
        item = json_encode(key) + b":" + json_encode(entry)
        if cache is not None:
            self._remember(cache, self.sdk_by_id, evaluation, item)
        return item


class Views:
    """The current ``View`` per environment, rebuilt the first time a new state is seen."""

    def __init__(self) -> None:
        self._views: dict[str, View] = {}

    def of(self, state: EnvironmentState) -> View:
        view = self._views.get(state.environment)
        if view is None or view.state is not state:
            view = View(state)
            self._views[state.environment] = view
        return view
