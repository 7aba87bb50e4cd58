"""Bucketing: pinned values, flagd's murmur3 vectors, uniformity and stickiness."""

from __future__ import annotations

from typing import Any

import pytest
from scipy.stats import chisquare

from shared.engine import Reason, bucket, evaluate, experiment_bucket
from shared.engine.bucketing import choose, cumulative, hash32

from .builders import environment, flag

# Pinned when the engine was written; a change here changes every user's assignment.
PINNED = [
    # (salt, value, unsigned murmur3 of salt + value, bucket)
    ("", "abc", 3017643002, 70259),  # 0xB3DD93FA: the published MurmurHash3_x86_32 "abc" vector
    ("", "", 0, 0),
    ("flag-000", "u-1", 1107001596, 25774),
    ("my-flag", "user-123", 680103842, 15834),
    ("checkout-redesign", "alice", 1059590928, 24670),
    ("salt", "été", 3789284322, 88226),  # non-ASCII: hashed as UTF-8
    ("flag", "\ud800", 2482071036, 57790),  # lone surrogate: hashed as surrogatepass bytes
]


@pytest.mark.parametrize(("salt", "value", "h", "expected"), PINNED)
def test_pinned_buckets(salt: str, value: str, h: int, expected: int) -> None:
    assert hash32(salt + value) == h
    assert bucket(salt, value) == expected
    assert expected == (h * 100_000) >> 32


def test_experiment_bucket_hashes_key_dot_unit() -> None:
    assert experiment_bucket("homepage-cta", "visitor-42") == 13415
    assert experiment_bucket("pricing", "u-7") == 78013
    assert experiment_bucket("a.b", "c") == bucket("", "a.b.c")


def test_choose_takes_first_cumulative_weight_above_the_bucket() -> None:
    thresholds = cumulative([0, 25_000, 75_000])
    assert choose(thresholds, 0) == 1  # a zero-weight item is never chosen
    assert choose(thresholds, 24_999) == 1
    assert choose(thresholds, 25_000) == 2
    assert choose(thresholds, 99_999) == 2
    assert choose(cumulative([10, 10]), 50_000) == 1  # short weights: the last item


# ------------------------------------------------------------------------ flagd-testbed vectors
# From open-feature/flagd-testbed, evaluator/gherkin/fractional.feature (commit 0df2cd0a), the
# "@fractional-v2" examples, which bucket as (hash * totalWeight) >> 32, with the flags of
# evaluator/flags/testkit-flags.json (commit 0815d197):
#   fractional-flag:        bucketing value {"cat": [$flagd.flagKey, user.name]}, clubs/diamonds/
#                           hearts/spades at 25 each
#   fractional-flag-shorthand: default bucketing value flagKey + targetingKey, heads/tails 1:1
#   fractional-flag-{A,B}-shared-seed: {"cat": ["shared-seed", user.name]}, suits at 25 each
#                           (B's variants are "ace-of-<suit>")
#   fractional-hash-edge-flag: bucketing value targetingKey alone, lower/upper 50/50; keys chosen
#                           so the murmur3 lands on the bucket boundaries
# In Vane terms the concatenated prefix is the salt and user.name the bucketBy attribute.
SUITS = ("clubs", "diamonds", "hearts", "spades")
FLAGD_VECTORS: list[tuple[str, str | None, tuple[str, ...], dict[str, str]]] = [
    # (flag key, salt, variants, {bucketing input: expected variant})
    (
        "fractional-flag",
        None,
        SUITS,
        {"jack": "hearts", "queen": "spades", "ten": "clubs", "nine": "diamonds", "3": "clubs"},
    ),
    (
        "fractional-flag-A-shared-seed",
        "shared-seed",
        SUITS,
        {"seven": "hearts", "eight": "diamonds", "nine": "clubs", "two": "spades"},
    ),
    (
        "fractional-flag-B-shared-seed",
        "shared-seed",
        tuple(f"ace-of-{s}" for s in SUITS),
        {
            "seven": "ace-of-hearts",
            "eight": "ace-of-diamonds",
            "nine": "ace-of-clubs",
            "two": "ace-of-spades",
        },
    ),
]


