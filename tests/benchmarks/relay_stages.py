"""Where one OFREP bulk request's time goes inside the relay, stage by stage, in-process.

Each stage of ``relay.routes.ofrep.OfrepRoutes.bulk`` is run on its own over the same random
contexts (the peers' 50-flag workload, ``tests.relay.bench_http``), timed in CPU time of this
process (``time.process_time``: other work on a shared machine does not count), and so is the
whole ASGI app called in-process with minimal ``receive``/``send``. What the stages do not
explain of the app's total is its dispatch (routing, the ``Request``, ASGI messages, request
metrics); what the app does not explain of a request served under granian is the server's
(HTTP parsing, sockets, the ASGI bridge).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from collections.abc import Callable
from typing import Any

import msgspec

from relay.http import Request, Response, ofrep_error_body
from relay.prometheus import RelayMetrics
from relay.routes.admission import Admission, Gate
from relay.routes.contexts import parse_context, targeting_key_problem
from relay.routes.sse import EventStreams
from relay.store import EnvironmentState, Store
from shared.engine import evaluate_all
from tests.relay.bench_http import COUNTRIES, bench_snapshot, make_app, scope
from tests.relay.helpers import public_access, settings

BULK = "/ofrep/v1/evaluate/flags"


def _cpu_us(work: Callable[[], None], n: int, repeat: int = 3) -> float:
    """Microseconds of this process's CPU per item for ``work`` (which runs ``n`` items)."""
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        work()
        best = min(best, time.process_time() - started)
    return best / n * 1e6


def stage_costs(n: int = 20_000) -> dict[str, float]:
    """µs of CPU per request: parse, auth, context, evaluate, encode, dispatch, app total."""
    rng = random.Random(1)
    contexts = [
        {"targetingKey": f"u-{rng.getrandbits(62):x}", "country": rng.choice(COUNTRIES)}
        for _ in range(n)
    ]
    bodies = [msgspec.json.encode({"context": context}) for context in contexts]
    store = Store()
    store.swap(EnvironmentState.build(bench_snapshot(), public_access()))
    gate = Gate(store, settings(), RelayMetrics(store))
    streams = EventStreams(gate)
    scopes = [scope(BULK, len(body)) for body in bodies]

    def requests() -> list[Request]:
        made = []
        for body, one in zip(bodies, scopes, strict=True):

            async def receive(body: bytes = body) -> dict[str, Any]:
                return {"type": "http.request", "body": body, "more_body": False}

            made.append(Request(one, receive, _discard, None))
        return made

    async def admit_all(pending: list[Request]) -> Admission:
        result: Admission | Response | None = None
        for request in pending:
            result = await gate.admit(request, ofrep_error_body, backends=True)
        assert isinstance(result, Admission)
        return result

    admitted = asyncio.run(admit_all(requests()))
    state, view = admitted.state, admitted.view
    parsed = [parse_context(body) for body in bodies]
    evaluations = [
        evaluate_all(state.compiled, context, 0, client_side_only=True) for context in contexts
    ]
    for one in evaluations:  # warm the encoding caches, as a serving relay has them
        view.ofrep_items(one)

    to_admit = requests()  # built beforehand: a served request arrives as one

    def auth() -> None:
        asyncio.run(admit_all(to_admit))

    def parse() -> None:
        for body in bodies:
            parse_context(body)

    def context() -> None:
        window = streams.tokens.window(time.time())
        for one, raw in parsed:
            targeting_key_problem(one)
            digest = hashlib.blake2b(view.etag_seed, digest_size=16)
            digest.update(b"|%s|%d|" % (b"key_bench", window))
            digest.update(raw)
            digest.hexdigest()

    def evaluate() -> None:
        compiled = state.compiled
        for one in contexts:
            evaluate_all(compiled, one, 0, client_side_only=True)

    pending = requests()

    def encode() -> None:
        for request, one in zip(pending, evaluations, strict=True):
            parts = view.ofrep_items(one)
            entry = streams.entry(request, state.environment, "key_bench", state.version)
            b"".join(
                (
                    b'{"flags":[',
                    b",".join(parts),
                    b"],",
                    view.bulk_metadata,
                    b',"eventStreams":',
                    entry,
                    b"}",
                )
            )

    app = make_app()

    def whole() -> None:
        async def run() -> None:
            for body, one in zip(bodies, scopes, strict=True):

                async def receive(body: bytes = body) -> dict[str, Any]:
                    return {"type": "http.request", "body": body, "more_body": False}

                await app(one, receive, _discard)

        asyncio.run(run())

    costs = {
        "parse": _cpu_us(parse, n),
        "auth": _cpu_us(auth, n),
        "context": _cpu_us(context, n),
        "evaluate": _cpu_us(evaluate, n),
        "encode": _cpu_us(encode, n),
        "app": _cpu_us(whole, n),
    }
    stages = sum(costs[name] for name in ("parse", "auth", "context", "evaluate", "encode"))
    costs["dispatch"] = max(0.0, costs["app"] - stages)
    return costs


async def _discard(message: Any) -> None:
    return None


if __name__ == "__main__":
    for name, value in stage_costs().items():
        print(f"{name:10s} {value:6.1f} µs")
