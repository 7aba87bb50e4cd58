"""Vane's Python server client: batched ``track()`` for backends (threaded and asyncio), and
OpenFeature providers that evaluate flags in-process from a relay's snapshot feed."""

from shared.client.async_client import AsyncVaneClient
from shared.client.provider import AsyncVaneProvider, VaneProvider
from shared.client.sync_client import VaneClient

__all__ = ["AsyncVaneClient", "AsyncVaneProvider", "VaneClient", "VaneProvider"]
