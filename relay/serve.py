"""Serve the relay's ASGI app with granian: in this very process for one worker, or with a
granian main process and ``workers`` worker processes (each with its own snapshot copy, sync
connection and event spool).

One worker is the sidecar's case, and there a second process is pure weight: granian's main
process only supervises its worker, yet it costs as much memory as the whole relay. So one
worker runs granian's embedded server on this process's own event loop (``shared.serving``):
SIGTERM/SIGINT end the open streams first (``RelayApp.stopping``), then stop it the way
granian's main process would: the ASGI lifespan shuts down (the spool is flushed, the forwarder
closed) and the process exits.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.serving import Embedded
from shared.serving import run_embedded as run_served

APP = "relay.app:create_app_from_env"


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
    from granian.http import HTTP1Settings

    from shared.serving import run_workers as run_granian_workers

    run_granian_workers(
        APP,
        workers=options.workers,
        host=options.host,
        port=options.port,
        backpressure=options.backpressure,
        http1_settings=HTTP1Settings(max_buffer_size=options.http_buffer_bytes),
        backlog=options.backlog,
    )


def run_embedded(options: ServeOptions) -> None:
    from granian.http import HTTP1Settings

    from relay.app import RelayApp, create_app_from_env

    def stopping(app: RelayApp) -> None:
        app.stopping()

    run_served(
        Embedded(
            factory=create_app_from_env,
            host=options.host,
            port=options.port,
            stopping=stopping,
            server_options={
                "backpressure": options.backpressure,
                "http1_settings": HTTP1Settings(max_buffer_size=options.http_buffer_bytes),
                "backlog": options.backlog,
            },
        )
    )
