"""The suite's own rules: a test looks at its own keys only (the server is
shared), leaves none behind, and is in the tier its fixtures say."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis
from conftest import TIERS
from helpers import keys_matching, pttls, snapshot
from servers import LocalSentinel

TESTS = Path(__file__).resolve().parent


@pytest.mark.parametrize("pattern", ["*", "**", ""])
async def test_a_snapshot_of_the_whole_database_is_refused(pattern: str) -> None:
    # Another test's keys come and go in the shared database: a comparison of
    # all of it fails at random (a key expiring between two snapshots).
    for look in (snapshot, keys_matching, pttls):
        with pytest.raises(ValueError, match="whole shared database"):
            await look(None, pattern)


INNER_TESTS = """
import redis


def _client(url):
    return redis.Redis.from_url(url)


def test_leaves_queue_keys(redis_url):
    with _client(redis_url) as r:
        r.set("redismem/queue-x:health-check", b"alive", px=60_000)
        r.zadd("arq:queue-x", {"job": 1})


def test_cleans_up(redis_url):
    with _client(redis_url) as r:
        r.set("arq:job:y", b"y")
        r.delete("arq:job:y")


def test_its_namespace_and_jobs_go_with_the_namespace_fixture(redis_url, namespace):
    with _client(redis_url) as r:
        r.set(f"{namespace}:{{u:a}}:s:s:msgs", b"m")
        r.set(f"arq:job:sum:{namespace}:a:s:1", b"job")
        r.zadd("redismem/queue", {f"sum:{namespace}:a:s:1": 1})


def test_fails_and_leaves_a_key(redis_url):
    with _client(redis_url) as r:
        r.set("arq:left-by-a-failure", b"x")
    assert False, "a failing test"


def test_the_next_test_finds_an_empty_server(redis_url):
    with _client(redis_url) as r:
        assert r.dbsize() == 0
"""


@pytest.mark.processes
@pytest.mark.redis
def test_a_test_that_leaves_keys_fails_at_teardown_naming_them(tmp_path: Path) -> None:
    """An inner pytest run with this suite's conftest: a test that leaves
    keys (queue side, arq) errors at teardown with the keys named; keys of
    its namespace and its jobs in a shared queue go with the ``namespace``
    fixture; a failing test is not blamed twice; the next test starts on an
    empty server."""
    inner = tmp_path / "tests"
    shutil.copytree(TESTS / "helpers", inner / "helpers")
    for name in ("conftest.py", "servers.py", "worker_support.py"):
        shutil.copy(TESTS / name, inner / name)
    (inner / "test_inner.py").write_text(INNER_TESTS)
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
        "markers =\n" + "".join(f"    {tier}\n" for tier in TIERS)
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDISMEM_")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rE", str(inner)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert re.search(r"\b1 failed, 4 passed, 1 error\b", out), out
    # Only the leak is an error: the failing test's key was deleted without
    # a second report, and the last test found the server empty.
    [error] = re.findall(r"ERROR at teardown of (\w+)", out)
    assert error == "test_leaves_queue_keys", out
    assert "the test left 2 key(s)" in out, out
    assert "b'redismem/queue-x:health-check' (string, pttl" in out, out
    assert "b'arq:queue-x' (zset, pttl -1)" in out, out


def test_a_tests_jobs_in_the_default_queue_behind_sentinel_go_with_its_keys(
    sentinel: LocalSentinel, namespace: str
) -> None:
    """Behind Sentinel the queue lives with the data: the teardown's cleanup
    there removes the test's jobs from a shared queue, and only those."""
    queue = f"redismem/queue-{uuid.uuid4().hex[:8]}"  # stands for the default queue
    with redis.Redis.from_url(sentinel.master_url()) as client:
        try:
            client.zadd(queue, {f"sum:{namespace}:a:s:1": 1, "sum:someone-else:a:s:1": 2})
            client.set(f"{namespace}:{{u:a}}:s:s:msgs", b"m")
            sentinel.delete_matching(f"*{namespace}*")
            assert client.zrange(queue, 0, -1) == [b"sum:someone-else:a:s:1"]
            assert client.exists(f"{namespace}:{{u:a}}:s:s:msgs") == 0
        finally:
            client.delete(queue)


def _tiers(node: pytest.Item) -> set[str]:
    return {mark.name for mark in node.iter_markers() if mark.name in TIERS}


def test_a_test_that_needs_no_server_is_in_the_unit_tier(request: pytest.FixtureRequest) -> None:
    assert _tiers(request.node) == {"unit"}


def test_a_backend_test_is_in_its_backends_tier(
    backend_url: str, request: pytest.FixtureRequest
) -> None:
    backend = request.node.callspec.params["backend_url"]
    assert _tiers(request.node) == {"embedded" if backend == "embedded" else "redis"}


def test_a_test_with_worker_processes_is_in_the_processes_tier(
    workers: object, redis_url: str, request: pytest.FixtureRequest
) -> None:
    assert _tiers(request.node) == {"processes", "redis"}
