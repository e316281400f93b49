"""The public API lives in ``redismem.__all__``: complete, sorted, consistent."""

from __future__ import annotations

import inspect
from importlib.metadata import version
from types import ModuleType

import pytest

import redismem
from redismem import errors, llm, models, portability
from redismem.context import agent_memory, composite, providers, strategies, tokens
from redismem.context import builder as context_builder
from redismem.context import quoting as fencing
from redismem.longterm import consolidation as consolidators
from redismem.longterm import extraction as extractors
from redismem.longterm import memories, store
from redismem.longterm import records as memory_models
from redismem.recall import embeddings
from redismem.summarization import summarizers


def test_every_exported_name_exists():
    missing = [name for name in redismem.__all__ if not hasattr(redismem, name)]
    assert missing == []


def test_no_duplicates():
    assert len(set(redismem.__all__)) == len(redismem.__all__)


def test_all_is_sorted():
    assert redismem.__all__ == sorted(redismem.__all__)


def test_every_public_attribute_is_exported():
    public = {
        name
        for name, value in vars(redismem).items()
        if not name.startswith("_") and not isinstance(value, ModuleType)
    }
    assert public - set(redismem.__all__) == set()


def test_errors_are_all_reexported():
    assert set(errors.__all__) - set(redismem.__all__) == set()
    for name in errors.__all__:
        assert getattr(redismem, name) is getattr(errors, name)


@pytest.mark.parametrize(
    "module",
    [
        agent_memory,
        composite,
        consolidators,
        context_builder,
        embeddings,
        extractors,
        fencing,
        llm,
        memories,
        memory_models,
        models,
        portability,
        providers,
        store,
        strategies,
        summarizers,
        tokens,
    ],
)
def test_public_modules_are_all_reexported(module: ModuleType) -> None:
    assert set(module.__all__) - set(redismem.__all__) == set()
    for name in module.__all__:
        assert getattr(redismem, name) is getattr(module, name)


def test_reexported_models_are_the_same_objects():
    for name in set(models.__all__) & set(redismem.__all__):
        assert getattr(redismem, name) is getattr(models, name)


def test_every_error_derives_from_the_root():
    classes = [
        value
        for value in vars(errors).values()
        if inspect.isclass(value)
        and issubclass(value, BaseException)
        and value.__module__ == errors.__name__
    ]
    assert {c.__name__ for c in classes} == set(errors.__all__)
    for cls in classes:
        assert issubclass(cls, errors.RedisMemError), cls
        assert issubclass(cls, Exception)
    assert issubclass(errors.InvalidInput, ValueError)
    assert issubclass(errors.MissingDependency, ImportError)


def test_version_matches_the_distribution():
    assert redismem.__version__ == version("redismem")
