"""Ratio metrics (Σy/Σz per arm, e.g. revenue per order) under every engine, CUPED included,
against an independent computation on the per-unit arrays with numpy and scipy: the delta
method's linearised values u = (y - r z)/z̄, and for CUPED v = (x - s w)/w̄ with one pooled θ."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

from control_plane.analysis import analyse, moments_from_values

Array = npt.NDArray[np.float64]
TOL = 1e-9


def arm(rng: np.random.Generator, n: int, lift: float) -> dict[str, Array]:
    """Orders per unit (z) and revenue (y) after exposure, and the same two before (w, x),
    correlated through each unit's own spending level."""
    level = rng.gamma(2.0, 20.0, n)
    w = rng.poisson(2.0, n).astype(float)
    x = np.array(
        [rng.gamma(2.0, lv / 2.0, k).sum() for lv, k in zip(level, w.astype(int), strict=False)]
    )
    z = rng.poisson(2.0, n).astype(float)
    y = np.array(
        [
            rng.gamma(2.0, lv * lift / 2.0, k).sum()
            for lv, k in zip(level, z.astype(int), strict=False)
        ]
    )
    return {"y": y, "z": z, "x": x, "w": w}


def linearised(
    a: dict[str, Array], r: float, z_bar: float, rho: float, w_bar: float
) -> tuple[Array, Array]:
    return (a["y"] - r * a["z"]) / z_bar, (a["x"] - rho * a["w"]) / w_bar


def reference(arms: dict[str, dict[str, Array]], cuped: bool) -> dict[str, dict[str, float]]:
    """Per arm: its estimate and per-unit variance, CUPED-adjusted when asked."""
    pooled = {k: np.concatenate([a[k] for a in arms.values()]) for k in "yzxw"}
    r_p, rho_p = pooled["y"].sum() / pooled["z"].sum(), pooled["x"].sum() / pooled["w"].sum()
    u_p, v_p = linearised(pooled, r_p, pooled["z"].mean(), rho_p, pooled["w"].mean())
    theta = np.cov(u_p, v_p, ddof=1)[0, 1] / v_p.var(ddof=1)
    out = {}
    for key, a in arms.items():
        r, rho = a["y"].sum() / a["z"].sum(), a["x"].sum() / a["w"].sum()
        u, v = linearised(a, r, a["z"].mean(), rho, a["w"].mean())
        if cuped:
            out[key] = {"mean": r - theta * (rho - rho_p), "var": (u - theta * v).var(ddof=1)}
        else:
            out[key] = {"mean": r, "var": u.var(ddof=1)}
        out[key] |= {"n": float(a["y"].size), "raw_var": u.var(ddof=1), "theta": theta}
    return out


@pytest.fixture(scope="module")
def data() -> dict[str, dict[str, Array]]:
    rng = np.random.default_rng(2026)
    return {"control": arm(rng, 4_000, 1.0), "b": arm(rng, 4_100, 1.04)}


def moments(a: dict[str, Array]):  # type: ignore[no-untyped-def]
    return moments_from_values(a["y"], z=a["z"], x=a["x"], w=a["w"])


def run(data: dict[str, dict[str, Array]], engine: str, cuped: bool):  # type: ignore[no-untyped-def]
    return analyse(
        moments(data["control"]),
        {"b": moments(data["b"])},
        engine=engine,  # type: ignore[arg-type]
        ratio=True,
        cuped=cuped,
    )


