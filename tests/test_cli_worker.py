"""``redismem worker`` as real processes: per-worker health checks, burst mode.

``CliWorkers`` starts ``python -m redismem worker`` processes (also used by
``test_worker_restart.py``) and reaps every one of them at teardown.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from helpers import redismem_command
from worker_support import dialogue

from redismem import Memory

pytestmark = pytest.mark.processes  # every test runs the CLI

ROOT = Path(__file__).resolve().parents[1]
CLI = redismem_command()


@dataclass
class CliWorker:
    process: subprocess.Popen[bytes]
    log_path: Path
    name: str

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process.wait(timeout=10)


@dataclass
class CliWorkers:
    """``redismem worker`` processes, logs in ``log_dir``, all stopped by ``close()``."""

    log_dir: Path
    started: list[CliWorker] = field(default_factory=list)

    def start(self, env: Mapping[str, str], *args: str, name: str | None = None) -> CliWorker:
        name = name or f"w{len(self.started)}-{uuid.uuid4().hex[:6]}"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [*CLI, "worker", "--name", name, *args],
                env=dict(env),
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        worker = CliWorker(process, log_path, name)
        self.started.append(worker)
        return worker

    def close(self) -> None:
        for worker in self.started:
            with contextlib.suppress(Exception):
                worker.stop()

    def logs(self) -> str:
        return "\n".join(
            f"----- {w.name} (exit {w.process.poll()}) -----\n{w.log()[-3000:]}"
            for w in self.started
        )


def drop_keys(url: str, namespace: str) -> None:
    """Delete every key holding the namespace (memory, queue and health keys)."""
    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"*{namespace}*", count=1000))
        if keys:
            client.unlink(*keys)
    finally:
        client.close()


@pytest.fixture
def cli_workers(tmp_path: Path) -> Iterator[CliWorkers]:
    workers = CliWorkers(tmp_path / "workers")
    try:
        yield workers
    finally:
        workers.close()


def run_cli(
    *args: str, env: Mapping[str, str], timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], env=dict(env), capture_output=True, text=True, timeout=timeout, check=False
    )


def cli_env(url: str, namespace: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDISMEM_")}
    env.update(
        REDISMEM_URL=url,
        REDISMEM_NAMESPACE=namespace,
        REDISMEM_QUEUE_NAME=f"redismem/queue-{namespace}",
        **extra,
    )
    return env


def wait_for_check(
    env: Mapping[str, str],
    *args: str,
    until: Callable[[subprocess.CompletedProcess[str]], bool],
    within: float,
    workers: CliWorkers,
) -> subprocess.CompletedProcess[str]:
    """Run ``worker --check ARGS`` until ``until(result)``."""
    deadline = time.monotonic() + within
    while True:
        result = run_cli("worker", "--check", *args, env=env)
        if until(result):
            return result
        assert time.monotonic() < deadline, (
            f"worker --check {' '.join(args)}: condition not met within {within}s:\n"
            f"{result.stdout}{result.stderr}\n{workers.logs()}"
        )
        time.sleep(0.3)


def healthy(*names: str) -> Callable[[subprocess.CompletedProcess[str]], bool]:
    def check(result: subprocess.CompletedProcess[str]) -> bool:
        return result.returncode == 0 and all(
            f"worker {name}: healthy" in result.stdout for name in names
        )

    return check


def failing(result: subprocess.CompletedProcess[str]) -> bool:
    return result.returncode != 0


def test_check_names_a_frozen_worker_while_the_other_stays_healthy(
    redis_url: str, namespace: str, cli_workers: CliWorkers
) -> None:
    env = cli_env(redis_url, namespace)
    frozen = cli_workers.start(env, name=f"{namespace}-a")
    other = cli_workers.start(env, name=f"{namespace}-b")
    try:
        wait_for_check(env, until=healthy(frozen.name, other.name), within=30, workers=cli_workers)

        frozen.process.send_signal(signal.SIGSTOP)
        # Its health record lives the check interval (5 s) + 1 s.
        result = wait_for_check(env, until=failing, within=15, workers=cli_workers)
        assert f"worker {frozen.name}: STALE" in result.stdout, result.stdout
        assert f"worker {other.name}: healthy" in result.stdout, result.stdout
        assert run_cli("worker", "--check", other.name, env=env).returncode == 0
        one = run_cli("worker", "--check", "--name", frozen.name, env=env)
        assert one.returncode == 1 and frozen.name in one.stdout, one.stdout
        assert other.name not in one.stdout

        frozen.process.send_signal(signal.SIGCONT)
        wait_for_check(env, until=healthy(frozen.name, other.name), within=15, workers=cli_workers)

        cli_workers.close()  # SIGTERM: a worker that stops cleanly leaves the registry
        gone = run_cli("worker", "--check", env=env)
        assert gone.returncode == 1 and "no worker seen" in gone.stdout, gone.stdout
    finally:
        frozen.process.send_signal(signal.SIGCONT)
        cli_workers.close()
        drop_keys(redis_url, namespace)


def test_check_and_stats_say_what_each_worker_runs(
    redis_url: str, namespace: str, cli_workers: CliWorkers
) -> None:
    """``worker --check``, ``stats`` and their ``--json`` name each worker's
    namespaces and plug-ins (names only); a worker that stops takes its
    record with it."""
    env = cli_env(redis_url, namespace, REDISMEM_EXTRACTOR="rules", REDISMEM_EMBEDDER="hashing")
    worker = cli_workers.start(env, name=f"{namespace}-r")
    runs = (
        f"  namespace {namespace}: summarizer keypoints, extractor rules, consolidator off, "
        "embedder hashing (hashing-256)"
    )
    try:
        check = wait_for_check(env, until=healthy(worker.name), within=30, workers=cli_workers)
        assert check.stdout.splitlines()[1:] == [runs], check.stdout
        one = run_cli("worker", "--check", worker.name, "--json", env=env)
        assert one.returncode == 0, one.stderr
        [entry] = json.loads(one.stdout)["workers"]
        assert entry["namespaces"] == [namespace] and entry["extractor"] == "rules"
        assert (entry["summarizer"], entry["consolidator"]) == ("keypoints", "off")
        assert entry["embedder"] == "hashing (hashing-256)" and entry["healthy"]

        stats = run_cli("stats", env=env)
        assert stats.returncode == 0, stats.stderr
        table = stats.stdout.split("\nworkers\n", 1)[1].splitlines()
        headers = "name health namespaces summarizer extractor consolidator embedder"
        assert table[0].split() == headers.split()
        row = [worker.name, "healthy", namespace, "keypoints", "rules", "off", "hashing"]
        assert table[2].split() == [*row, "(hashing-256)"]
        [listed] = json.loads(run_cli("stats", "--json", env=env).stdout)["workers"]
        assert listed == {**entry, "seen_ago_s": listed["seen_ago_s"], "record": listed["record"]}

        worker.stop()  # SIGTERM: deregisters, and its record goes
        gone = run_cli("worker", "--check", worker.name, "--json", env=env)
        [entry] = json.loads(gone.stdout)["workers"]
        assert not entry["registered"] and entry["namespaces"] == [] and entry["extractor"] is None
        client = redis.Redis.from_url(redis_url)
        try:
            assert not client.exists(f"{env['REDISMEM_QUEUE_NAME']}:runs:{worker.name}")
        finally:
            client.close()
    finally:
        cli_workers.close()
        drop_keys(redis_url, namespace)


def test_burst_runs_the_queue_empty_then_exits(redis_url: str, namespace: str) -> None:
    env = cli_env(redis_url, namespace)

    async def write_due_session() -> None:
        async with await Memory.connect(
            redis_url,
            namespace=namespace,
            keep_recent=2,
            summarize_batch=2,
            queue_name=env["REDISMEM_QUEUE_NAME"],
            summarize_delay=0.1,
        ) as memory:
            await memory.write(dialogue(6), session_id="s", user_id="u")

    async def summary() -> Any:
        async with await Memory.connect(redis_url, namespace=namespace) as memory:
            return await memory.summary(session_id="s", user_id="u")

    try:
        asyncio.run(write_due_session())
        result = run_cli("worker", "--burst", env=env, timeout=60)
        assert result.returncode == 0, result.stderr
        found = asyncio.run(summary())
        assert found is not None and found.message_count == 4
    finally:
        drop_keys(redis_url, namespace)


def test_help_lists_the_environment_and_version_prints() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDISMEM_")}
    help_text = run_cli("worker", "--help", env=env).stdout
    for name in ("REDISMEM_URL", "REDISMEM_QUEUE_URL", "REDISMEM_QUEUE_NAME", "REDISMEM_LLM_MODEL"):
        assert name in help_text
    for flag in ("--url", "--queue-url", "--burst", "--check", "--name", "--verbose"):
        assert flag in help_text
    version = run_cli("--version", env=env)
    assert version.returncode == 0
    assert version.stdout.strip() == f"redismem {importlib.metadata.version('redismem')}"