def _even(n: int) -> list[tuple[int, int]]:
    return [(i, 100_000 // n) for i in range(n)]


@pytest.mark.parametrize(("flag_key", "salt", "variants", "cases"), FLAGD_VECTORS)
def test_flagd_fractional_vectors_by_user_name(
    flag_key: str, salt: str | None, variants: tuple[str, ...], cases: dict[str, str]
) -> None:
    env = environment(
        flag(
            flag_key,
            variations=variants,
            off=0,
            fallthrough=_even(len(variants)),
            bucket_by="name",
            salt=salt,
        )
    )
    got = {name: evaluate(env, flag_key, {"key": "k", "name": name}, 0).value for name in cases}
    assert got == cases


def test_flagd_shorthand_vectors_use_flag_key_and_targeting_key() -> None:
    env = environment(
        flag(
            "fractional-flag-shorthand", variations=("heads", "tails"), off=0, fallthrough=_even(2)
        )
    )
    for targeting_key, expected in [("jon@company.com", "heads"), ("jane@company.com", "tails")]:
        result = evaluate(env, "fractional-flag-shorthand", {"targetingKey": targeting_key}, 0)
        assert (result.value, result.in_rollout) == (expected, True)


@pytest.mark.parametrize(
    ("targeting_key", "expected"),
    [
        ("ejOoVL", "lower"),
        ("bY9fO-", "lower"),
        ("SI7p-", "lower"),
        ("6LvT0", "upper"),
        ("ceQdGm", "upper"),
    ],
)
def test_flagd_hash_edge_vectors(targeting_key: str, expected: str) -> None:
    env = environment(
        flag(
            "fractional-hash-edge-flag",
            variations=("lower", "upper"),
            off=0,
            fallthrough=_even(2),
            salt="",
        )
    )
    result = evaluate(env, "fractional-hash-edge-flag", {"targetingKey": targeting_key}, 0)
    assert result.value == expected


# ------------------------------------------------------------------------------- distribution


def test_buckets_are_uniform_over_100_bins() -> None:
    counts = [0] * 100
    for i in range(100_000):
        counts[bucket("uniformity-check", f"user-{i}") // 1000] += 1
    assert chisquare(counts).pvalue > 0.001


def test_raising_a_rollout_keeps_everyone_who_was_in() -> None:
    def rollout(percent: int) -> Any:
        return environment(
            flag("sticky", fallthrough=[(0, percent * 1000), (1, 100_000 - percent * 1000)])
        )

    before, after = rollout(10), rollout(20)
    keys = [f"user-{i}" for i in range(20_000)]
    was_in = {k for k in keys if evaluate(before, "sticky", {"key": k}, 0).value is True}
    now_in = {k for k in keys if evaluate(after, "sticky", {"key": k}, 0).value is True}
    assert was_in <= now_in
    assert 1800 < len(was_in) < 2200
    assert 3700 < len(now_in) < 4300


# ----------------------------------------------------------------------------- bucketBy values


@pytest.fixture
def by_org() -> Any:
    # bucket("by-org", "44") = 82412 -> second item; bucket 0 -> first item.
    return environment(
        flag(
            "by-org", variations=("first", "second"), off=0, fallthrough=_even(2), bucket_by="orgId"
        )
    )


@pytest.mark.parametrize("org", ["44", 44, 44.0])
def test_integral_numbers_bucket_like_their_decimal_string(by_org: Any, org: Any) -> None:
    assert bucket("by-org", "44") == 82412
    assert evaluate(by_org, "by-org", {"key": "k", "orgId": org}, 0).value == "second"


@pytest.mark.parametrize("org", [None, True, 44.5, [44], {"id": 44}, "missing"])
def test_unbucketable_or_missing_attribute_gets_the_first_item(by_org: Any, org: Any) -> None:
    context: dict[str, Any] = {"key": "k"} if org == "missing" else {"key": "k", "orgId": org}
    result = evaluate(by_org, "by-org", context, 0)
    assert (result.value, result.reason, result.in_rollout) == ("first", Reason.FALLTHROUGH, True)


def test_rollout_skips_a_zero_weight_first_item_for_bucket_zero(by_org: Any) -> None:
    env = environment(
        flag(
            "z",
            variations=("never", "always"),
            off=0,
            fallthrough=[(0, 0), (1, 100_000)],
            bucket_by="orgId",
        )
    )
    assert evaluate(env, "z", {"key": "k"}, 0).value == "always"


def test_serve_bucket_by_overrides_the_flags() -> None:
    from shared.wire.snapshot import Serve, WeightedVariation

    rollout = Serve(
        rollout=(WeightedVariation(0, 50_000), WeightedVariation(1, 50_000)), bucket_by="orgId"
    )
    env = environment(
        flag("o", variations=("first", "second"), off=0, fallthrough=rollout, salt="by-org")
    )
    assert evaluate(env, "o", {"key": "k", "orgId": "44"}, 0).value == "second"
    assert evaluate(env, "o", {"key": "k"}, 0).value == "first"