@pytest.mark.parametrize("cuped", [False, True])
def test_frequentist_ratio_means_variances_and_p_values(
    data: dict[str, dict[str, Array]], cuped: bool
) -> None:
    ref = reference(data, cuped)
    res = run(data, "frequentist", cuped)
    c, t = ref["control"], ref["b"]
    for summary, want in ((res.control, c), (res.treatments["b"], t)):
        mean = summary.adjusted_mean if cuped else summary.mean
        variance = summary.adjusted_variance if cuped else summary.variance
        assert mean == pytest.approx(want["mean"], rel=TOL)
        assert variance == pytest.approx(want["var"], rel=TOL)
        assert summary.variance == pytest.approx(want["raw_var"], rel=TOL)  # unadjusted, too
    se = math.sqrt(t["var"] / t["n"] + c["var"] / c["n"])
    z = (t["mean"] - c["mean"]) / se
    comparison = res.comparisons["b"]
    assert comparison.test == "z"
    assert comparison.difference == pytest.approx(t["mean"] - c["mean"], rel=TOL)
    assert comparison.std_error == pytest.approx(se, rel=TOL)
    assert comparison.p_value == pytest.approx(2 * stats.norm.sf(abs(z)), rel=TOL)
    if cuped:
        assert res.cuped is not None
        assert res.cuped.applied
        assert res.cuped.theta == pytest.approx(t["theta"], rel=TOL)
        raw = t["raw_var"] / t["n"] + c["raw_var"] / c["n"]
        assert comparison.variance_reduction == pytest.approx(1 - se * se / raw, rel=TOL)
        assert comparison.variance_reduction > 0.1  # the pre-exposure ratio explains some


@pytest.mark.parametrize("cuped", [False, True])
def test_bayesian_ratio_posterior(data: dict[str, dict[str, Array]], cuped: bool) -> None:
    ref = reference(data, cuped)
    c, t = ref["control"], ref["b"]
    s2 = t["var"] / t["n"] / t["mean"] ** 2 + c["var"] / c["n"] / c["mean"] ** 2
    precision = 1 / s2 + 1 / 0.3**2  # the default prior N(0, 0.3²) on the log lift
    mu, sd = math.log(t["mean"] / c["mean"]) / s2 / precision, math.sqrt(1 / precision)
    comparison = run(data, "bayesian", cuped).comparisons["b"]
    assert comparison.chance_to_beat_control == pytest.approx(stats.norm.cdf(mu / sd), rel=TOL)
    assert comparison.uplift == pytest.approx(100 * math.expm1(mu + sd * sd / 2), rel=TOL)
    q = stats.norm.ppf(0.975)
    assert comparison.ci_low == pytest.approx(100 * math.expm1(mu - q * sd), rel=TOL)


@pytest.mark.parametrize("cuped", [False, True])
def test_sequential_ratio_always_valid_p_value(
    data: dict[str, dict[str, Array]], cuped: bool
) -> None:
    ref = reference(data, cuped)
    c, t = ref["control"], ref["b"]
    v = t["var"] / t["n"] + c["var"] / c["n"]
    tau2 = 0.05**2 * (t["raw_var"] + c["raw_var"]) / 2  # the default mixing sd, raw variances
    theta = t["mean"] - c["mean"]
    likelihood = math.sqrt(v / (v + tau2)) * math.exp(tau2 * theta**2 / (2 * v * (v + tau2)))
    comparison = run(data, "sequential", cuped).comparisons["b"]
    assert comparison.always_valid_p_value == pytest.approx(min(1.0, 1 / likelihood), rel=TOL)
    half = math.sqrt(v * (v + tau2) / tau2 * (math.log((v + tau2) / v) + 2 * math.log(1 / 0.05)))
    assert comparison.difference_ci_low == pytest.approx(theta - half, rel=TOL)


def test_cuped_ratio_intervals_cover_and_narrow_in_a_a_runs() -> None:
    """Under no effect the adjusted 95 % interval covers 0 at its nominal rate, and it is
    narrower than the unadjusted one."""
    rng = np.random.default_rng(5)
    covered = narrower = 0
    runs = 400
    for _ in range(runs):
        data = {"control": arm(rng, 400, 1.0), "b": arm(rng, 400, 1.0)}
        adjusted = run(data, "frequentist", True).comparisons["b"]
        plain = run(data, "frequentist", False).comparisons["b"]
        assert adjusted.difference_ci_low is not None
        assert adjusted.difference_ci_high is not None
        assert plain.difference_ci_low is not None
        assert plain.difference_ci_high is not None
        covered += adjusted.difference_ci_low <= 0 <= adjusted.difference_ci_high
        narrower += (adjusted.difference_ci_high - adjusted.difference_ci_low) < (
            plain.difference_ci_high - plain.difference_ci_low
        )
    assert 0.92 <= covered / runs <= 0.98
    assert narrower / runs > 0.9
