"""Helpers for the summarization and worker tests.

* ``FakeChatServer``: a local OpenAI-compatible ``/chat/completions`` endpoint
  (stdlib ``ThreadingHTTPServer`` on 127.0.0.1, in a thread) whose answers a
  test scripts request by request: delays, holds, HTTP errors, garbage.
* ``WorkerPool``: real ``arq workers.WorkerSettings`` processes, configured by
  environment, killed (SIGKILL) or stopped (SIGTERM) by the test and always
  reaped at teardown.
* ``session_state`` / ``assert_invariant``: an atomic (MULTI) look at one
  session, for checking "stored + summarized == written" at any moment.
* ``eventually``: bounded polling instead of fixed sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from redismem import Memory
from redismem.core.codec import decode_summary

ROOT = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------------------
# polling
# ---------------------------------------------------------------------------


async def eventually(
    check: Callable[[], Awaitable[Any]],
    *,
    within: float = 20.0,
    step: float = 0.1,
    what: str = "condition",
    describe: Callable[[], str] | None = None,
) -> Any:
    """Await ``check()`` every ``step`` seconds until it returns a truthy value
    (returned), failing with ``what`` (and ``describe()``) after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            extra = f"\n{describe()}" if describe is not None else ""
            raise AssertionError(f"timed out after {within}s waiting for {what}{extra}")
        await asyncio.sleep(step)


# ---------------------------------------------------------------------------
# a fake chat-completions server
# ---------------------------------------------------------------------------


def completion(content: Any) -> bytes:
    """A chat-completions response body carrying ``content``."""
    return json.dumps(
        {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "model": "fake",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
        }
    ).encode()


@dataclass
class Reply:
    """How the fake server answers one request."""

    status: int = 200
    body: bytes | None = None  # None: a completion carrying ``content``
    content: str = "fake summary"
    delay: float = 0.0  # seconds to wait before answering
    hold: threading.Event | None = None  # wait for this (at most 30 s) before answering
    content_type: str = "application/json"


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    at: float

    @property
    def json(self) -> Any:
        return json.loads(self.raw)

    @property
    def transcript(self) -> str:
        """The user message of the request (previous summary + new messages)."""
        return str(self.json["messages"][-1]["content"])


Responder = Callable[[int, RecordedRequest], Reply]


def _default_responder(index: int, request: RecordedRequest) -> Reply:
    return Reply(content=f"fake summary #{index}")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away (killed worker, timed-out call) is expected


class FakeChatServer:
    """``with FakeChatServer(responder) as server: ... server.base_url``.

    ``responder(index, request)`` (index counts from 0) returns the ``Reply``;
    every request is recorded in ``requests``.
    """

    def __init__(self, responder: Responder | None = None) -> None:
        self.responder: Responder = responder or _default_responder
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------

    def start(self) -> FakeChatServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._send(404, b'{"error": "not found"}', "application/json")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                request = RecordedRequest(
                    method="POST",
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    raw=raw,
                    at=time.monotonic(),
                )
                with owner._lock:
                    index = len(owner.requests)
                    owner.requests.append(request)
                reply = owner.responder(index, request)
                if reply.hold is not None:
                    deadline = time.monotonic() + 30
                    while not reply.hold.is_set() and not owner._closing.is_set():
                        if time.monotonic() > deadline:
                            break
                        reply.hold.wait(0.05)
                if reply.delay:
                    owner._closing.wait(reply.delay)
                body = reply.body if reply.body is not None else completion(reply.content)
                self._send(reply.status, body, reply.content_type)

            def _send(self, status: int, body: bytes, content_type: str) -> None:
                with contextlib.suppress(OSError):
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(body)))
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(body)
                    self.wfile.flush()
                self.close_connection = True

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeChatServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- inspection -------------------------------------------------------

    @property
    def port(self) -> int:
        assert self._server is not None, "start() the server first"
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.requests)

    async def wait_requests(self, n: int, within: float = 20.0) -> list[RecordedRequest]:
        """Wait until at least ``n`` requests have arrived."""

        async def enough() -> bool:
            return self.count >= n

        await eventually(enough, within=within, what=f"{n} request(s) at the fake LLM server")
        with self._lock:
            return list(self.requests)


# ---------------------------------------------------------------------------
# worker processes
# ---------------------------------------------------------------------------

WORKER_COMMAND = [sys.executable, "-m", "arq", "workers.WorkerSettings"]


