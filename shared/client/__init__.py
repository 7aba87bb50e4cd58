"""Vane's Python server client: batched ``track()`` for backends (threaded and asyncio)."""

from shared.client.async_client import AsyncVaneClient
from shared.client.sync_client import VaneClient

__all__ = ["AsyncVaneClient", "VaneClient"]
