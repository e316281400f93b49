"""The curl walkthrough of docs/server.md runs as written, against a real
``redismem serve`` and a real worker, and does what its comments say."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import server_support
from server_support import RunningServer, server_env

pytestmark = pytest.mark.processes
http_server = server_support.http_server
served = server_support.served

PAGE = Path(__file__).resolve().parents[1] / "docs" / "server.md"
MARKER = "<!-- the walkthrough below runs as written in tests/test_server_readme.py -->"


def walkthrough() -> str:
    text = PAGE.read_text(encoding="utf-8")
    after = text.split(MARKER, 1)[1]
    found = re.match(r"\s*```bash\n(.*?)```", after, re.DOTALL)
    assert found, "the marker must sit right above the walkthrough's bash block"
    return found.group(1)


def test_the_walkthrough_is_in_the_readme() -> None:
    script = walkthrough()
    for route in ("/messages", "/context", "/search", "/memories", "/export", "/flush"):
        assert route in script


@pytest.fixture
def worker(served: RunningServer) -> Iterator[subprocess.Popen[bytes]]:
    """A real worker on the server's first namespace and queue."""
    env = server_env(
        REDISMEM_URL=served.redis_url,
        REDISMEM_NAMESPACE=served.a,
        REDISMEM_QUEUE_NAME=served.queue_name,
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "redismem", "worker"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_curl_walkthrough_runs_as_written(
    served: RunningServer, worker: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    env = {
        "PATH": "/usr/bin:/bin:/usr/local/bin",
        "KEY": served.key(served.a, "admin"),
        "API": served.api(served.a),
    }
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", walkthrough()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    replies = [json.loads(part) for part in _json_documents(done.stdout)]
    appended, last, context, flushed, found, added, known, cleared = replies
    assert [m["content"] for m in appended["messages"]][1] == "TP1234 leaves Friday at 9:05."
    assert len(last["messages"]) == 2
    assert context["messages"][-1]["content"].startswith("TP1234")
    assert flushed == {"done": True}
    assert any("Lisbon" in hit["message"]["content"] for hit in found["hits"]), found
    assert added["record"]["object"] == "window"
    assert [hit["record"]["object"] for hit in known["hits"]] == ["window"]
    exported = json.loads((tmp_path / "alice.json").read_text())
    assert exported["user_id"] == "alice"
    assert exported["sessions"] and exported["memories"]
    # ...then gone in one call: no key of alice is left in the namespace.
    assert cleared["removed"] > 0
    client = redis.Redis.from_url(served.redis_url)
    try:
        assert list(client.scan_iter(match=f"{served.a}:{{u:alice}}*", count=1000)) == []
    finally:
        client.close()


def _json_documents(text: str) -> Iterator[str]:
    """The JSON documents curl printed one after another (no separator)."""
    decoder = json.JSONDecoder()
    at = 0
    while at < len(text):
        while at < len(text) and text[at].isspace():
            at += 1
        if at >= len(text):
            return
        _value, end = decoder.raw_decode(text, at)
        yield text[at:end]
        at = end
