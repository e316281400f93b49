"""The layers hold: what each module imports, read from its source.

Every import counts, including those under ``TYPE_CHECKING`` and inside
functions: a type-only import is still a dependency a reader must follow.
See ``docs/architecture.md`` for the picture.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import redismem

PACKAGE = Path(redismem.__file__).parent

#: The façade and what stands on it: the only modules that may import it.
ABOVE_THE_FACADE = {
    "redismem",
    "redismem.client",
    "redismem.__main__",
    "redismem.sync",
    "redismem.portability",
}
#: Packages standing on the façade as a whole: the command line, the demo and
#: the service (HTTP API, MCP) are applications of the library.
PACKAGES_ABOVE_THE_FACADE = ("redismem.cli", "redismem.demo", "redismem.server")
#: Layer → the layers it may import (itself included). Top-level foundation
#: modules (errors, env, checks, values, models, config, llm, ...) are open
#: to everyone and listed under "foundation".
LAYERS = {
    "core": {"core", "foundation"},
    "recall": {"recall", "core", "foundation"},
    "longterm": {"longterm", "recall", "core", "prompt rules", "foundation"},
    "summarization": {"summarization", "recall", "core", "prompt rules", "foundation"},
    "context": {"context", "summarization", "core", "prompt rules", "foundation"},
    "prompt rules": {"prompt rules", "foundation"},
}
#: The context layer's rules for what a model reads (token counts, fencing
#: remembered text as data, keeping a tool call with its results) serve every
#: layer that talks to a model.
PROMPT_RULES = {
    "redismem.context.counting",
    "redismem.context.tokens",
    "redismem.context.quoting",
    "redismem.context.toolgroups",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def import_graph() -> dict[str, set[str]]:
    """Module → the redismem modules it imports (any import statement)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - node.level + 1]
                    target = ".".join([*base, node.module] if node.module else base)
                else:
                    target = node.module or ""
                for alias in node.names:  # `from pkg import module` names the module
                    module = f"{target}.{alias.name}"
                    found.add(module if module_path(module) is not None else target)
        graph[name] = {m for m in found if m == "redismem" or m.startswith("redismem.")}
    modules = set(graph)
    return {name: {m for m in deps if m in modules} - {name} for name, deps in graph.items()}


def module_path(module: str) -> Path | None:
    relative = Path(*module.split(".")[1:])
    for candidate in (PACKAGE / relative).with_suffix(".py"), PACKAGE / relative / "__init__.py":
        if candidate.is_file():
            return candidate
    return None


def layer_of(module: str) -> str:
    if module in PROMPT_RULES:
        return "prompt rules"
    parts = module.split(".")
    if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir()):
        return parts[1]
    return "foundation"


def test_the_graph_sees_every_module_and_type_only_imports() -> None:
    graph = import_graph()
    assert "redismem.core.backend" in graph
    # surface.py imports Backend under TYPE_CHECKING only: still an edge.
    assert "redismem.core.backend" in graph["redismem.surface"]


def test_no_module_below_the_facade_imports_it() -> None:
    importers = {
        name
        for name, deps in import_graph().items()
        if "redismem.client" in deps
        and name not in ABOVE_THE_FACADE
        and not any(
            name == package or name.startswith(f"{package}.")
            for package in PACKAGES_ABOVE_THE_FACADE
        )
    }
    assert importers == set()


def test_each_layer_imports_only_the_layers_below_it() -> None:
    wrong = []
    for name, deps in import_graph().items():
        allowed = LAYERS.get(layer_of(name))
        if allowed is None:
            continue
        for dep in deps:
            if dep == "redismem" or layer_of(dep) not in allowed:
                wrong.append((name, dep))
    assert wrong == []


def test_the_core_layer_imports_no_feature() -> None:
    graph = import_graph()
    for name, deps in graph.items():
        if layer_of(name) == "core":
            assert {layer_of(d) for d in deps} <= {"core", "foundation"}, name


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_even_counting_type_only_imports() -> None:
    # The package __init__ imports everything for the public API; a module
    # importing the package is caught by the layer test above.
    graph = {name: deps - {"redismem"} for name, deps in import_graph().items()}
    assert _cycles(graph) == []
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


def test_one_script_runner() -> None:
    """Only ``core/scripts.py`` registers or sends scripts (``core/transport.py``
    puts EVALSHA on the wire for it)."""
    runners = {
        module_name(path)
        for path in PACKAGE.rglob("*.py")
        for needle in ("register_script", "evalsha", "EVALSHA", "SCRIPT LOAD", ".eval(")
        if needle in path.read_text(encoding="utf-8")
    }
    assert runners == {"redismem.core.scripts", "redismem.core.transport"}


def test_one_bm25_and_one_retry_policy() -> None:
    sources = {module_name(p): p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py")}
    bm25 = {name for name, text in sources.items() if "k1 + 1" in text or "(k1 + 1)" in text}
    assert bm25 <= {"redismem.recall.bm25"}
    retry_types = {
        name
        for name, text in sources.items()
        for line in text.splitlines()
        if line.startswith("class ") and "Retry" in line.split("(")[0]
    }
    assert retry_types == {"redismem.core.connection"}
