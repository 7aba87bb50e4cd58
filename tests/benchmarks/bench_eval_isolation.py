"""One public key's worst evaluation against ``/healthz`` on the same relay (issue #33).

A relay serves an environment whose flags hold the most expensive regular expressions the API
accepts (each flag at the budget of ``shared.engine.operators``: patterns whose DFA cannot fit,
so RE2 runs its NFA); one client sends, back to back, OFREP bulk evaluations whose attribute is
the longest one a ``matches`` clause searches (16 KiB of random a/b). Meanwhile ``/healthz`` is
asked every 10 ms; the table prints its latency. "inline" runs the same evaluations on the event
loop (what the relay did before: 14.7 s reported from outside), "worker" is the relay as it is.

``in``: an environment that does not search at all (10 flags of four rules ``a in ["needle"]``)
and a body near 1 MiB whose ``a`` is an array of 300,000 strings: each clause looks up every
element. "inline" is the relay before a large context went to the worker thread.
"""

from __future__ import annotations

import dataclasses
import random
import subprocess
import sys
import threading
import time

import httpx

from tests.benchmarks.common import REPO, Row, ms, percentile, print_table
from tests.processes import free_port

FLAGS = 10
SECONDS = 8.0


def _serve(port: int, inline: bool, op: str) -> None:
    import uvicorn

    from relay.prometheus import RelayMetrics
    from relay.routes.compose import build_http_app
    from relay.store import EnvironmentState, Store
    from shared.engine.operators import MAX_CLAUSE_PROGRAM_SIZE, MAX_RULES_PROGRAM_SIZE
    from shared.wire.snapshot import Clause, Rule, Serve, Snapshot
    from tests.relay.helpers import ENV, _flag, public_access, settings

    pattern = "[ab]*a[ab]{240}c"  # 247 instructions, 2^240 DFA states
    per_clause = MAX_CLAUSE_PROGRAM_SIZE // 247
    clauses = MAX_RULES_PROGRAM_SIZE // (per_clause * 247)
    if op == "contains":  # 512 distinct values a clause, two clauses: the budget again
        pattern, per_clause, clauses = "", MAX_CLAUSE_PROGRAM_SIZE, 2
    values = (
        tuple(f"{'a' * 20}{k:03d}c" for k in range(per_clause))
        if op == "contains"
        else (pattern,) * per_clause
    )
    if op == "in":  # no search at all; four clauses a flag naming the same array attribute
        values, clauses = ("needle",), 4
    flags = {
        f"f{i}": _flag(
            f"f{i}",
            [True, False],
            rules=tuple(
                Rule(
                    id=f"r{j}",
                    clauses=(
                        Clause(op=op, attribute="a" if op == "in" else f"s{j}", values=values),
                    ),
                    serve=Serve(variation=0),
                )
                for j in range(clauses)
            ),
        )
        for i in range(FLAGS)
    }
    snapshot = Snapshot(project="p", environment=ENV, version=1, flags=flags, segments={})
    state = EnvironmentState.build(snapshot, public_access())
    if inline:
        from relay.routes import evaluation

        state = dataclasses.replace(state, search_units=0)
        evaluation.INLINE_CONTEXT_BYTES = 1 << 30  # every context on the loop, as before
    store = Store()
    store.swap(state)
    store.connected = True
    store.upstream_alive()
    app = build_http_app(store, settings(), RelayMetrics(store))

    async def asgi(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        await app(scope, receive, send)

    uvicorn.run(asgi, host="127.0.0.1", port=port, log_level="error", lifespan="on")


def measure(inline: bool, op: str = "matches") -> dict[str, float]:
    from tests.relay.helpers import PUBLIC

    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.benchmarks.bench_eval_isolation",
            "--serve",
            str(port),
            "inline" if inline else "worker",
            op,
        ],
        cwd=REPO,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{base}/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        rng = random.Random(1)
        text = (
            "a" * 16 * 1024  # the substrings' worst case: every position almost matches
            if op == "contains"
            else "".join(rng.choice("ab") for _ in range(16 * 1024))
        )
        context: dict[str, object] = {"targetingKey": "u", **{f"s{j}": text for j in range(4)}}
        if op == "in":  # 300,000 elements in 0.9 MB, under the 1 MiB body limit
            context = {"targetingKey": "u", "a": [""] * 300_000}
        stop = threading.Event()
        evaluations: list[float] = []

        def attacker() -> None:
            with httpx.Client(timeout=600) as client:
                while not stop.is_set():
                    started = time.perf_counter()
                    client.post(
                        f"{base}/ofrep/v1/evaluate/flags",
                        json={"context": context},
                        headers={"Authorization": f"Bearer {PUBLIC}"},
                    )
                    evaluations.append(time.perf_counter() - started)

        thread = threading.Thread(target=attacker)
        thread.start()
        time.sleep(0.5)
        health: list[float] = []
        with httpx.Client(timeout=600) as client:
            end = time.perf_counter() + SECONDS
            while time.perf_counter() < end:
                started = time.perf_counter()
                client.get(f"{base}/healthz")
                health.append(time.perf_counter() - started)
                time.sleep(0.01)
        stop.set()
        thread.join()
        return {
            "p50": percentile(health, 50),
            "p99": percentile(health, 99),
            "max": max(health),
            "eval": percentile(evaluations, 50) if evaluations else float("nan"),
            "n": len(evaluations),
        }
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    ops = sys.argv[1:] or ["matches", "contains", "in"]
    for op in ops:
        worker = measure(inline=False, op=op)
        inline = measure(inline=True, op=op)

        def row(
            figure: str,
            name: str,
            target: str = "",
            worker: dict[str, float] = worker,
            inline: dict[str, float] = inline,
        ) -> Row:
            return Row(
                figure, ms(worker[name] * 1000), f"inline: {ms(inline[name] * 1000)}", target
            )

        rows = [
            row("/healthz p50 during the worst evaluation", "p50"),
            row("/healthz p99 during the worst evaluation", "p99", "< 50 ms"),
            row("/healthz max", "max"),
            row("one worst bulk evaluation (p50)", "eval"),
        ]
        print_table(
            (
                f"One public key's worst evaluation ({FLAGS} flags x 4 `in` clauses on one "
                "300,000-element array attribute, no search)"
                if op == "in"
                else f"One public key's worst evaluation ({FLAGS} flags at the search budget "
                f"with {op}, 16 KiB attributes)"
            ),
            rows,
            [
                "vane: evaluations past the inline budget run on a worker thread; "
                "inline: on the event loop (before)"
            ],
        )


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--serve":
        _serve(int(sys.argv[2]), sys.argv[3] == "inline", sys.argv[4])
    else:
        main()
