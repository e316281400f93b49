"""One config home, read at run time: every ``REDISMEM_*`` variable is read in
``redismem/env.py``, parsed there with an error naming it, and a worker's
settings are read when the worker is created, never frozen at import."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_cli_commands import assert_one_line_error, clean_env
from test_cli_worker import run_cli

from redismem import KeyPointsSummarizer, TruncationSummarizer, env
from redismem.config import MemoryConfig, WorkerConfig
from redismem.errors import InvalidInput

ROOT = Path(__file__).resolve().parents[1]
SERVER = "redis://127.0.0.1:1/0"  # never connected to here


@pytest.fixture(autouse=True)
def no_redismem_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("REDISMEM_"):
            monkeypatch.delenv(name)


# -- one home ------------------------------------------------------------------


def test_only_env_py_reads_the_environment() -> None:
    readers = re.compile(r"os\.environ|os\.getenv|getenv\(")
    found = [
        str(path.relative_to(ROOT))
        for folder in ("redismem", "workers")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if readers.search(path.read_text()) and path != ROOT / "redismem" / "env.py"
    ]
    assert found == []


def test_every_variable_read_is_documented_and_every_documented_one_is_read() -> None:
    sources = "\n".join(
        path.read_text() for path in (ROOT / "redismem").rglob("*.py") if path.name != "env.py"
    )
    used = set(re.findall(r'(?:env|environment)\.\w+\(\s*"(REDISMEM_[A-Z_]+)"', sources))
    # A plug-in registry reads its variable (redismem.plugins).
    used |= set(re.findall(r'Registry\(\s*"(REDISMEM_[A-Z_]+)"', sources))
    assert used - set(env.VARIABLES) == set()
    assert set(env.VARIABLES) - used == set()


def test_the_configuration_page_lists_every_variable() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert [name for name in env.VARIABLES if f"`{name}`" not in page] == []


def test_an_undocumented_variable_is_a_bug_not_a_setting() -> None:
    with pytest.raises(KeyError):
        env.text("REDISMEM_NO_SUCH_THING")


# -- typed readers -----------------------------------------------------------------


def test_unset_and_empty_read_as_none() -> None:
    assert env.text("REDISMEM_URL", {}) is None
    assert env.text("REDISMEM_URL", {"REDISMEM_URL": "  "}) is None
    assert env.seconds("REDISMEM_JOB_TIMEOUT", {"REDISMEM_JOB_TIMEOUT": ""}) is None
    assert env.words("REDISMEM_NAMESPACE", {}) is None
    assert env.text("REDISMEM_URL", {"REDISMEM_URL": " redis://h/0 "}) == "redis://h/0"


@pytest.mark.parametrize(
    ("name", "raw", "read"),
    [
        ("REDISMEM_JOB_TIMEOUT", "soon", env.seconds),
        ("REDISMEM_JOB_TIMEOUT", "0", env.seconds),
        ("REDISMEM_JOB_TIMEOUT", "-3", env.seconds),
        ("REDISMEM_JOB_TIMEOUT", "nan", env.seconds),
        ("REDISMEM_JOB_TIMEOUT", "inf", env.seconds),
        ("REDISMEM_SUMMARY_MAX_CHARS", "2k", env.integer),
        ("REDISMEM_SUMMARY_MAX_CHARS", "0", env.integer),
        ("REDISMEM_NAMESPACE", ",,", env.words),
        ("REDISMEM_TTL", "soon", env.ttl),
    ],
)
def test_a_value_that_does_not_parse_names_its_variable(
    name: str, raw: str, read: Callable[..., Any]
) -> None:
    with pytest.raises(InvalidInput, match=f"^{name} must .*{re.escape(repr(raw))}"):
        read(name, {name: raw})


def test_readers_parse() -> None:
    assert env.seconds("REDISMEM_SWEEP_GRACE", {"REDISMEM_SWEEP_GRACE": "0"}, zero=True) == 0
    assert env.seconds("REDISMEM_JOB_TIMEOUT", {"REDISMEM_JOB_TIMEOUT": "2.5"}) == 2.5
    assert env.integer("REDISMEM_SUMMARY_MAX_CHARS", {"REDISMEM_SUMMARY_MAX_CHARS": "9"}) == 9
    assert env.words("REDISMEM_NAMESPACE", {"REDISMEM_NAMESPACE": "a, b,,c "}) == ("a", "b", "c")
    assert env.ttl("REDISMEM_TTL", {"REDISMEM_TTL": "None"}) is None
    assert env.ttl("REDISMEM_TTL", {"REDISMEM_TTL": "30"}) == 30.0
    summarizer = env.choice(
        "REDISMEM_SUMMARIZER", ("keypoints", "llm"), {"REDISMEM_SUMMARIZER": "LLM"}
    )
    assert summarizer == "llm"
    with pytest.raises(InvalidInput, match=r"^REDISMEM_SUMMARIZER must be keypoints or llm"):
        env.choice("REDISMEM_SUMMARIZER", ("keypoints", "llm"), {"REDISMEM_SUMMARIZER": "gpt"})


def test_inherited_copies_the_environment_with_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDISMEM_QUEUE_URL", SERVER)
    child = env.inherited(REDISMEM_URL=SERVER, REDISMEM_QUEUE_URL=None)
    assert child["REDISMEM_URL"] == SERVER and "REDISMEM_QUEUE_URL" not in child
    assert os.environ["REDISMEM_QUEUE_URL"] == SERVER  # the process's own is untouched


# -- the worker's config ---------------------------------------------------------


def test_worker_config_defaults() -> None:
    config = WorkerConfig.from_env({})
    assert config.url == "memory://" and config.queue_url == config.url
    assert config.queue_name == "redismem/queue"
    assert config.namespaces == ("redismem",)
    assert re.fullmatch(r".+-\d+", config.name)
    assert isinstance(config.summarizer, KeyPointsSummarizer)
    assert (config.summarizer_timeout, config.job_timeout) == (30.0, 45)
    assert (config.sweep_seconds, config.sweep_grace) == (10, 30.0)


def test_worker_config_from_the_environment_and_keywords_win() -> None:
    config = WorkerConfig.from_env(
        {
            "REDISMEM_URL": SERVER,
            "REDISMEM_QUEUE_URL": "redis://127.0.0.1:2/0",
            "REDISMEM_NAMESPACE": "a,b",
            "REDISMEM_QUEUE_NAME": "redismem/q-test",
            "REDISMEM_WORKER_NAME": "w1",
            "REDISMEM_SUMMARIZER": "truncate",
            "REDISMEM_SUMMARY_MAX_CHARS": "99",
            "REDISMEM_SUMMARIZER_TIMEOUT": "5",
            "REDISMEM_JOB_TIMEOUT": "20.9",
            "REDISMEM_SWEEP_SECONDS": "3",
            "REDISMEM_SWEEP_GRACE": "0",
        },
        name="w2",
    )
    assert config.url == SERVER and config.queue_url == "redis://127.0.0.1:2/0"
    assert config.namespaces == ("a", "b") and config.queue_name == "redismem/q-test"
    assert config.name == "w2"
    assert config.summarizer == TruncationSummarizer(99)
    assert (config.summarizer_timeout, config.job_timeout) == (5.0, 20)
    assert (config.sweep_seconds, config.sweep_grace) == (3, 0.0)


def test_a_keyword_replaces_its_variable_unread() -> None:
    bad = {"REDISMEM_JOB_TIMEOUT": "soon", "REDISMEM_SUMMARIZER": "gpt"}
    config = WorkerConfig.from_env(bad, job_timeout=60, summarizer=KeyPointsSummarizer())
    assert config.job_timeout == 60


@pytest.mark.parametrize(
    ("variables", "needle"),
    [
        ({"REDISMEM_JOB_TIMEOUT": "soon"}, "REDISMEM_JOB_TIMEOUT must be a positive number"),
        ({"REDISMEM_SWEEP_GRACE": "-1"}, "REDISMEM_SWEEP_GRACE must be a number of seconds >= 0"),
        ({"REDISMEM_SUMMARIZER": "gpt"}, "REDISMEM_SUMMARIZER must be keypoints, truncate or llm"),
        ({"REDISMEM_SUMMARIZER": "llm"}, "REDISMEM_SUMMARIZER=llm needs REDISMEM_LLM_BASE_URL"),
        (
            {"REDISMEM_JOB_TIMEOUT": "20", "REDISMEM_SUMMARIZER_TIMEOUT": "30"},
            "REDISMEM_JOB_TIMEOUT, 20 s) must exceed",
        ),
        ({"REDISMEM_NAMESPACE": "a b"}, "namespace"),
        ({"REDISMEM_NAMESPACE": "q", "REDISMEM_QUEUE_NAME": "q:jobs"}, "lies inside namespace"),
    ],
)
def test_a_bad_worker_setting_is_invalid_input(variables: dict[str, str], needle: str) -> None:
    with pytest.raises(InvalidInput, match=re.escape(needle)):
        WorkerConfig.from_env(variables)


def test_worker_settings_follow_the_environment_after_import(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import redismem.workers
    from redismem.workers import worker_settings

    monkeypatch.setenv("REDISMEM_URL", SERVER)
    for timeout, sweep in (("60", "5"), ("90", "20")):
        monkeypatch.setenv("REDISMEM_JOB_TIMEOUT", timeout)
        monkeypatch.setenv("REDISMEM_SWEEP_SECONDS", sweep)
        monkeypatch.setenv("REDISMEM_QUEUE_NAME", f"redismem/q-{timeout}")
        config = WorkerConfig.from_env()
        assert config.job_timeout == int(timeout)
        settings = worker_settings(config)
        [job] = settings["functions"]
        [sweep_job] = settings["cron_jobs"]
        assert job.timeout_s == sweep_job.timeout_s == int(timeout)
        assert sweep_job.second == set(range(0, 60, int(sweep)))
        assert settings["queue_name"] == f"redismem/q-{timeout}"
        assert settings["ctx"] == {"config": config}
        # arq's CLI looks the class up: built from the environment of that moment.
        cls = redismem.workers.WorkerSettings
        assert cls.functions[0].timeout_s == int(timeout)
        assert cls.queue_name == f"redismem/q-{timeout}"


def test_arq_settings_refuse_the_embedded_backend() -> None:
    import redismem.workers

    with pytest.raises(InvalidInput, match="REDISMEM_URL 'memory://' is the embedded"):
        redismem.workers.WorkerSettings  # noqa: B018 - the lookup builds it


def test_the_memory_config_reads_the_environment_when_called(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REDISMEM_NAMESPACE", "first")
    assert MemoryConfig.from_env().namespace == "first"
    monkeypatch.setenv("REDISMEM_NAMESPACE", "second")
    monkeypatch.setenv("REDISMEM_TTL", "never")
    config = MemoryConfig.from_env()
    assert (config.namespace, config.ttl) == ("second", None)


# -- the command line ----------------------------------------------------------------


@pytest.mark.processes  # runs the CLI
@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("REDISMEM_JOB_TIMEOUT", "soon"),
        ("REDISMEM_SWEEP_SECONDS", "-1"),
        ("REDISMEM_SUMMARIZER", "gpt"),
    ],
)
def test_a_bad_worker_variable_is_one_line_from_the_cli(variable: str, value: str) -> None:
    result = run_cli("worker", env=clean_env(REDISMEM_URL=SERVER, **{variable: value}))
    assert result.returncode == 2
    line = assert_one_line_error(result, variable, repr(value))
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "hint: see redismem worker --help" in line
