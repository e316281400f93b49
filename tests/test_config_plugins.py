"""Configuration names plug-ins; ``redismem.plugins`` resolves the names,
importing a plug-in's module only when it is used (the settings import none
of the summarizers, extractors, consolidators and embedders they configure)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from redismem import (
    HashingEmbedder,
    InvalidInput,
    KeyPointsSummarizer,
    LLMConsolidator,
    LLMExtractor,
    LLMSummarizer,
    RuleExtractor,
    TruncationSummarizer,
    consolidator_from_env,
    extractor_from_env,
    plugins,
    summarizer_from_env,
)
from redismem.config import MemoryConfig, WorkerConfig

ROOT = Path(__file__).resolve().parents[1]

#: The modules of the plug-ins the configuration names.
PLUGIN_MODULES = (
    "redismem.summarization.summarizers",
    "redismem.longterm.extraction",
    "redismem.longterm.consolidation",
    "redismem.recall.embeddings",
    "redismem.llm",
)

#: A fresh interpreter holding the package without its ``__init__`` (which
#: re-exports every public name, plug-ins included), so what is imported is
#: what the modules named import.
BARE_PACKAGE = """
import importlib.util, sys, types
spec = importlib.util.find_spec("redismem")
package = types.ModuleType("redismem")
package.__path__ = list(spec.submodule_search_locations)
sys.modules["redismem"] = package
def loaded():
    return {m for m in sys.modules if m.startswith("redismem.")}
"""

LLM_ENV = {"REDISMEM_LLM_BASE_URL": "http://127.0.0.1:9/v1", "REDISMEM_LLM_MODEL": "m"}


def _run(code: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", BARE_PACKAGE + code],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("REDISMEM_")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def _plugin(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in PLUGIN_MODULES)


@pytest.mark.processes  # a fresh interpreter
def test_importing_the_config_imports_no_plugin() -> None:
    loaded = _run("import redismem.config\nprint(*sorted(loaded()))")
    assert "redismem.config" in loaded
    assert [m for m in loaded if _plugin(m)] == []


@pytest.mark.processes  # a fresh interpreter
def test_a_plugin_module_is_imported_when_its_name_is_resolved() -> None:
    code = """
import redismem.config
config = redismem.config.WorkerConfig.from_env(
    {"REDISMEM_URL": "redis://127.0.0.1:6379/0", "REDISMEM_SUMMARIZER": "truncate"}
)
print(type(config.summarizer).__name__, *sorted(loaded()))
"""
    name, *loaded = _run(code)
    assert name == "TruncationSummarizer"
    # The summarizers (and the LLM client they use), no other plug-in.
    assert [m for m in loaded if _plugin(m)] == [
        "redismem.llm",
        "redismem.summarization.summarizers",
    ]


def test_every_registered_name_resolves_to_its_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in LLM_ENV.items():
        monkeypatch.setenv(name, value)
    expected = [
        (
            plugins.SUMMARIZERS,
            {
                "keypoints": KeyPointsSummarizer,
                "truncate": TruncationSummarizer,
                "llm": LLMSummarizer,
            },
        ),
        (plugins.EXTRACTORS, {"rules": RuleExtractor, "llm": LLMExtractor, "off": type(None)}),
        (plugins.CONSOLIDATORS, {"off": type(None), "llm": LLMConsolidator}),
        (plugins.EMBEDDERS, {"none": type(None), "hashing": HashingEmbedder}),
    ]
    for registry, kinds in expected:
        for name, kind in kinds.items():
            assert type(registry.create(name)) is kind, (registry.variable, name)
    # minilm needs an extra: its class is found without building one.
    minilm = plugins.EMBEDDERS.plugins["minilm"]
    assert minilm is not None and minilm.load().__name__ == "MiniLMEmbedder"


def test_plugin_settings_come_from_the_environment() -> None:
    env = {"REDISMEM_SUMMARIZER": "Truncate", "REDISMEM_SUMMARY_MAX_CHARS": "77"}
    assert plugins.SUMMARIZERS.from_env(env) == TruncationSummarizer(77)
    assert plugins.SUMMARIZERS.from_env({}) == KeyPointsSummarizer()
    assert plugins.EXTRACTORS.from_env({}) is None
    llm = plugins.SUMMARIZERS.from_env({"REDISMEM_SUMMARIZER": "llm", **LLM_ENV})
    assert (llm.base_url, llm.model, llm.timeout) == ("http://127.0.0.1:9/v1", "m", 30.0)
    with pytest.raises(InvalidInput, match=r"^REDISMEM_CONSOLIDATOR=llm needs REDISMEM_LLM_BASE"):
        plugins.CONSOLIDATORS.from_env({"REDISMEM_CONSOLIDATOR": "llm"})
    # The plug-in modules' own readers are the registry's.
    for name, value in {"REDISMEM_SUMMARIZER": "truncate", "REDISMEM_EXTRACTOR": "rules"}.items():
        env = {name: value, "REDISMEM_CONSOLIDATOR": "llm", **LLM_ENV}
        assert summarizer_from_env(env) == plugins.SUMMARIZERS.from_env(env)
        assert extractor_from_env(env) == plugins.EXTRACTORS.from_env(env)
        assert consolidator_from_env(env) == plugins.CONSOLIDATORS.from_env(env)


def test_an_unknown_name_lists_the_known_ones() -> None:
    cases = [
        (plugins.SUMMARIZERS, "REDISMEM_SUMMARIZER must be keypoints, truncate or llm, got 'gpt'"),
        (plugins.EXTRACTORS, "REDISMEM_EXTRACTOR must be rules, llm or off, got 'gpt'"),
        (plugins.CONSOLIDATORS, "REDISMEM_CONSOLIDATOR must be off or llm, got 'gpt'"),
        (plugins.EMBEDDERS, "REDISMEM_EMBEDDER must be none, hashing or minilm, got 'gpt'"),
    ]
    for registry, message in cases:
        with pytest.raises(InvalidInput) as from_env:
            registry.from_env({registry.variable: "gpt"})
        with pytest.raises(InvalidInput) as by_name:
            registry.create("gpt")
        assert str(from_env.value) == str(by_name.value) == message
    with pytest.raises(
        InvalidInput, match=r"^embedder must be None, 'hashing' or 'minilm', got 'w"
    ):
        MemoryConfig(embedder="word2vec")
    with pytest.raises(InvalidInput, match="async embed"):
        MemoryConfig(embedder=object())
    with pytest.raises(InvalidInput, match="summarizer must have an async summarize"):
        WorkerConfig(summarizer=object())
