"""Old public names and module paths still work for one release, with a warning."""

from __future__ import annotations

import importlib
import sys

import pytest

import redismem
from redismem._moved import MOVED_MODULES, RENAMED


@pytest.mark.parametrize(("old", "new"), sorted(RENAMED.items()))
def test_an_old_name_gives_the_new_object_and_warns(old: str, new: str) -> None:
    homes = [
        module
        for module in list(sys.modules.values())
        if getattr(module, "__name__", "").startswith("redismem")
        and new in vars(module)
        and "__getattr__" in vars(module)
    ]
    assert homes, f"no module defines {new} and answers for {old}"
    for module in homes:
        with pytest.warns(DeprecationWarning, match=f"{old} is now {new}"):
            assert getattr(module, old) is vars(module)[new]


def test_every_renamed_public_name_is_served_by_the_package() -> None:
    exported = [old for old, new in RENAMED.items() if new in redismem.__all__]
    for old in exported:
        with pytest.warns(DeprecationWarning):
            assert getattr(redismem, old) is getattr(redismem, RENAMED[old])
        assert old not in redismem.__all__


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        redismem.Nope  # noqa: B018


@pytest.mark.parametrize(("old", "new"), sorted(MOVED_MODULES.items()))
def test_an_old_module_path_imports_the_moved_module_and_warns(old: str, new: str) -> None:
    sys.modules.pop(old, None)
    try:
        with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
            module = importlib.import_module(old)
        assert module is importlib.import_module(new)
    finally:
        sys.modules.pop(old, None)


def test_importing_an_old_path_leaves_the_moved_module_untouched() -> None:
    new = importlib.import_module("redismem.core.keys")
    sys.modules.pop("redismem.keys", None)
    try:
        with pytest.warns(DeprecationWarning):
            import redismem.keys as old
        assert old is new
        assert new.__name__ == "redismem.core.keys"
        assert new.__spec__ is not None and new.__spec__.name == "redismem.core.keys"
    finally:
        sys.modules.pop("redismem.keys", None)


@pytest.mark.parametrize("name", ["call", "atomic", "scripts", "epochs", "in_session"])
async def test_the_core_calls_memory_offered_still_work_with_a_warning(name: str) -> None:
    memory = await redismem.Memory.connect("memory://deprecated-calls")
    try:
        with pytest.warns(DeprecationWarning, match=f"Memory.{name} is now Memory.backend.{name}"):
            found = getattr(memory, name)
        assert found == getattr(memory.backend, name)
        with pytest.raises(AttributeError, match="no attribute 'nope'"):
            memory.nope  # noqa: B018
    finally:
        await memory.aclose()
