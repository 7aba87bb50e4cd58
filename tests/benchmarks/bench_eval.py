"""Vane's evaluation engine against the Python feature-flag SDKs, measured in the same run.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_eval [--runs 5] [--peers growthbook,unleash]

Workload and harness are the peer anchors' (``../shared/bench/peers``): ``gen_flags.py`` writes
equivalent configurations for every SDK (50 boolean flags, each ``country in [5 values]`` → true,
fallthrough 50/50 by user key; 100,000 seeded contexts) and ``eval_bench.py`` drives one SDK per
process. Vane gets the same loop template and timing function from ``eval_bench.py``.

* S1: flag-000 for each of 100,000 contexts (µs per evaluation).
* S2: all 50 flags for each of 10,000 contexts (µs per context); Vane uses ``evaluate_all``,
  the peers their per-flag call (and LaunchDarkly also its ``all_flags_state()``).

Every SDK runs in its own process pinned to one CPU (``--cpu``, default 0); each figure is the
median of ``--runs`` timed runs after one untimed warm-up. The peers are installed into a
separate virtualenv (``.venv-bench``, created on demand: the repository ``pip install -e .`` plus
the peers' pinned requirements) and never into the project's environment; a peer that cannot be
installed or run is reported as unavailable. The benchmark also compiles a 10,000-flag snapshot
and reports the time and memory that takes, with the garbage collector paused as a relay compiles
(``relay.store.gc_paused``), and the time again with it running, as the in-process provider
compiles (the engine leaves the collector to its caller).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
import tracemalloc
import venv
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PEERS_DIR = Path(os.environ.get("VANE_PEER_BENCH_DIR") or REPO.parent / "shared/bench/peers")
BENCH_VENV = REPO / ".venv-bench"

# eval_bench.py's SDK names -> the packages each needs (pinned in the peers' requirements.txt).
PEERS = {
    "growthbook": ["growthbook"],
    "launchdarkly": ["launchdarkly-server-sdk"],
    "unleash": ["UnleashClient"],
    "flagd-core": ["openfeature-sdk", "openfeature-provider-flagd"],
    "openfeature-flagd": ["openfeature-sdk", "openfeature-provider-flagd"],
}


def _load(name: str) -> ModuleType:
    """Import one of the peer harness's modules (``gen_flags``, ``eval_bench``) from its folder."""
    sys.path.insert(0, str(PEERS_DIR))
    spec = importlib.util.spec_from_file_location(name, PEERS_DIR / f"{name}.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"{name}.py not found in {PEERS_DIR}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------- Vane workloads


def vane_snapshot(n_flags: int) -> Any:
    """The gen_flags workload as a Vane snapshot."""
    from shared.wire.snapshot import (
        Clause,
        FlagSnapshot,
        Rule,
        Serve,
        Snapshot,
        Variation,
        WeightedVariation,
    )

    gen = _load("gen_flags")
    flags = {}
    for i in range(n_flags):
        key = gen.flag_key(i) if n_flags <= 1000 else f"flag-{i:05d}"
        flags[key] = FlagSnapshot(
            key=key,
            version=1,
            type="boolean",
            variations=(Variation(0, True), Variation(1, False)),
            enabled=True,
            off_variation=1,
            rules=(
                Rule(
                    id=f"{key}-r1",
                    clauses=(
                        Clause(op="in", attribute="country", values=tuple(gen.countries_for(i))),
                    ),
                    serve=Serve(variation=0),
                ),
            ),
            fallthrough=Serve(rollout=(WeightedVariation(0, 50_000), WeightedVariation(1, 50_000))),
        )
    return Snapshot(project="bench", environment="bench", version=1, flags=flags, segments={})


def vane_worker(data: Path, runs: int, n1: int, n2: int, out: Path) -> None:
    from importlib.metadata import version

    from shared.engine import compile_snapshot, evaluate, evaluate_all

    bench = _load("eval_bench")
    gen = _load("gen_flags")
    raw = [tuple(x) for x in json.loads((data / "contexts.json").read_text())]
    env = compile_snapshot(vane_snapshot(50))
    flags = [gen.flag_key(i) for i in range(50)]
    ctx1 = [{"key": k, "country": c} for k, c in raw[:n1]]
    ctx2 = ctx1[:n2]
    # Issue #23: the same users, each with the organization it belongs to (a two-kind context).
    two_kinds = [
        {"kind": "multi", "user": c, "organization": {"key": f"org-{i % 97}", "plan": "team"}}
        for i, c in enumerate(ctx2)
    ]

    namespace: dict[str, Any] = {"ev": evaluate, "env": env}
    exec(bench.LOOPS.format(call="ev(env, flag, c, 0).value", build="None", pre="pass"), namespace)

    def bulk(contexts: list[dict[str, str]], _flags: list[str]) -> int:
        t = 0
        for c in contexts:
            for result in evaluate_all(env, c, 0).values():
                if result.value:
                    t += 1
        return t

    match0 = set(gen.countries_for(0))
    sample = raw[:20_000]
    hits = {"rule": [0, 0], "fallthrough": [0, 0]}
    for key, country in sample:
        bucket = hits["rule" if country in match0 else "fallthrough"]
        bucket[0] += evaluate(env, "flag-000", {"key": key, "country": country}, 0).value is True
        bucket[1] += 1
    sanity = {
        "rule_match_true_share": round(hits["rule"][0] / hits["rule"][1], 4),
        "fallthrough_true_share": round(hits["fallthrough"][0] / hits["fallthrough"][1], 4),
    }
    rows = []
    for scenario, fn, contexts, arg, evals in [
        ("s1", namespace["one"], ctx1, "flag-000", len(ctx1)),
        ("s2", namespace["many"], ctx2, flags, len(ctx2) * len(flags)),
        ("s2-bulk", bulk, ctx2, flags, len(ctx2) * len(flags)),
        ("s2-two-kinds", bulk, two_kinds, flags, len(ctx2) * len(flags)),
    ]:
        times, trues = bench.timed(fn, contexts, arg, runs)
        median = statistics.median(times)
        rows.append(
            {
                "sdk": "vane",
                "versions": {"vane": version("vane")},
                "scenario": scenario,
                "mode": "eval",
                "runs_s": [round(t, 4) for t in times],
                "us_per_eval": median / evals * 1e6,
                "us_per_context": median / len(contexts) * 1e6,
                "true_share": round(trues / evals, 4),
                "sanity_flag000": sanity,
            }
        )
    rows.extend(provider_rows(bench, ctx1, runs))
    rows.append(compile_figures())
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))


