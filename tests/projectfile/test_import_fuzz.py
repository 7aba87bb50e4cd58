"""Any file given to an import converts or is refused with a message (issue #36): random JSON
in the shape of each product's file never raises anything but ``Refused`` (which the CLI
prints, exiting 1), so a bad file never ends in a traceback."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from control_plane.domain.projectfile.imports import Refused, flagd, launchdarkly, unleash
from control_plane.domain.projectfile.imports.environments import Wanted

SCALARS = st.none() | st.booleans() | st.integers(-3, 100_001) | st.sampled_from(
    ["a", "A", "in", "IN", "default", "flexibleRollout", "userWithId", "if", "var", "key",
     "segmentMatch", "fractional", "ENABLED", "DISABLED", "50", "x.y", "targetingKey"]
)  # fmt: skip
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "variation",
                    "rollout",
                    "variations",
                    "weight",
                    "clauses",
                    "op",
                    "values",
                    "attribute",
                    "if",
                    "in",
                    "var",
                    "==",
                    "<",
                    "and",
                    "or",
                    "fractional",
                    "$ref",
                    "name",
                    "parameters",
                    "constraints",
                    "operator",
                    "contextName",
                    "value",
                    "segments",
                    "enabled",
                    "environment",
                    "featureName",
                    "strategies",
                    "contextKind",
                    "on",
                ]
            ),
            inner,
            max_size=5,
        )
    ),
    max_leaves=25,
)
LD_FLAG = st.fixed_dictionaries(
    {"variations": JSON, "on": JSON, "offVariation": JSON, "fallthrough": JSON},
    optional={"rules": JSON, "targets": JSON, "contextTargets": JSON, "prerequisites": JSON},
)
FLAGD_FLAG = st.fixed_dictionaries(
    {"variants": st.dictionaries(st.sampled_from(["a", "b", "on"]), JSON, max_size=3)},
    optional={"defaultVariant": JSON, "targeting": JSON, "state": JSON},
)
UNLEASH = st.fixed_dictionaries(
    {
        "features": st.lists(st.fixed_dictionaries({"name": SCALARS}, optional={"type": JSON})),
        "featureStrategies": st.lists(
            st.fixed_dictionaries(
                {"featureName": SCALARS, "environment": st.just("production")},
                optional={"name": JSON, "parameters": JSON, "constraints": JSON, "segments": JSON},
            )
        ),
    },
    optional={"featureEnvironments": JSON, "segments": JSON},
)
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def converts_or_refuses(convert: Any, data: Any, wanted: Wanted | str = "production") -> None:
    message = "converted"
    try:
        convert(data, wanted)
    except Refused as refused:
        message = str(refused)
    assert message


@FUZZ
@given(st.dictionaries(st.sampled_from(["f", "G"]), LD_FLAG, max_size=2), JSON)
def test_launchdarkly_files(flags: Any, segments: Any) -> None:
    converts_or_refuses(launchdarkly.convert, {"flags": flags, "segments": segments})


@FUZZ
@given(st.dictionaries(st.sampled_from(["f", "g"]), FLAGD_FLAG, max_size=2), JSON)
def test_flagd_files(flags: Any, evaluators: Any) -> None:
    converts_or_refuses(flagd.convert, {"flags": flags, "$evaluators": evaluators})


@FUZZ
@given(UNLEASH)
def test_unleash_files(data: Any) -> None:
    converts_or_refuses(unleash.convert, data)


ENVIRONMENTS = st.sampled_from(["production", "development", "Test"])
LD_ITEMS = st.lists(
    st.fixed_dictionaries(
        {
            "key": st.sampled_from(["f", "G"]),
            "variations": st.lists(st.fixed_dictionaries({"value": JSON}), max_size=3) | JSON,
            "environments": st.dictionaries(ENVIRONMENTS, LD_FLAG | JSON, max_size=3),
        }
    ),
    max_size=2,
)
UNLEASH_ENVIRONMENTS = st.fixed_dictionaries(
    {
        "features": st.lists(st.fixed_dictionaries({"name": SCALARS}, optional={"type": JSON})),
        "featureStrategies": st.lists(
            st.fixed_dictionaries(
                {"featureName": st.sampled_from(["a", "b"]), "environment": ENVIRONMENTS},
                optional={"name": JSON, "parameters": JSON, "variants": JSON},
            )
        ),
        "featureEnvironments": st.lists(
            st.fixed_dictionaries(
                {"featureName": st.sampled_from(["a", "b"]), "environment": ENVIRONMENTS},
                optional={"enabled": JSON, "variants": JSON},
            )
        ),
    },
    optional={"environments": JSON},
)
WANTED = st.builds(
    Wanted,
    st.lists(st.sampled_from(["production", "development=staging", "Test", "x=y"]), max_size=2).map(
        tuple
    ),
    st.booleans(),
)


@FUZZ
@given(LD_ITEMS, WANTED)
def test_launchdarkly_rest_lists_of_several_environments(items: Any, wanted: Wanted) -> None:
    converts_or_refuses(launchdarkly.convert, {"items": items}, wanted)


@FUZZ
@given(UNLEASH_ENVIRONMENTS, WANTED)
def test_unleash_exports_of_several_environments(data: Any, wanted: Wanted) -> None:
    converts_or_refuses(unleash.convert, data, wanted)
