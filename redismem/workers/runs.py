"""What a worker runs: the namespaces it sweeps and its plug-ins, by name.

A worker logs it at start-up (``run.describe``) and records it beside its
heartbeat (``keys.worker_runs_key``, see ``health.heartbeat``), so that
``mem.workers()``, ``redismem stats`` and ``redismem worker --check`` show it.
Only names go out: the registry's name of each plug-in (``keypoints``,
``rules``, ``llm``), with its model when it has one; never an API key, an
endpoint or any other setting.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from redismem import plugins
from redismem.config import WorkerConfig

__all__ = ["WorkerRuns", "plugin_name", "runs_of"]

_MAX_NAME = 200


@dataclass(frozen=True, slots=True)
class WorkerRuns:
    """The namespaces a worker sweeps and the names of its plug-ins."""

    namespaces: tuple[str, ...]
    summarizer: str
    extractor: str
    consolidator: str
    embedder: str

    def describe(self) -> str:
        """``namespace redismem: summarizer keypoints, extractor rules, ...``"""
        plural = "s" if len(self.namespaces) > 1 else ""
        return (
            f"namespace{plural} {', '.join(self.namespaces)}: summarizer {self.summarizer}, "
            f"extractor {self.extractor}, consolidator {self.consolidator}, "
            f"embedder {self.embedder}"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "namespaces": list(self.namespaces),
            "summarizer": self.summarizer,
            "extractor": self.extractor,
            "consolidator": self.consolidator,
            "embedder": self.embedder,
        }

    def encode(self) -> bytes:
        return json.dumps(self.as_json(), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes | str | None) -> WorkerRuns | None:
        """The record ``encode`` wrote; None for none, or one not understood
        (another version's): it only ever adds to what a check shows."""
        if raw is None:
            return None
        try:
            value = json.loads(raw)
            names = [str(value[k]) for k in ("summarizer", "extractor", "consolidator", "embedder")]
            namespaces = tuple(str(n) for n in value["namespaces"])
        except (ValueError, TypeError, KeyError):
            return None
        return cls(namespaces, *names)


def plugin_name(registry: plugins.Registry, plugin: Any) -> str:
    """The registry's name of ``plugin`` (its class name when it is not one
    of the registry's), with its model when it has one."""
    if plugin is None:
        return next((name for name, p in registry.plugins.items() if p is None), "none")
    cls = type(plugin).__name__
    name = next(
        (n for n, p in registry.plugins.items() if p is not None and p.path.endswith(f":{cls}")),
        cls,
    )
    model = getattr(plugin, "model_id", None) or getattr(plugin, "model", None)
    if model is None:
        model = getattr(getattr(plugin, "endpoint", None), "model", None)
    if not isinstance(model, str) or not model or "://" in model:
        return name  # a model named by URL is left out: it may hold credentials
    return f"{name} ({model[:_MAX_NAME]})"


def runs_of(config: WorkerConfig) -> WorkerRuns:
    """What a worker with ``config`` runs."""
    return WorkerRuns(
        namespaces=tuple(config.namespaces),
        summarizer=plugin_name(plugins.SUMMARIZERS, config.summarizer),
        extractor=plugin_name(plugins.EXTRACTORS, config.extractor),
        consolidator=plugin_name(plugins.CONSOLIDATORS, config.consolidator),
        embedder=plugin_name(plugins.EMBEDDERS, config.embedder_object),
    )
