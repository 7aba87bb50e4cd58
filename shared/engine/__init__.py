"""Vane's pure flag-evaluation engine: compile a snapshot once, evaluate it many times.

Standard library, msgspec and mmh3 only: no I/O, no clock, no logging. Compiling a malformed
snapshot raises ``CompileError``; evaluating never raises.
"""

from shared.engine.bucketing import WEIGHT_SCALE, bucket, experiment_bucket
from shared.engine.compile import (
    CompiledEnvironment,
    CompiledFlag,
    compile_patch,
    compile_snapshot,
    validate_flag,
    validate_segment,
)
from shared.engine.evaluator import context_key, evaluate, evaluate_all
from shared.engine.model import CompileError, ErrorKind, Evaluation, Reason
from shared.engine.openfeature import ofrep_error_code, openfeature_reason

__all__ = [
    "WEIGHT_SCALE",
    "CompileError",
    "CompiledEnvironment",
    "CompiledFlag",
    "ErrorKind",
    "Evaluation",
    "Reason",
    "bucket",
    "compile_patch",
    "compile_snapshot",
    "context_key",
    "evaluate",
    "evaluate_all",
    "experiment_bucket",
    "ofrep_error_code",
    "openfeature_reason",
    "validate_flag",
    "validate_segment",
]