def worker_env(
    redis_url: str, namespace: str, queue_name: str, **extra: str | float | int
) -> dict[str, str]:
    """The environment of a worker process: the parent's without any
    ``REDISMEM_*`` variable, plus the worker's configuration. ``extra`` keys
    are the variable names without the ``REDISMEM_`` prefix (``SUMMARIZER=...``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDISMEM_")}
    env.update(
        PYTHONUNBUFFERED="1",
        REDISMEM_URL=redis_url,
        REDISMEM_NAMESPACE=namespace,
        REDISMEM_QUEUE_NAME=queue_name,
    )
    if redis_url.startswith("redis+cluster://") and "QUEUE_URL" not in extra:
        # The queue cannot live on a cluster: the test's standalone server,
        # which conftest's clean_env names for cluster tests.
        env["REDISMEM_QUEUE_URL"] = os.environ["REDISMEM_QUEUE_URL"]
    for name, value in extra.items():
        env[f"REDISMEM_{name.upper()}"] = str(value)
    return env


@dataclass
class WorkerProcess:
    """One ``arq workers.WorkerSettings`` process."""

    process: subprocess.Popen[bytes]
    log_path: Path
    queue_name: str
    name: str

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: the worker dies mid-whatever, without any cleanup."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def pause(self) -> None:
        """SIGSTOP: the whole process freezes (its event loop and threads)."""
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (arq shuts down cleanly), SIGKILL if it does not exit in time."""
        if self.process.poll() is None:
            self.resume()
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process.wait(timeout=10)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


@dataclass
class WorkerPool:
    """Starts worker processes and reaps every one of them in ``close()``."""

    log_dir: Path
    started: list[WorkerProcess] = field(default_factory=list)

    def start(self, env: Mapping[str, str], name: str | None = None) -> WorkerProcess:
        name = name or f"worker{len(self.started)}-{uuid.uuid4().hex[:6]}"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                WORKER_COMMAND,
                env=dict(env),
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a ^C on the test run does not hit the workers
            )
        worker = WorkerProcess(process, log_path, env.get("REDISMEM_QUEUE_NAME", ""), name)
        self.started.append(worker)
        return worker

    def close(self) -> None:
        for worker in self.started:
            with contextlib.suppress(Exception):
                worker.stop(timeout=5)
            if worker.process.poll() is None:  # pragma: no cover - last resort
                worker.kill()

    def logs(self) -> str:
        return "\n".join(
            f"----- {w.name} (pid {w.pid}, exit {w.process.poll()}) -----\n{w.log()[-4000:]}"
            for w in self.started
        )


async def wait_ready(raw: Any, worker: WorkerProcess, within: float = 20.0) -> None:
    """Wait until the worker has recorded its first health check (it is then
    polling its queue); fail at once if the process exited."""
    key = f"{worker.queue_name}:health-check"
    deadline = time.monotonic() + within
    while not await raw.exists(key):
        if not worker.alive:
            raise AssertionError(f"worker {worker.name} exited:\n{worker.log()[-4000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"worker {worker.name} not ready:\n{worker.log()[-4000:]}")
        await asyncio.sleep(0.05)


# ---------------------------------------------------------------------------
# one session, looked at atomically
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionState:
    seq: int  # messages ever written
    stored: int  # messages in the list
    wm: int  # summary watermark
    summarized: int  # message_count of the summary (0 without one)
    summary_text: str | None


async def session_state(memory: Memory, session_id: str, user_id: str = "default") -> SessionState:
    """Counters, list length and summary of a session, read in one MULTI."""
    keys = memory.layout.session(user_id, session_id)
    reads = [
        ("HGET", keys.meta, "seq"),
        ("HGET", keys.meta, "wm"),
        ("LLEN", keys.msgs),
        ("GET", keys.summary),
    ]
    seq, wm, stored, raw_summary = await memory.backend.atomic(reads, key=keys.meta)
    summary = decode_summary(raw_summary, keys.summary) if raw_summary else None
    return SessionState(
        seq=int(seq or 0),
        stored=int(stored),
        wm=int(wm or 0),
        summarized=summary["message_count"] if summary else 0,
        summary_text=summary["text"] if summary else None,
    )


async def assert_invariant(
    memory: Memory, session_id: str, user_id: str = "default", written: int | None = None
) -> SessionState:
    """With compaction and no ``max_messages``: every written message is either
    still stored or counted by the summary, exactly once."""
    state = await session_state(memory, session_id, user_id)
    assert state.stored + state.summarized == state.seq, state
    if written is not None:
        assert state.seq == written, state
    if state.summary_text is not None:
        assert state.wm == state.summarized, state  # nothing trimmed: wm == summarized count
    return state


def backlog(state: SessionState, keep_recent: int) -> int:
    """Unsummarized messages beyond the recent window."""
    return state.seq - max(state.wm, state.seq - state.stored) - keep_recent


def dialogue(n: int, start: int = 0, prefix: str = "msg") -> list[dict[str, str]]:
    """``n`` plain user/assistant messages (no tool calls), numbered from ``start``."""
    return [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"{prefix} {i}: my favourite number is {i}."
            if i % 2 == 0
            else f"{prefix} {i}: noted, we decided {i} is the plan.",
        }
        for i in range(start, start + n)
    ]