def provider_rows(bench: ModuleType, contexts: list[dict[str, str]], runs: int) -> list[Any]:
    """S1 through Vane's in-process provider: its direct API, through OpenFeature, and
    OpenFeature's own floor (a provider that returns a constant) with the same contexts."""
    import msgspec
    from openfeature import api
    from openfeature.evaluation_context import EvaluationContext
    from openfeature.flag_evaluation import FlagResolutionDetails
    from openfeature.provider import AbstractProvider, Metadata

    from shared.client import VaneProvider
    from shared.wire import protocol

    class Constant(AbstractProvider):
        """OpenFeature's floor: a provider that answers ``true`` without looking at anything."""

        answer: FlagResolutionDetails[Any] = FlagResolutionDetails(value=True, reason="STATIC")

        def get_metadata(self) -> Metadata:
            return Metadata(name="constant")

        def resolve_boolean_details(
            self, flag_key: str, default_value: Any, evaluation_context: Any = None
        ) -> Any:
            return self.answer

        resolve_string_details = resolve_integer_details = resolve_boolean_details
        resolve_float_details = resolve_object_details = resolve_boolean_details

    class Preloaded(VaneProvider):
        def initialize(self, evaluation_context: EvaluationContext) -> None:
            """The snapshot is given, not streamed: nothing to connect to."""

    provider = Preloaded("http://127.0.0.1:9", "ssk_live_bench", track_exposures=False)
    message = protocol.SnapshotMessage(snapshot=vane_snapshot(50), access=protocol.Access())
    provider.flags.apply("snapshot", msgspec.json.encode(message).decode())
    api.set_provider_and_wait(provider, "vane")
    api.set_provider_and_wait(Constant(), "floor")
    of_contexts = [EvaluationContext(c["key"], {"country": c["country"]}) for c in contexts]
    namespace: dict[str, Any] = {
        "direct": provider.evaluate,
        "vane": api.get_client("vane").get_boolean_value,
        "floor": api.get_client("floor").get_boolean_value,
    }
    rows = []
    scenarios: list[tuple[str, str, Sequence[object]]] = [
        ("s1-provider-direct", "direct(flag, c, False)", contexts),
        ("s1-openfeature", "vane(flag, False, c)", of_contexts),
        ("s1-openfeature-floor", "floor(flag, False, c)", of_contexts),
    ]
    for scenario, call, ctxs in scenarios:
        exec(bench.LOOPS.format(call=call, build="None", pre="pass"), namespace)
        times, trues = bench.timed(namespace["one"], ctxs, "flag-000", runs)
        rows.append(
            {
                "sdk": "vane",
                "scenario": scenario,
                "us_per_eval": statistics.median(times) / len(ctxs) * 1e6,
                "true_share": round(trues / len(ctxs), 4),
            }
        )
    api.clear_providers()
    return rows


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def compile_figures(n_flags: int = 10_000, runs: int = 3) -> dict[str, Any]:
    import msgspec

    from relay.store import gc_paused
    from shared.engine import compile_snapshot
    from shared.wire.snapshot import Snapshot

    snapshot = vane_snapshot(n_flags)
    encoded = msgspec.msgpack.encode(snapshot)
    decode_snapshot = msgspec.msgpack.Decoder(Snapshot).decode
    decode_times, compile_times, collecting_times = [], [], []
    for _ in range(runs):
        gc.collect()
        t0 = time.perf_counter()
        decoded = decode_snapshot(encoded)
        t1 = time.perf_counter()
        with gc_paused():  # as the relay compiles
            compile_snapshot(decoded)
        t2 = time.perf_counter()
        decode_times.append(t1 - t0)
        compile_times.append(t2 - t1)
        gc.collect()
        t3 = time.perf_counter()
        compile_snapshot(decoded)  # as the in-process provider compiles: the collector running
        collecting_times.append(time.perf_counter() - t3)
    gc.collect()
    rss_before = _rss_bytes()
    with gc_paused():
        env = compile_snapshot(snapshot)
    gc.collect()
    rss_delta = _rss_bytes() - rss_before
    del env
    gc.collect()
    tracemalloc.start()
    with gc_paused():
        env = compile_snapshot(snapshot)
    gc.collect()
    retained, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del env
    return {
        "sdk": "vane",
        "scenario": "compile",
        "flags": n_flags,
        "snapshot_bytes": len(encoded),
        "decode_ms": statistics.median(decode_times) * 1e3,
        "compile_ms": statistics.median(compile_times) * 1e3,
        "compile_collecting_ms": statistics.median(collecting_times) * 1e3,
        "retained_mib": retained / 2**20,
        "peak_mib": peak / 2**20,
        "rss_delta_mib": rss_delta / 2**20,
    }


