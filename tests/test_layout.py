"""The module layout: every module imports on its own, in any order, and the
imports between modules form no cycle."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import redismem

PACKAGE_DIR = Path(redismem.__file__).parent


def _module_files() -> dict[str, Path]:
    """Dotted name -> file of every module of the package, subpackages included."""
    found = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _module_files()
#: Importing these runs something (the CLI).
NOT_IMPORTABLE = {"redismem.__main__"}


def _is_entry_point(module: str) -> bool:
    """The package, the CLI, the sync client, the demo and the server create a
    ``Memory``; everything else is library code that is given one, or a ``Backend``."""
    return module in {
        "redismem",
        "redismem.__main__",
        "redismem.sync",
    } or module.startswith(("redismem.cli", "redismem.demo", "redismem.server"))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Imports(ast.NodeVisitor):
    """The names a module imports when it runs: module level and inside
    functions (lazy imports), not under ``if TYPE_CHECKING:``."""

    def __init__(self, module: str, is_package: bool) -> None:
        self.package = module if is_package else module.rpartition(".")[0]
        self.names: set[str] = set()

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        for child in node.orelse:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        self.names.update(alias.name for alias in node.names)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            parts = self.package.split(".")
            parts = parts[: len(parts) - node.level + 1]
            base = ".".join([*parts, node.module] if node.module else parts)
        else:
            base = node.module or ""
        self.names.add(base)
        # ``from package import name`` imports the submodule ``name`` when it is one.
        self.names.update(f"{base}.{alias.name}" for alias in node.names)


def _imports_of(module: str, source: str, is_package: bool = False) -> set[str]:
    """The package modules ``module`` imports (and their parent packages,
    which an import runs too), except its own ancestors, which are always
    imported before it."""
    visitor = _Imports(module, is_package)
    visitor.visit(ast.parse(source))
    ancestors = {module.rsplit(".", n)[0] for n in range(1, module.count(".") + 1)}
    targets = set()
    for name in visitor.names:
        parts = name.split(".")
        for size in range(1, len(parts) + 1):
            candidate = ".".join(parts[:size])
            if candidate in MODULES and candidate not in ancestors and candidate != module:
                targets.add(candidate)
    return targets


def import_graph() -> dict[str, set[str]]:
    return {
        module: _imports_of(module, path.read_text(), path.name == "__init__.py")
        for module, path in MODULES.items()
    }


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _path(graph: dict[str, set[str]], start: str, goal: str) -> list[str]:
    """One import path from ``start`` to ``goal`` (for failure messages)."""
    paths = {start: [start]}
    queue = [start]
    for node in queue:
        for target in sorted(graph[node]):
            if target not in paths:
                paths[target] = [*paths[node], target]
                queue.append(target)
    return paths.get(goal, [])


# -- the graph ---------------------------------------------------------------------


def test_the_import_graph_has_no_cycle() -> None:
    graph = import_graph()
    cycles = _cycles(graph)
    described = [
        " -> ".join(_path(graph, group[0], group[1]) + _path(graph, group[1], group[0])[1:])
        for group in cycles
    ]
    assert cycles == [], "import cycles:\n" + "\n".join(described)


def test_library_modules_import_the_client_for_typing_only() -> None:
    """``Memory`` is created by the entry points; library code takes one and
    refers to the class for type hints only (``checks.is_memory`` tests for it)."""
    graph = import_graph()
    importers = {
        module
        for module, targets in graph.items()
        if "redismem.client" in targets and not _is_entry_point(module)
    }
    assert importers == set()


def test_the_graph_counts_lazy_imports_and_skips_type_checking_ones() -> None:
    source = textwrap.dedent(
        """
        from typing import TYPE_CHECKING
        import redismem.errors
        from ..core import keys
        from ..models import Message

        if TYPE_CHECKING:
            from ..client import Memory
        else:
            from ..core.codec import decode_entry

        def later():
            from .strategies import TokenBudget
            import json
        """
    )
    assert _imports_of("redismem.context.tokens", source) == {
        "redismem.errors",
        "redismem.core",  # the parent package of what it imports runs too
        "redismem.core.keys",
        "redismem.models",
        "redismem.core.codec",
        "redismem.context.strategies",
    }
    in_subpackage = _imports_of("redismem.sub.module", "from .. import client, checks\n")
    assert in_subpackage == {"redismem.client", "redismem.checks"}
    cyclic = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(cyclic) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_every_module() -> None:
    assert {"redismem", "redismem.client", "redismem.context.toolgroups", "redismem.checks"} <= set(
        MODULES
    )
    graph = import_graph()
    assert "redismem.context.toolgroups" in graph["redismem.context.strategies"]
    assert "redismem.context.agent_memory" in graph["redismem.client"]  # a lazy import
    assert "redismem.client" not in graph["redismem.summarization.job"]  # for typing only


# -- importing ---------------------------------------------------------------------

# Run in a fresh interpreter: it loads the third-party packages the library
# imports once, then forks one child per module. Each child starts with no
# redismem module loaded and imports its module before anything else of the
# package, even the package's own __init__: ``python -c "import redismem.x"``
# would run that first, which imports most modules in one fixed order.
_IMPORT_EACH = r"""
import importlib, os, sys, traceback, types

package_dir, warm, modules = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
for name in warm:
    try:
        importlib.import_module(name)
    except ImportError:
        pass

def import_first(module):
    if module != "redismem":  # the package's __init__ stays unrun
        package = types.ModuleType("redismem")
        package.__path__ = [package_dir]
        package.__package__ = "redismem"
        sys.modules["redismem"] = package
    importlib.import_module(module)

running, failed = {}, []
for module in modules:
    if len(running) >= (os.cpu_count() or 1):
        pid, status = os.wait()
        if status:
            failed.append(running[pid])
        del running[pid]
    pid = os.fork()
    if pid == 0:
        try:
            import_first(module)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    running[pid] = module
for pid, module in running.items():
    if os.waitpid(pid, 0)[1]:
        failed.append(module)
print("FAILED", *sorted(failed))
"""


def _third_party_imports() -> Iterator[str]:
    """Top-level modules the package imports at module level (to load them once)."""
    for path in MODULES.values():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Import):
                yield from (alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                yield node.module


@pytest.mark.processes
@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks one child per module")
def test_every_module_imports_first_in_a_fresh_interpreter() -> None:
    modules = sorted(set(MODULES) - NOT_IMPORTABLE)
    warm = sorted({name for name in _third_party_imports() if not name.startswith("redismem")})
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH, str(PACKAGE_DIR), " ".join(warm), *modules],
        capture_output=True,
        text=True,
        timeout=100,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["FAILED"], result.stderr
