"""The framework adapters are optional: ``import redismem`` (and
``redismem.adapters``) imports no framework, and an adapter whose framework
is missing says which extra to install. Each in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.processes  # a fresh interpreter per check

#: adapter module -> (the framework module it needs, the distribution to name).
ADAPTERS = {
    "langchain": ("langchain_core", "langchain-core"),
    "langgraph": ("langgraph", "langgraph-checkpoint"),
    "llamaindex": ("llama_index", "llama-index-core"),
}
#: The top-level packages of every framework (``langchain`` also covers
#: ``langchain_core`` and the other ``langchain*`` packages).
FRAMEWORKS = ("langchain", "langgraph", "llama_index")


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


def test_redismem_never_imports_a_framework() -> None:
    result = _run(
        "import sys, redismem, redismem.adapters\n"
        f"frameworks = {FRAMEWORKS!r}\n"
        "imported = sorted({n.split('.')[0] for n in sys.modules if n.startswith(frameworks)})\n"
        "assert not imported, f'imported {imported}'"
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_a_missing_framework_names_the_extra(adapter: str) -> None:
    framework, distribution = ADAPTERS[adapter]
    result = _run(
        "import sys\n"
        f"sys.modules[{framework!r}] = None\n"
        "from redismem import MissingDependency\n"
        "try:\n"
        f"    import redismem.adapters.{adapter}\n"
        "except MissingDependency as exc:\n"
        "    print(exc)\n"
    )
    assert result.returncode == 0, result.stderr
    assert distribution in result.stdout
    assert f"pip install 'redismem[{adapter}]'" in result.stdout