# ---------------------------------------------------------------------------------- orchestra


def _pins() -> dict[str, str]:
    pins = {}
    for line in (PEERS_DIR / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, _, ver = line.partition("==")
            pins[name.lower()] = f"{name}=={ver}"
    return pins


def _bench_python() -> Path:
    return BENCH_VENV / "bin" / "python"


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(_bench_python()), "-m", "pip", "install", "-q", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def _bench_dir() -> Path:
    """``.venv-bench``, which ignores itself so git never sees the venv, data or results."""
    BENCH_VENV.mkdir(exist_ok=True)
    ignore = BENCH_VENV / ".gitignore"
    if not ignore.exists():
        ignore.write_text("*\n")
    return BENCH_VENV


def ensure_bench_venv(peers: list[str]) -> dict[str, str]:
    """Create ``.venv-bench`` if needed and install the peers; returns {peer: why unavailable}."""
    problems: dict[str, str] = {}
    if not _bench_python().exists():
        print(f"creating {BENCH_VENV} ...", file=sys.stderr, flush=True)
        venv.EnvBuilder(with_pip=True).create(_bench_dir())
    marker = BENCH_VENV / ".vane-installed"
    if not marker.exists():
        result = _pip("-e", str(REPO))
        if result.returncode != 0:
            print(f"warning: pip install -e . failed:\n{result.stderr[-2000:]}", file=sys.stderr)
        else:
            marker.write_text("ok\n")
    pins = _pins()
    for peer in peers:
        done = BENCH_VENV / f".peer-{peer}"
        if done.exists():
            continue
        wanted = [pins.get(p.lower(), p) for p in PEERS[peer]]
        print(f"installing {peer}: {' '.join(wanted)} ...", file=sys.stderr, flush=True)
        result = _pip(*wanted)
        if result.returncode == 0:
            done.write_text(" ".join(wanted) + "\n")
        else:
            lines = result.stderr.strip().splitlines() or ["pip failed"]
            problems[peer] = f"not installable ({lines[-1][:120]})"
    return problems


def ensure_data(data: Path) -> None:
    if (data / "contexts.json").exists():
        return
    gen = _load("gen_flags")
    data.mkdir(parents=True, exist_ok=True)
    files = {
        "ld_flags.json": gen.launchdarkly(50),
        "unleash_features.json": gen.unleash(50),
        "growthbook_features.json": gen.growthbook(50),
        "flagd_flags.json": gen.flagd(50),
        "contexts.json": gen.contexts(100_000, 42),
    }
    for name, content in files.items():
        (data / name).write_text(json.dumps(content))


def _pinned(cpu: int) -> Any:
    return lambda: os.sched_setaffinity(0, {cpu})


def run_vane(args: argparse.Namespace, data: Path, out: Path) -> list[dict[str, Any]]:
    cmd = [sys.executable, "-m", "tests.benchmarks.bench_eval", "--worker", "--data", str(data)]
    cmd += ["--runs", str(args.runs), "--n1", str(args.n1), "--n2", str(args.n2), "--out", str(out)]
    subprocess.run(cmd, cwd=REPO, check=True, preexec_fn=_pinned(args.cpu))
    return [json.loads(line) for line in out.read_text().splitlines()]


def run_peer(
    peer: str, args: argparse.Namespace, data: Path, out: Path
) -> tuple[list[dict[str, Any]], str | None]:
    cmd = [str(_bench_python()), str(PEERS_DIR / "eval_bench.py"), peer, str(data)]
    cmd += ["--runs", str(args.runs), "--out", str(out), "--skip-build"]
    cmd += ["--n1", str(args.n1), "--n2", str(args.n2)]
    print(f"running {peer} ...", file=sys.stderr, flush=True)
    result = subprocess.run(
        cmd, capture_output=True, text=True, check=False, preexec_fn=_pinned(args.cpu)
    )
    if result.returncode != 0 or not out.exists():
        lines = result.stderr.strip().splitlines() or ["no output"]
        return [], f"failed to run ({lines[-1][:120]})"
    return [json.loads(line) for line in out.read_text().splitlines()], None


def _row(rows: list[dict[str, Any]], scenario: str) -> dict[str, Any] | None:
    return next((r for r in rows if r.get("scenario") == scenario), None)


def provider_lines(
    vane: list[dict[str, Any]], peers: dict[str, tuple[list[dict[str, Any]], str | None]]
) -> list[str]:
    """Vane's provider beside the peers: through OpenFeature (against flagd's in-process
    provider and OpenFeature's floor), and its direct API (against the fastest peer SDK)."""
    direct = _row(vane, "s1-provider-direct")
    through = _row(vane, "s1-openfeature")
    floor = _row(vane, "s1-openfeature-floor")
    if direct is None or through is None or floor is None:
        return []
    lines = [
        "",
        "| provider figure (S1, µs/eval) | Vane | peer | ratio |",
        "|---|---:|---|---:|",
        f"| through OpenFeature vs its floor (constant provider) | {through['us_per_eval']:.2f} "
        f"| OpenFeature floor: {floor['us_per_eval']:.2f} "
        f"| {through['us_per_eval'] / floor['us_per_eval']:.2f}x of the floor |",
    ]
    flagd = _row(peers.get("openfeature-flagd", ([], None))[0], "s1")
    if flagd:
        lines.append(
            f"| through OpenFeature | {through['us_per_eval']:.2f} | flagd in-process provider: "
            f"{flagd['us_per_eval']:.2f} | {flagd['us_per_eval'] / through['us_per_eval']:.1f}x |"
        )
    fastest = min(
        (
            (row["us_per_eval"], name)
            for name, (rows, problem) in peers.items()
            if not problem and name != "openfeature-flagd"
            for row in [_row(rows, "s1")]
            if row
        ),
        default=None,
    )
    if fastest:
        lines.append(
            f"| direct API `provider.evaluate` | {direct['us_per_eval']:.2f} | fastest peer "
            f"({fastest[1]}): {fastest[0]:.2f} | {fastest[0] / direct['us_per_eval']:.1f}x |"
        )
    return lines


def render(
    vane: list[dict[str, Any]],
    peers: dict[str, tuple[list[dict[str, Any]], str | None]],
    args: argparse.Namespace,
) -> str:
    s1, s2_bulk, s2_each = _row(vane, "s1"), _row(vane, "s2-bulk"), _row(vane, "s2")
    if s1 is None or s2_bulk is None or s2_each is None:
        raise SystemExit("the Vane worker produced no results")
    lines = [
        f"Vane evaluation benchmark: median of {args.runs} runs, one process per SDK pinned to "
        f"CPU {args.cpu}; S1 = flag-000 x {args.n1:,} contexts, S2 = 50 flags x {args.n2:,} "
        "contexts. Ratio = peer time / Vane time.",
        "",
        "| figure | Vane | peer | ratio |",
        "|---|---:|---|---:|",
    ]
    for peer, (rows, problem) in peers.items():
        if problem:
            lines.append(f"| S1 µs/eval, S2 µs/context | | {peer}: unavailable, {problem} | |")
            continue
        p1, p2, p2_bulk = _row(rows, "s1"), _row(rows, "s2"), _row(rows, "s2-bulk")
        versions = ", ".join(f"{k} {v}" for k, v in (rows[0].get("versions") or {}).items())
        if p1:
            lines.append(
                f"| S1 µs/eval | {s1['us_per_eval']:.2f} | {versions}: {p1['us_per_eval']:.2f} "
                f"| {p1['us_per_eval'] / s1['us_per_eval']:.1f}x |"
            )
        if p2:
            lines.append(
                f"| S2 µs/context | {s2_bulk['us_per_context']:.1f} (evaluate_all) | {versions}, "
                f"50 per-flag calls: {p2['us_per_context']:.1f} | "
                f"{p2['us_per_context'] / s2_bulk['us_per_context']:.1f}x |"
            )
        if p2_bulk:
            lines.append(
                f"| S2 µs/context | {s2_bulk['us_per_context']:.1f} (evaluate_all) | {versions}, "
                f"bulk call: {p2_bulk['us_per_context']:.1f} | "
                f"{p2_bulk['us_per_context'] / s2_bulk['us_per_context']:.1f}x |"
            )
    lines += provider_lines(vane, peers)
    comp = _row(vane, "compile")
    lines += [
        "",
        f"Vane alone: S1 {s1['us_per_eval']:.2f} µs/eval (true share {s1['true_share']}, "
        f"flag-000 sanity {s1['sanity_flag000']}); S2 with 50 `evaluate` calls "
        f"{s2_each['us_per_context']:.1f} µs/context, with `evaluate_all` "
        f"{s2_bulk['us_per_context']:.1f} µs/context.",
    ]
    two = _row(vane, "s2-two-kinds")
    if two:
        lines.append(
            f"S2 with a two-kind context (user and organization, `evaluate_all`): "
            f"{two['us_per_context']:.1f} µs/context, "
            f"{two['us_per_context'] / s2_bulk['us_per_context']:.2f}x the single-kind context "
            "(target ≤ 1.3x)."
        )
    if comp:
        lines.append(
            f"Snapshot of {comp['flags']:,} flags ({comp['snapshot_bytes'] / 2**20:.1f} MiB "
            f"msgpack): decode {comp['decode_ms']:.0f} ms, compile {comp['compile_ms']:.0f} ms "
            f"(median of 3; the garbage collector paused, as in a relay: "
            f"{comp['compile_collecting_ms']:.0f} ms with it running, as in the in-process "
            f"provider); compiled environment retains {comp['retained_mib']:.1f} MiB "
            f"(tracemalloc; peak {comp['peak_mib']:.1f} MiB), RSS +{comp['rss_delta_mib']:.1f} MiB."
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cpu", type=int, default=0)
    parser.add_argument("--n1", type=int, default=100_000, help="contexts for S1")
    parser.add_argument("--n2", type=int, default=10_000, help="contexts for S2")
    parser.add_argument("--peers", default=",".join(PEERS), help="comma-separated, or 'none'")
    parser.add_argument("--data", type=Path, default=BENCH_VENV / "data")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        vane_worker(args.data, args.runs, args.n1, args.n2, args.out)
        return

    peers = [] if args.peers == "none" else [p for p in args.peers.split(",") if p]
    unknown = sorted(set(peers) - set(PEERS))
    if unknown:
        parser.error(f"unknown peers: {', '.join(unknown)} (known: {', '.join(PEERS)})")
    _bench_dir()
    problems = ensure_bench_venv(peers) if peers else {}
    ensure_data(args.data)
    results_dir = BENCH_VENV / "results" / time.strftime("%Y%m%dT%H%M%S")
    results_dir.mkdir(parents=True, exist_ok=True)
    print("running vane ...", file=sys.stderr, flush=True)
    vane = run_vane(args, args.data, results_dir / "vane.jsonl")
    measured: dict[str, tuple[list[dict[str, Any]], str | None]] = {}
    for peer in peers:
        if peer in problems:
            measured[peer] = ([], problems[peer])
        else:
            measured[peer] = run_peer(peer, args, args.data, results_dir / f"{peer}.jsonl")
    print(render(vane, measured, args))


if __name__ == "__main__":
    main()
