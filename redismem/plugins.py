"""Plug-ins by name: the summarizer, extractor, consolidator or embedder a
setting names (``REDISMEM_SUMMARIZER=llm``, ``embedder="hashing"``).

Each kind is a ``Registry`` mapping a name to the dotted path of its class,
``"module:attr"``, imported only when that name is resolved: the settings
that name plug-ins (``redismem.config``) import none of them, and a worker
imports only the plug-ins it runs. A plug-in that needs settings of its own
reads them from the environment through ``redismem.env`` (the LLM endpoint,
``REDISMEM_SUMMARY_MAX_CHARS``). An unknown name raises ``InvalidInput``
listing the known ones.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from redismem import env
from redismem.errors import InvalidInput

__all__ = [
    "CONSOLIDATORS",
    "EMBEDDERS",
    "EXTRACTORS",
    "SUMMARIZERS",
    "Plugin",
    "Registry",
    "embedder",
]

#: A plug-in's keyword arguments read from the environment, given the
#: setting that chose it (``"REDISMEM_SUMMARIZER=llm"``) for error messages.
Options = Callable[[str, env.Environ], dict[str, Any]]


@dataclass(frozen=True)
class Plugin:
    """A plug-in class by its dotted path, ``"module:attr"``, and how its
    keyword arguments are read from the environment (none by default)."""

    path: str
    options: Options | None = None

    def load(self) -> Callable[..., Any]:
        """The class (or factory) ``path`` names, importing its module now."""
        module, _, attribute = self.path.partition(":")
        found: Any = importlib.import_module(module)
        for part in attribute.split("."):
            found = getattr(found, part)
        return found  # type: ignore[no-any-return]

    def create(self, setting: str, environ: env.Environ = None) -> Any:
        options = self.options(setting, environ) if self.options is not None else {}
        return self.load()(**options)


@dataclass(frozen=True)
class Registry:
    """The plug-ins of one kind, by name, in the order the error lists them;
    a name mapped to None means "no plug-in" (``off``). ``default``: the
    name an unset ``variable`` stands for."""

    variable: str
    plugins: Mapping[str, Plugin | None]
    default: str

    def names(self) -> tuple[str, ...]:
        return tuple(self.plugins)

    def create(self, name: str, environ: env.Environ = None) -> Any:
        """The plug-in ``name`` stands for (None for ``off``), its module
        imported now. ``InvalidInput`` for an unknown name, listing the known."""
        if name not in self.plugins:
            raise InvalidInput(f"{self.variable} must be {_listed(self.names())}, got {name!r}")
        plugin = self.plugins[name]
        return None if plugin is None else plugin.create(f"{self.variable}={name}", environ)

    def from_env(self, environ: env.Environ = None) -> Any:
        """The plug-in ``variable`` names in ``environ`` (default: the
        process environment, read now), compared case-insensitively."""
        name = env.choice(self.variable, self.names(), environ)
        return self.create(self.default if name is None else name, environ)


def _listed(names: tuple[str, ...]) -> str:
    """``a, b or c``, as ``env.choice`` lists what a variable may be."""
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]


def _max_chars(setting: str, environ: env.Environ) -> dict[str, Any]:
    max_chars = env.integer("REDISMEM_SUMMARY_MAX_CHARS", environ)
    return {} if max_chars is None else {"max_chars": max_chars}


def _endpoint(setting: str, environ: env.Environ) -> dict[str, Any]:
    from redismem.llm import chat_endpoint_from_env

    return {"endpoint": chat_endpoint_from_env(setting, environ)}


def _endpoint_fields(setting: str, environ: env.Environ) -> dict[str, Any]:
    endpoint = _endpoint(setting, environ)["endpoint"]
    return {
        "base_url": endpoint.base_url,
        "model": endpoint.model,
        "api_key": endpoint.api_key,
        "timeout": endpoint.timeout,
    }


_SUMMARIZERS = "redismem.summarization.summarizers"
_EXTRACTORS = "redismem.longterm.extraction"
_EMBEDDERS = "redismem.recall.embeddings"

#: ``REDISMEM_SUMMARIZER``: how the workers fold old messages into a summary.
SUMMARIZERS = Registry(
    "REDISMEM_SUMMARIZER",
    {
        "keypoints": Plugin(f"{_SUMMARIZERS}:KeyPointsSummarizer"),
        "truncate": Plugin(f"{_SUMMARIZERS}:TruncationSummarizer", _max_chars),
        "llm": Plugin(f"{_SUMMARIZERS}:LLMSummarizer", _endpoint_fields),
    },
    default="keypoints",
)

#: ``REDISMEM_EXTRACTOR``: what turns new messages into typed memories (off
#: by default: extraction stores lasting data about users).
EXTRACTORS = Registry(
    "REDISMEM_EXTRACTOR",
    {
        "rules": Plugin(f"{_EXTRACTORS}:RuleExtractor"),
        "llm": Plugin(f"{_EXTRACTORS}:LLMExtractor", _endpoint),
        "off": None,
    },
    default="off",
)

#: ``REDISMEM_CONSOLIDATOR``: who decides about near-duplicate memories.
CONSOLIDATORS = Registry(
    "REDISMEM_CONSOLIDATOR",
    {"off": None, "llm": Plugin("redismem.longterm.consolidation:LLMConsolidator", _endpoint)},
    default="off",
)

#: ``REDISMEM_EMBEDDER`` and the ``embedder`` option: what embeds indexed
#: messages for recall.
EMBEDDERS = Registry(
    "REDISMEM_EMBEDDER",
    {
        "none": None,
        "hashing": Plugin(f"{_EMBEDDERS}:HashingEmbedder"),
        "minilm": Plugin(f"{_EMBEDDERS}:MiniLMEmbedder"),
    },
    default="none",
)


def embedder(spec: object) -> Any:
    """The embedder the ``embedder`` option names: None, ``"none"``, a name
    in ``EMBEDDERS`` or an object with an async ``embed(texts)``."""
    if spec is None or spec == "none":
        return None
    if isinstance(spec, str):
        if spec in EMBEDDERS.plugins:
            return EMBEDDERS.create(spec)
        named = " or ".join(repr(name) for name in EMBEDDERS.names() if name != "none")
        raise InvalidInput(f"embedder must be None, {named}, got {spec!r}")
    if not asyncio.iscoroutinefunction(getattr(spec, "embed", None)):
        raise InvalidInput("an embedder must have an async embed(texts) -> list[list[float]]")
    return spec
