"""Serve the relay's ASGI app with granian: in this very process for one worker, or with a
granian main process and ``workers`` worker processes (each with its own snapshot copy, sync
connection and event spool).

One worker is the sidecar's case, and there a second process is pure weight: granian's main
process only supervises its worker, yet it costs as much memory as the whole relay. So one
worker runs granian's embedded server on this process's own event loop (uvloop where
installed), and SIGTERM/SIGINT stop it the way granian's main process would: the ASGI lifespan
shuts down (the spool is flushed, the forwarder closed) and the process exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from dataclasses import dataclass

APP = "relay.app:create_app_from_env"
STOP_GRACE_S = 10.0
logger = logging.getLogger("vane.relay")


@dataclass(frozen=True, slots=True)
class ServeOptions:
    host: str
    port: int
    workers: int
    backpressure: int  # requests in flight per worker (open streams included)
    backlog: int
    http_buffer_bytes: int


def serve(options: ServeOptions) -> None:
    if options.workers <= 1:
        run_embedded(options)
    else:
        run_workers(options)


def run_workers(options: ServeOptions) -> None:
    from granian import Granian
    from granian.http import HTTP1Settings

    Granian(
        APP,
        factory=True,
        address=options.host,
        port=options.port,
        interface="asgi",  # type: ignore[arg-type]
        workers=options.workers,
        log_access=False,
        backpressure=options.backpressure,
        http1_settings=HTTP1Settings(max_buffer_size=options.http_buffer_bytes),
        backlog=options.backlog,
    ).serve()


def run_embedded(options: ServeOptions) -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - Windows
        asyncio.run(_embedded(options))
    else:
        uvloop.run(_embedded(options))


async def _embedded(options: ServeOptions) -> None:
    from granian.constants import Interfaces
    from granian.http import HTTP1Settings
    from granian.server.embed import Server

    from relay.app import create_app_from_env

    server = Server(
        create_app_from_env,
        factory=True,
        address=options.host,
        port=options.port,
        interface=Interfaces.ASGI,
        log_access=False,
        backpressure=options.backpressure,
        http1_settings=HTTP1Settings(max_buffer_size=options.http_buffer_bytes),
        backlog=options.backlog,
    )
    loop = asyncio.get_running_loop()

    def stop() -> None:
        server.stop()  # type: ignore[no-untyped-call]  # granian ships it untyped
        # granian's embedded server can miss a stop that lands while its worker is still
        # registering for it, and then waits for ever (seen when `vane up` died right after
        # starting its relay): past the grace period the process leaves without its lifespan's
        # shutdown, which loses nothing (the spool is fsync'd before any event is answered)
        loop.call_later(STOP_GRACE_S, _leave)

    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):  # pragma: no cover - Windows
            loop.add_signal_handler(sig, stop)
    await server.serve()


def _leave() -> None:
    logger.warning("the relay did not stop within %s s of being asked; leaving", STOP_GRACE_S)
    logging.shutdown()
    os._exit(0)
