"""The Lua scripts' registry: what each script is made of, and which are guarded.

Each Lua file in ``redismem/lua/`` opens with its ``KEYS[]``/``ARGV[]`` contract
and names the shared files it needs (``-- include: _common``; files whose name
starts with ``_`` are included, the others are scripts). ``script_source``
puts each script together: the guard prelude first for every user-scoped
script (after the clock it includes: a definition, so the guard's check is
still the first command the script runs), then its includes, each once, each
after what it includes in turn, then the script. A script opts out of the
guard only by saying why in its header (``-- unguarded: <why>``).

The scripts use only what both real Redis 7 and the embedded backend's Lua
provide: no ``cmsgpack``, ``struct`` or ``bit``. ``redismem.core.scripts``
runs them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any, Protocol

__all__ = [
    "GUARD_PRELUDE",
    "Scoped",
    "ScriptSourceError",
    "guarded",
    "includes",
    "is_user_scoped",
    "script_names",
    "script_source",
]


class Scoped(Protocol):
    """Keys built for one epoch of one user (``SessionKeys``, ``RecallKeys``,
    ``StoreKeys``)."""

    @property
    def guard(self) -> str: ...

    @property
    def epoch(self) -> int: ...


#: The user guard's prelude (``_guard.lua``): the registry puts it first in
#: every user-scoped script, so no script can forget it; no header names it.
GUARD_PRELUDE = "_guard"
#: A line of a Lua file's header: ``-- include: _common _recall`` (the shared
#: files it needs, by name) or ``-- unguarded: <why>`` (a script that works on
#: no user's keys, or owns the guard: it gets no guard prelude).
_DECLARATION = re.compile(r"--\s*(include|unguarded):(.*)")


class ScriptSourceError(ValueError):
    """A Lua file that is missing, or whose header is wrong (an unknown
    include, one named twice, a cycle, the guard named): a defect of the
    package, raised when the script is loaded."""


@dataclass(frozen=True, slots=True)
class _Declared:
    """What the header of a Lua file declares."""

    includes: tuple[str, ...]
    #: Why the script takes no guard prelude; None: it is user-scoped.
    unguarded: str | None


@cache
def _lua(name: str) -> str:
    """The text of ``redismem/lua/<name>.lua``."""
    path = files("redismem") / "lua" / f"{name}.lua"
    if not path.is_file():
        raise ScriptSourceError(f"no Lua file {name}.lua in redismem/lua")
    return path.read_text(encoding="utf-8")


@cache
def _declared(name: str) -> _Declared:
    """The declarations in the header (the leading comment lines) of Lua
    file ``name``."""
    includes: list[str] = []
    unguarded: str | None = None
    for line in _lua(name).splitlines():
        if not line.startswith("--"):
            break
        found = _DECLARATION.fullmatch(line.strip())
        if found is None:
            continue
        kind, value = found[1], found[2].strip()
        if kind == "unguarded":
            if name.startswith("_") or not value:
                raise ScriptSourceError(f"{name}.lua: only a script says why it is unguarded")
            unguarded = value
            continue
        for include in value.split():
            if not include.startswith("_"):
                raise ScriptSourceError(f"{name}.lua includes {include}: a script, not an include")
            if include == GUARD_PRELUDE:
                raise ScriptSourceError(f"{name}.lua names {include}: the registry adds it")
            if include in includes:
                raise ScriptSourceError(f"{name}.lua includes {include} twice")
            _lua(include)
            includes.append(include)
    return _Declared(tuple(includes), unguarded)


def is_user_scoped(name: str) -> bool:
    """Whether script ``name`` works on a user's keys: then its source opens
    with the guard prelude and it takes the guard and the epoch first (see
    ``redismem.core.guard``). Every script is, unless its header says
    ``-- unguarded: <why>``."""
    return _declared(name).unguarded is None


def guarded(scope: Scoped, keys: Sequence[Any], args: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """The KEYS and ARGV of a user-scoped script: the guard and the epoch of
    ``scope`` (the keys were built for it) before the script's own."""
    return [scope.guard, *keys], [scope.epoch, *args]


@cache
def includes(name: str) -> tuple[str, ...]:
    """The shared files script ``name`` is made of, in order: the guard
    prelude first for a user-scoped script, then what its header includes;
    each after the files it includes in turn, each once."""
    order: list[str] = []

    def visit(include: str, path: tuple[str, ...]) -> None:
        if include in path:
            raise ScriptSourceError(f"includes form a cycle: {' -> '.join((*path, include))}")
        if include in order:
            return
        for inner in _declared(include).includes:
            visit(inner, (*path, include))
        order.append(include)

    if name.startswith("_"):
        raise ScriptSourceError(f"{name} is an include, not a script")
    if is_user_scoped(name):
        visit(GUARD_PRELUDE, (name,))
    for include in _declared(name).includes:
        visit(include, (name,))
    return tuple(order)


@cache
def script_source(name: str) -> str:
    """The source of script ``name``: its includes (``includes``), then its
    own file."""
    return "\n".join([*(_lua(include) for include in includes(name)), _lua(name)])


def script_names() -> list[str]:
    """Every script in ``redismem/lua/`` (files not starting with ``_``)."""
    folder = files("redismem") / "lua"
    names = [entry.name for entry in folder.iterdir()]
    return sorted(n[: -len(".lua")] for n in names if n.endswith(".lua") and not n.startswith("_"))
