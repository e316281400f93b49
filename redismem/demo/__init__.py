"""``redismem demo``: a fleet of agent processes and workers sharing memory,
then the product at work and a verdict (``fleet``, ``report``).

Light on purpose: each agent process runs ``python -m redismem.demo.agent``,
which imports this package first; ``DemoOptions`` and ``run_demo`` load the
fleet's module (workers' health, summarizers, report) only when asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from redismem.demo.fleet import DemoOptions, default_url, run_demo

__all__ = ["DemoOptions", "default_url", "run_demo"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from redismem.demo import fleet

        return getattr(fleet, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
