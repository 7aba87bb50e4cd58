"""Serve an ASGI app with granian's embedded server on this process's own event loop (uvloop
where installed): the relay's and the control plane's one worker, with nothing between the
process and its app.

One process rather than granian's main process and a worker: the main process only supervises,
yet costs as much memory as the app; and when it dies by ``kill -9`` its worker goes on serving
the port. Here SIGTERM and SIGINT first tell the app it is stopping (``stopping``: it ends its
open streams, which would otherwise hold the server until its grace period, and their clients
reconnect elsewhere at once), then stop the server the way granian's main process would: the
requests in flight finish, the ASGI lifespan shuts down, and the process exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

STOP_GRACE_S = 10.0
logger = logging.getLogger("vane.serving")


@dataclass(frozen=True, slots=True)
class Embedded:
    """What granian's embedded server is given (``server_options``: its other keywords)."""

    factory: Callable[[], Any]  # makes the ASGI app
    host: str
    port: int
    stopping: Callable[[Any], None]  # told the app that a stop signal came
    server_options: dict[str, Any] = field(default_factory=dict)


def run_embedded(embedded: Embedded) -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - Windows
        asyncio.run(_serve(embedded))
    else:
        uvloop.run(_serve(embedded))


async def _serve(embedded: Embedded) -> None:
    from granian.constants import Interfaces
    from granian.server.embed import Server

    made: list[Any] = []

    def make_app() -> Any:
        app = embedded.factory()
        made.append(app)  # to tell it of the stop signal
        return app

    server = Server(
        make_app,
        factory=True,
        address=embedded.host,
        port=embedded.port,
        interface=Interfaces.ASGI,
        log_access=False,
        **embedded.server_options,
    )
    loop = asyncio.get_running_loop()

    def stop() -> None:
        for app in made:
            try:
                embedded.stopping(app)
            except Exception:  # stopping goes on whatever the app says
                logger.exception("telling the app it is stopping failed")
        server.stop()  # type: ignore[no-untyped-call]  # granian ships it untyped
        # granian's embedded server can miss a stop that lands while its worker is still
        # registering for it, and then waits for ever (seen when `vane up` died right after
        # starting its relay): past the grace period the process leaves without its lifespan's
        # shutdown
        loop.call_later(STOP_GRACE_S, _leave)

    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):  # pragma: no cover - Windows
            loop.add_signal_handler(sig, stop)
    await server.serve()


def _leave() -> None:
    logger.warning("the server did not stop within %s s of being asked; leaving", STOP_GRACE_S)
    leave_now()


def leave_now() -> NoReturn:
    """Exit at once, once the server has stopped and its lifespan has shut down: what is left is
    the interpreter's teardown, whose garbage collection of a whole app took the control plane
    two seconds after every stop (a rolling restart, each of the tests' processes)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)
