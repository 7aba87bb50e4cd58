"""Answers are gzipped for a client that asks (the console's pages, CSS and JS; the API), except
streams: a stream is sent as it is made, never compressed or buffered."""

from __future__ import annotations

from litestar import Litestar
from litestar.config.compression import CompressionConfig
from litestar.handlers import HTTPRouteHandler
from litestar.response import Stream

STREAMED = "vane_streamed"
"""The ``opt`` key of a handler whose answer is a stream (``send_streams_as_made``)."""

COMPRESSION = CompressionConfig(
    backend="gzip",
    gzip_compress_level=6,  # within a few per cent of 9's size, at a fraction of its CPU
    minimum_size=500,  # below this the gzip header and a round trip outweigh the bytes saved
    exclude_opt_key=STREAMED,
)


def send_streams_as_made(app: Litestar) -> None:
    """Every handler that answers with a stream (server-sent events: the console's live changes,
    the provider feed) skips compression: each event leaves when it is made, whatever the
    client's ``Accept-Encoding``. Found by the handler's declared return type, so a stream added
    later is covered without anyone remembering to mark it."""
    for route in app.routes:
        for handler in getattr(route, "route_handlers", ()):
            if not isinstance(handler, HTTPRouteHandler):
                continue
            returns = handler.parsed_fn_signature.return_type
            kind = returns.origin or returns.annotation
            if isinstance(kind, type) and issubclass(kind, Stream):
                handler.opt[STREAMED] = True
