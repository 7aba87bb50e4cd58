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


_WORKER_APP = "VANE_WORKER_APP"
_WORKER_PARENT = "VANE_WORKER_PARENT"


def run_workers(factory: str, *, workers: int, host: str, port: int, **options: Any) -> None:
    """granian's main process and ``workers`` worker processes serving ``factory``
    (``module:function``, called in each worker), each of which dies with the main process."""
    from granian import Granian

    os.environ[_WORKER_APP] = factory
    os.environ[_WORKER_PARENT] = str(os.getpid())
    Granian(
        f"{__name__}:worker_app",
        factory=True,
        address=host,
        port=port,
        interface="asgi",  # type: ignore[arg-type]
        workers=workers,
        log_access=False,
        **options,
    ).serve()


def worker_app() -> Any:
    """In a worker of ``run_workers``: ask for SIGKILL when the main process dies, leave at once if
    it died already, then make the app. The main process goes only by ``kill -9`` or a crash (a
    stop signal it passes on), and a worker told by SIGTERM then can hang in its own shutdown,
    its stop being the main process's to run; what a relay's worker took in is on disk already."""
    import importlib

    die_with_parent(int(os.environ[_WORKER_PARENT]), signal.SIGKILL)
    module, _, name = os.environ[_WORKER_APP].partition(":")
    return getattr(importlib.import_module(module), name)()


def die_with_parent(parent: int, sig: int = signal.SIGTERM) -> None:
    """``sig`` to this process when its parent dies (Linux's ``PR_SET_PDEATHSIG``; elsewhere
    nothing); exit at once if the parent, ``parent``, is gone already."""
    if not sys.platform.startswith("linux"):  # pragma: no cover - macOS, Windows
        return
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, sig, 0, 0, 0)
    if os.getppid() != parent:  # it died before the request took effect
        os._exit(1)


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
