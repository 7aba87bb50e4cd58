"""LaunchDarkly's server-side evaluation test data, run against Vane's engine.

The data (``server-side-eval/*.yml`` of launchdarkly/sdk-test-harness, Apache-2.0) is vendored
unchanged, with its licence and notice, in ``tests/engine/data/ld-sdk-test-harness/``;
``VANE_LD_CONFORMANCE_DIR`` points the test at another copy (a newer release, say). Each case is translated into Vane's model (``ld_harness.py``) and evaluated;
value, variation index and reason (kind, rule index and id, prerequisite key, error kind) must
match. A case is skipped, with its reason, when it needs something Vane does not model
(LD's SHA-1 bucket values, big segments, SDK-side typed variations) or when Vane deliberately refuses at compile time what LaunchDarkly tolerates at evaluation time;
those refusals are verified before skipping. Cases LD expects to fail as ``MALFORMED_FLAG`` must
be refused by ``compile_snapshot`` and evaluate to ``MALFORMED_FLAG`` when compiled leniently.

A folder named by ``VANE_LD_CONFORMANCE_DIR`` that is missing skips the module locally and fails
it when ``CI=true``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from shared.engine import CompileError, Reason, compile_snapshot, evaluate, evaluate_all

from .ld_harness import Case, Unmappable, json_equal, load_cases, translate

DEFAULT_DIR = Path(__file__).resolve().parent / "data" / "ld-sdk-test-harness" / "server-side-eval"
DATA_DIR = Path(os.environ.get("VANE_LD_CONFORMANCE_DIR") or DEFAULT_DIR)

# Things Vane refuses when compiling but LaunchDarkly evaluates anyway, by the refusal message.
DELIBERATE = {
    "unknown operator": "Vane refuses unknown operators at compile time (LD: non-match)",
    "needs an RFC 3339 timestamp": "Vane refuses clause values that are not dates (LD: non-match)",
    "needs a semantic version": "Vane refuses clause values that are not versions (LD: non-match)",
}


def _cases() -> list[Any]:
    if not DATA_DIR.is_dir():
        return [pytest.param(None, id="data-folder-missing")]
    return [pytest.param(case, id=case.id) for case in load_cases(DATA_DIR)]


def _default(case: Case) -> Any:
    """The caller's default; when absent, inferred from the flag as the harness does."""
    default = case.evaluation.get("default")
    if default is not None:
        return default
    flags = (case.doc.get("sdkData") or {}).get("flags") or {}
    variations = (flags.get(case.evaluation["flagKey"]) or {}).get("variations") or [None]
    first = variations[0]
    if isinstance(first, bool):
        return False
    if isinstance(first, int | float):
        return 0
    return "" if isinstance(first, str) else None


def _deliberate(error: CompileError) -> str | None:
    for fragment, reason in DELIBERATE.items():
        if fragment in error.message:
            return f"deliberate deviation: {reason}"
    return None


@pytest.mark.parametrize("case", _cases())
def test_ld_case(case: Case | None) -> None:
    if case is None:
        message = f"LaunchDarkly conformance data not found at {DATA_DIR}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    try:
        snapshot, context = translate(case)
    except Unmappable as exc:
        pytest.skip(exc.reason)

    flag_key = case.evaluation["flagKey"]
    default = _default(case)
    expect = case.evaluation.get("expect") or {}
    reason = expect.get("reason") or {}

    if reason.get("errorKind") == "MALFORMED_FLAG":
        with pytest.raises(CompileError):
            compile_snapshot(snapshot)
        result = evaluate(compile_snapshot(snapshot, strict=False), flag_key, context, 0)
        assert (result.reason, result.error_kind) == (Reason.ERROR, "MALFORMED_FLAG")
        assert json_equal(default, expect.get("value"))
        return

    try:
        env = compile_snapshot(snapshot)
    except CompileError as exc:
        deviation = _deliberate(exc)
        if deviation is None:
            raise
        pytest.skip(deviation)

    result = evaluate(env, flag_key, context, 0)
    value = default if result.reason is Reason.ERROR else result.value
    assert json_equal(value, expect.get("value")), (value, expect.get("value"))
    assert result.variation == expect.get("variationIndex")
    assert result.reason.value == reason.get("kind")
    assert result.rule_index == reason.get("ruleIndex")
    assert result.rule_id == reason.get("ruleId")
    assert result.prerequisite_key == reason.get("prerequisiteKey")
    assert result.error_kind == reason.get("errorKind")
    if flag_key in env.flags:
        assert evaluate_all(env, context, 0)[flag_key] == result
