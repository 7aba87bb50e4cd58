"""Vane's evaluation reasons in OpenFeature / OFREP terms, one Vane reason to one OFREP reason.

=====================  =============================================  ======================
Vane reason            OpenFeature / OFREP ``reason``                 OFREP ``errorCode``
=====================  =============================================  ======================
OFF                    DISABLED                                       -
TARGET_MATCH           TARGETING_MATCH                                -
RULE_MATCH             TARGETING_MATCH, or SPLIT when ``in_rollout``  -
FALLTHROUGH            DEFAULT, or SPLIT when ``in_rollout``          -
PREREQUISITE_FAILED    DISABLED (see below)                           -
ERROR                  ERROR                                          by ``error_kind``:
                                                                      FLAG_NOT_FOUND → FLAG_NOT_FOUND,
                                                                      MALFORMED_FLAG → PARSE_ERROR,
                                                                      USER_NOT_SPECIFIED →
                                                                      TARGETING_KEY_MISSING,
                                                                      EXCEPTION → GENERAL
=====================  =============================================  ======================

PREREQUISITE_FAILED maps to DISABLED: the flag serves its off variation, exactly as when it is
switched off, because a prerequisite flag is off or serves another variation for this context.
A prerequisite acts as an upstream kill switch, so "disabled" is what a caller should conclude;
OpenFeature has no prerequisite reason and DISABLED is in OFREP's reason enum. The failing
prerequisite's key is in ``Evaluation.prerequisite_key``, and a relay's OFREP answer names it in
its ``metadata`` as ``prerequisiteFailed`` (``relay/routes/views.py``).

SPLIT is OpenFeature's "pseudorandom assignment", i.e. the value came from a percentage rollout.
"""

from __future__ import annotations

from shared.engine.model import ErrorKind, Evaluation, Reason

_REASONS = {
    Reason.OFF: "DISABLED",
    Reason.TARGET_MATCH: "TARGETING_MATCH",
    Reason.RULE_MATCH: "TARGETING_MATCH",
    Reason.FALLTHROUGH: "DEFAULT",
    Reason.PREREQUISITE_FAILED: "DISABLED",
    Reason.ERROR: "ERROR",
}

_ERROR_CODES = {
    ErrorKind.FLAG_NOT_FOUND: "FLAG_NOT_FOUND",
    ErrorKind.MALFORMED_FLAG: "PARSE_ERROR",
    ErrorKind.USER_NOT_SPECIFIED: "TARGETING_KEY_MISSING",
    ErrorKind.EXCEPTION: "GENERAL",
}


def openfeature_reason(evaluation: Evaluation) -> str:
    """The OpenFeature / OFREP ``reason`` for an evaluation."""
    if evaluation.in_rollout:
        return "SPLIT"
    return _REASONS[evaluation.reason]


def ofrep_error_code(evaluation: Evaluation) -> str | None:
    """The OFREP ``errorCode`` of an ``ERROR`` evaluation, ``None`` otherwise."""
    if evaluation.reason is not Reason.ERROR:
        return None
    if evaluation.error_kind is None:
        return "GENERAL"
    return _ERROR_CODES[evaluation.error_kind]
