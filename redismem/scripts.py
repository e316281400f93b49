"""Lua scripts, loaded from ``scripts/*.lua`` and run with EVALSHA.

Each script file opens with its ``KEYS[]``/``ARGV[]`` contract. Scripts that
work on a session are prefixed with ``_common.lua``. They are registered with
``register_script`` so a server that lost its script cache (restart,
failover, ``SCRIPT FLUSH``) gets them reloaded on ``NOSCRIPT`` transparently.

The scripts use only what both real Redis 7 and the embedded backend's Lua
provide: no ``cmsgpack``, ``struct`` or ``bit``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any

__all__ = ["ScriptSet", "script_source"]

_WITH_COMMON = ("write", "read", "snapshot", "clear", "prepare", "commit")
_PLAIN = ("sessions", "settle")


@cache
def script_source(name: str) -> str:
    folder = files("redismem") / "scripts"
    body = (folder / f"{name}.lua").read_text(encoding="utf-8")
    if name in _WITH_COMMON:
        return (folder / "_common.lua").read_text(encoding="utf-8") + "\n" + body
    return body


@dataclass(frozen=True, slots=True)
class ScriptSet:
    """The registered scripts of one Redis client."""

    write: Any
    read: Any
    snapshot: Any
    clear: Any
    prepare: Any
    commit: Any
    sessions: Any
    settle: Any

    @classmethod
    def register(cls, redis: Any) -> ScriptSet:
        return cls(
            **{name: redis.register_script(script_source(name)) for name in _WITH_COMMON + _PLAIN}
        )
