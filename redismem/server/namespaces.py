"""``Namespaces``: one ``Memory`` per namespace the server serves.

Each is connected on first use (so the server starts, and answers
``/healthz``, while Redis is still away: a request then gets 503 and the next
one tries again) and closed when the server stops.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from redismem.client import Memory
from redismem.errors import ClientClosed
from redismem.server.errors import NotServed
from redismem.server.settings import ServerSettings

__all__ = ["Namespaces"]

logger = logging.getLogger(__name__)


class Namespaces:
    """The served namespaces' ``Memory`` clients, made lazily, closed by ``aclose``."""

    def __init__(self, settings: ServerSettings) -> None:
        self._settings = settings
        self._served = frozenset(settings.namespaces)
        self._memories: dict[str, Memory] = {}
        self._locks = {name: asyncio.Lock() for name in settings.namespaces}
        self._closed = False

    @property
    def served(self) -> frozenset[str]:
        return self._served

    def check(self, namespace: str) -> None:
        """``NotServed`` (404) unless this server serves ``namespace``."""
        if namespace not in self._served:
            raise NotServed(f"this server does not serve namespace {namespace!r}")

    def options(self, namespace: str) -> dict[str, Any]:
        """``Memory.connect`` options of one namespace."""
        settings = self._settings
        options: dict[str, Any] = dict(settings.memory_options)
        options.update(namespace=namespace, queue_name=settings.queue_name)
        if settings.queue_url:
            options["queue_url"] = settings.queue_url
        return options

    async def get(self, namespace: str) -> Memory:
        """The namespace's ``Memory``, connected on first use."""
        memory = self._memories.get(namespace)
        if memory is not None:
            return memory
        self.check(namespace)
        async with self._locks[namespace]:
            memory = self._memories.get(namespace)
            if memory is None:
                if self._closed:
                    raise ClientClosed("the server is shutting down")
                memory = await Memory.connect(self._settings.url, **self.options(namespace))
                self._memories[namespace] = memory
                logger.info("connected namespace %s (%r)", namespace, memory)
        return memory

    def connected(self) -> dict[str, Memory]:
        return dict(self._memories)

    async def aclose(self) -> None:
        self._closed = True
        memories, self._memories = list(self._memories.values()), {}
        for memory in memories:
            try:
                await memory.aclose()
            except Exception:  # pragma: no cover - closing is best effort
                logger.exception("closing %r failed", memory)
