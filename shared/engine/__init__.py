"""Vane's pure flag-evaluation engine: compile a snapshot once, evaluate it many times.

Standard library, msgspec and mmh3 only: no I/O, no clock, no logging, and no say over the
process (the garbage collector is the caller's). Compiling a malformed snapshot raises
``CompileError``; evaluating never raises.

Modules, one job each: ``contexts`` says how a rule finds what it reads (context kinds,
multi-kind contexts, attribute references); ``rules`` and ``operators`` compile clauses, rules
and segments into matchers; ``closures`` builds one flag's evaluation closure; ``graph`` holds the dependency
graph's rules (who names whom, order, cycles, nesting); ``snapshot`` compiles whole snapshots
and patches; ``presave`` checks one flag or segment for the control plane before it is saved; ``evaluator``
runs the compiled result.
"""

from shared.engine.bucketing import WEIGHT_SCALE, bucket, experiment_bucket
from shared.engine.contexts import context_problem, exposure_unit, unit_key
from shared.engine.evaluator import context_key, evaluate, evaluate_all
from shared.engine.graph import Chains, prerequisite_cycle, segments_named
from shared.engine.model import CompileError, ErrorKind, Evaluation, Reason
from shared.engine.openfeature import ofrep_error_code, openfeature_reason
from shared.engine.presave import validate_flag, validate_segment
from shared.engine.snapshot import (
    CompiledEnvironment,
    CompiledFlag,
    compile_patch,
    compile_snapshot,
)

__all__ = [
    "WEIGHT_SCALE",
    "Chains",
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
    "context_problem",
    "evaluate",
    "evaluate_all",
    "experiment_bucket",
    "exposure_unit",
    "ofrep_error_code",
    "openfeature_reason",
    "prerequisite_cycle",
    "segments_named",
    "unit_key",
    "validate_flag",
    "validate_segment",
]
