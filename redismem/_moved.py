"""Old module paths, importable for one more release with a ``DeprecationWarning``.

The library's modules moved into subpackages by layer (see
``docs/architecture.md``). ``import redismem.keys`` and ``from redismem.store
import LongTermStore`` still work: a finder on ``sys.meta_path`` hands out the
module at its new home under the old name, and warns once per old path. The
names exported from ``redismem`` itself never moved.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

__all__ = ["MOVED_MODULES", "RENAMED", "install", "renamed"]

#: Old dotted path → new dotted path.
MOVED_MODULES: dict[str, str] = {
    "redismem.agent_memory": "redismem.context.agent_memory",
    "redismem.analysis": "redismem.recall.terms",
    "redismem.codec": "redismem.core.codec",
    "redismem.composite": "redismem.context.composite",
    "redismem.connection": "redismem.core.connection",
    "redismem.consolidators": "redismem.longterm.consolidation",
    "redismem.context_builder": "redismem.context.builder",
    "redismem.context.counting": "redismem.context.tokens",
    "redismem.counting": "redismem.context.tokens",
    "redismem.demo_agent": "redismem.demo.agent",
    "redismem.embeddings": "redismem.recall.embeddings",
    "redismem.extract": "redismem.longterm.extraction.job",
    "redismem.extractors": "redismem.longterm.extraction",
    "redismem.fencing": "redismem.context.quoting",
    "redismem.guard": "redismem.core.guard",
    "redismem.keys": "redismem.core.keys",
    "redismem.localserver": "redismem.demo.localserver",
    "redismem.memories": "redismem.longterm.memories",
    "redismem.memory_models": "redismem.longterm.records",
    "redismem.providers": "redismem.context.providers",
    "redismem.queue": "redismem.core.queue",
    "redismem.ranking": "redismem.recall.ranking",
    "redismem.scripts": "redismem.core.scripts",
    "redismem.store": "redismem.longterm.store",
    "redismem.strategies": "redismem.context.strategies",
    "redismem.summarize": "redismem.summarization.job",
    "redismem.summarizers": "redismem.summarization.summarizers",
    "redismem.tokens": "redismem.context.tokens",
    "redismem.toolgroups": "redismem.context.toolgroups",
    "redismem.transport": "redismem.core.transport",
    "redismem.urls": "redismem.core.urls",
    "redismem.validation": "redismem.values",
    "redismem.waiter": "redismem.core.replies",
}


#: Old public name → its new name (the same object), importable from the
#: modules listed here and from ``redismem``.
RENAMED: dict[str, str] = {
    "CallPolicy": "RetryPolicy",
    "ClusterLinks": "MultiplexedCluster",
    "CompositeMemory": "CombinedProvider",
    "Link": "MultiplexedConnection",
    "Memories": "Knowledge",
    "SlidingWindow": "LastMessages",
    "SlidingWindowMemory": "LastTurnsMemory",
    "StoreError": "BackendError",
    "StoreFull": "BackendFull",
    "StoreUnavailable": "BackendUnavailable",
    "Task": "AgentTask",
    "Waiter": "ReplyFuture",
}


def renamed(module: str, name: str, namespace: dict[str, object]) -> object:
    """A module ``__getattr__``: the new object for an old name, with a warning."""
    new_name = RENAMED.get(name)
    if new_name is None or new_name not in namespace:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    warnings.warn(
        f"{module}.{name} is now {new_name}; the old name goes away in the next release",
        DeprecationWarning,
        stacklevel=3,
    )
    return namespace[new_name]


class _MovedLoader(importlib.abc.Loader):
    def __init__(self, new_name: str) -> None:
        self._new_name = new_name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        """A throwaway module: ``exec_module`` puts the real one in its place."""

    def exec_module(self, module: ModuleType) -> None:
        # The import system returns whatever sys.modules holds for the name
        # after this, so the moved module is handed out unchanged (its own
        # __spec__ and __name__ kept).
        warnings.warn(
            f"{module.__name__} moved to {self._new_name}; "
            "the old path goes away in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        sys.modules[module.__name__] = importlib.import_module(self._new_name)


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: object = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        new_name = MOVED_MODULES.get(fullname)
        if new_name is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _MovedLoader(new_name))


def install() -> None:
    """Put the finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
