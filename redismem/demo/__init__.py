"""``redismem demo``: a fleet of agent processes sharing memory, with workers.

N agent processes hold multi-turn conversations (with tool calls) on shared
sessions, several processes serving the same session; M ``redismem worker``
processes summarize in the background. The demo shows live progress (one
redrawn line on a terminal, plain lines otherwise), then a report, including
a verified count of lost messages: for every session, the messages the agents
wrote must equal the messages still stored plus those covered by the summary.

It fails (exit 1) when a message is lost, when a worker or agent process
dies (with the last lines it wrote to stderr), or when sessions became due
for a summary and none was made.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from redismem import env
from redismem.client import Memory
from redismem.core.connection import open_redis
from redismem.core.queue import QueueStats
from redismem.demo.agent import run_agent, session_of
from redismem.demo.localserver import LocalRedis, redis_server_binary
from redismem.errors import InvalidInput
from redismem.summarization.summarizers import summarizer_from_env

__all__ = ["DemoOptions", "run_demo"]

#: The directory holding this ``redismem``: the demo's child processes import
#: it from there (its workers are ``redismem.workers``), never from the working
#: directory.
PACKAGE_ROOT = Path(__file__).resolve().parents[1]

MEMORY_OPTIONS: dict[str, Any] = {
    "keep_recent": 12,
    "summarize_batch": 16,
    "summarize_delay": 0.2,
    "ttl": 3600,
}


@dataclass
class DemoOptions:
    url: str | None = None
    #: The work queue's Redis (default: $REDISMEM_QUEUE_URL, else ``url``);
    #: needed when ``url`` is a cluster.
    queue_url: str | None = None
    agents: int = 4
    workers: int = 2
    sessions: int = 6
    duration: float = 20.0
    drain_timeout: float = 20.0
    seed: int = 1
    keep: bool = False
    summarizer: str = "keypoints"
    out: Any = field(default=sys.stdout)


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class FleetFailure(Exception):
    """A process of the fleet died; the message says which, and its last words."""


def _tail(log: Path, lines: int = 8) -> str:
    """The last lines ``log`` (a process's log path, without suffix) wrote to stderr."""
    try:
        text = Path(f"{log}.err").read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join("    " + line for line in text.strip().splitlines()[-lines:])


class _Fleet:
    """The demo's processes (or in-process tasks on the embedded backend)."""

    def __init__(self, options: DemoOptions, url: str, namespace: str, embedded: bool) -> None:
        self.options = options
        self.url = url
        self.namespace = namespace
        self.queue_name = f"redismem/queue-{namespace}"
        self.embedded = embedded
        self.workers: list[tuple[str, subprocess.Popen[bytes], Path]] = []
        self.agents: list[tuple[str, subprocess.Popen[bytes], Path]] = []
        self.in_process: list[Any] = []
        self.in_process_workers: list[Any] = []
        self.tasks: list[asyncio.Task[dict[str, Any]]] = []
        self.logs = tempfile.TemporaryDirectory(prefix="redismem-demo-")

    def child_env(self) -> dict[str, str]:
        """The environment of the demo's processes: the workers' settings, and
        this ``redismem`` first on the path."""
        child = env.inherited(
            REDISMEM_URL=self.url,
            REDISMEM_NAMESPACE=self.namespace,
            REDISMEM_QUEUE_NAME=self.queue_name,
            REDISMEM_QUEUE_URL=self.options.queue_url,
            REDISMEM_SUMMARIZER=self.options.summarizer,
            REDISMEM_SWEEP_SECONDS="2",
            REDISMEM_SWEEP_GRACE="5",
        )
        child["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(PACKAGE_ROOT), child.get("PYTHONPATH")])
        )
        return child

    def _spawn(self, name: str, *args: str) -> tuple[str, subprocess.Popen[bytes], Path]:
        """``python -P -m ARGS``: -P keeps the working directory off sys.path,
        so a local ``redismem`` directory cannot shadow ours.
        Its stdout and stderr go to ``<log>.out`` and ``<log>.err``."""
        log = Path(self.logs.name) / name
        with open(f"{log}.out", "wb") as stdout, open(f"{log}.err", "wb") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-P", "-m", *args],
                env=self.child_env(),
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
            )
        return name, process, log

    async def start(self) -> None:
        memory_options = dict(MEMORY_OPTIONS, queue_name=self.queue_name)
        if self.embedded:
            from redismem.workers.inprocess import InProcessWorker

            summarizer = summarizer_from_env(
                env.inherited(REDISMEM_SUMMARIZER=self.options.summarizer)
            )
            for _ in range(self.options.workers):
                worker = InProcessWorker(
                    self.url,
                    summarizer=summarizer,
                    namespaces=[self.namespace],
                    queue_name=self.queue_name,
                )
                await worker.start()
                self.in_process.append(worker)
                self.in_process_workers.append(worker)
            memories = [
                await Memory.connect(self.url, namespace=self.namespace, **memory_options)
                for _ in range(self.options.agents)
            ]
            self.in_process.extend(memories)
            self.tasks = [
                asyncio.create_task(
                    run_agent(m, i, self.options.sessions, self.options.duration, self.options.seed)
                )
                for i, m in enumerate(memories)
            ]
            return
        for i in range(self.options.workers):
            name = f"worker-{i}"
            self.workers.append(
                self._spawn(name, "redismem", "worker", "--name", f"{self.namespace}-{i}")
            )
        for i in range(self.options.agents):
            self.agents.append(
                self._spawn(
                    f"agent-{i}",
                    "redismem.demo.agent",
                    "--url",
                    self.url,
                    "--namespace",
                    self.namespace,
                    "--agent",
                    str(i),
                    "--sessions",
                    str(self.options.sessions),
                    "--duration",
                    str(self.options.duration),
                    "--seed",
                    str(self.options.seed),
                    "--options",
                    json.dumps(memory_options),
                )
            )

    def check(self) -> None:
        """Raise ``FleetFailure`` if a worker stopped, or an agent failed."""
        for name, process, log in self.workers:
            if process.poll() is not None:
                raise FleetFailure(
                    f"{name} exited with code {process.returncode}; its last words:\n{_tail(log)}"
                )
        for name, process, log in self.agents:
            if process.poll() not in (None, 0):
                raise FleetFailure(
                    f"{name} exited with code {process.returncode}; its last words:\n{_tail(log)}"
                )
        for index, worker in enumerate(self.in_process_workers):
            if worker.error is not None:
                raise FleetFailure(f"in-process worker-{index} failed: {worker.error!r}")
        for index, task in enumerate(self.tasks):
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise FleetFailure(f"agent-{index} failed: {task.exception()!r}")

    def agents_running(self) -> bool:
        if self.embedded:
            return any(not t.done() for t in self.tasks)
        return any(p.poll() is None for _, p, _ in self.agents)

    async def agent_results(self) -> list[dict[str, Any]]:
        if self.embedded:
            return [await t for t in self.tasks]
        while self.agents_running():
            await asyncio.sleep(0.1)
        self.check()
        return [_last_json(Path(f"{log}.out")) for _, _, log in self.agents]

    async def stop(self) -> None:
        processes = [p for _, p, _ in self.agents + self.workers]
        for process in processes:
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + 15
        while any(p.poll() is None for p in processes) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for item in reversed(self.in_process):
            await item.aclose()
        self.logs.cleanup()


def _last_json(path: Path) -> Any:
    return json.loads(path.read_text().strip().splitlines()[-1])


async def _progress(
    memory: Memory, stats: QueueStats, options: DemoOptions
) -> tuple[int, int, int]:
    """(messages written, messages summarized, summaries) from the store."""
    written = 0
    pipe = memory.redis.pipeline(transaction=False)
    for index in range(options.sessions):
        user_id, session_id = session_of(index)
        epoch = memory.backend.epochs.get(user_id)
        pipe.hget(memory.layout.session(user_id, session_id, epoch).meta, "seq")
    for value in await pipe.execute():
        written += int(value or 0)
    counters = (await stats.snapshot())["counters"]
    return written, counters.get("messages_summarized", 0), counters.get("summaries", 0)


async def _pending(memory: Memory, sessions: int) -> int:
    users = {session_of(i)[0] for i in range(sessions)}
    return sum(
        [
            await memory.redis.zcard(memory.layout.pending(u, memory.backend.epochs.get(u)))
            for u in users
        ]
    )


def _validate(options: DemoOptions) -> None:
    for name in ("agents", "workers", "sessions"):
        value = getattr(options, name)
        if not isinstance(value, int) or value < 1:
            raise InvalidInput(f"the demo needs {name} >= 1, got {value!r}")
    if not options.duration > 0:
        raise InvalidInput(f"the demo needs a duration > 0 seconds, got {options.duration!r}")


class _Progress:
    """One redrawn line on a terminal; plain lines every few seconds otherwise."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.tty = bool(getattr(out, "isatty", lambda: False)())
        self.last = 0.0

    def show(self, elapsed: float, written: int, summarized: int, summaries: int) -> None:
        text = (
            f"{elapsed:5.1f}s  messages written {written:6d}  summarized {summarized:6d}  "
            f"summaries {summaries:4d}"
        )
        if self.tty:
            self.out.write(f"\r  {text}  ")
        elif elapsed - self.last >= 2.0:
            self.out.write(f"progress {text}\n")
            self.last = elapsed
        self.out.flush()

    def end(self) -> None:
        if self.tty:
            self.out.write("\n")


async def run_demo(options: DemoOptions) -> int:
    """Run the demo; returns the process exit code: non-zero if a message was
    lost, a process of the fleet died, or no summary was made though some were due."""
    _validate(options)
    out = options.out
    server: LocalRedis | None = None
    url = options.url or env.text("REDISMEM_URL")
    options = replace(options, queue_url=options.queue_url or env.text("REDISMEM_QUEUE_URL"))
    if url is None:
        if redis_server_binary():
            server = LocalRedis.start()
            url = server.url
            out.write(f"started a throwaway redis-server at {url}\n")
        else:
            url = f"memory://demo-{secrets.token_hex(3)}"
            out.write(
                "no redis-server found: using the embedded backend, in-process agents and workers\n"
            )
    embedded = url.startswith("memory://")
    namespace = f"demo-{secrets.token_hex(4)}"
    out.write(
        f"fleet: {options.agents} agent {'tasks' if embedded else 'processes'}, {options.workers} "
        f"workers, {options.sessions} shared sessions, {options.duration:g}s, ns {namespace}\n"
    )
    fleet = _Fleet(options, url, namespace, embedded)
    progress = _Progress(out)
    try:
        memory = await Memory.connect(url, namespace=namespace, queue_url=options.queue_url)
    except BaseException:
        if server is not None:
            server.stop()
        raise
    # Stats and queue keys live on the queue's Redis.
    queue_redis = open_redis(options.queue_url) if options.queue_url else memory.redis
    stats = QueueStats(queue_redis, memory.layout)
    started = time.monotonic()
    try:
        await fleet.start()
        while fleet.agents_running():
            fleet.check()
            progress.show(time.monotonic() - started, *await _progress(memory, stats, options))
            await asyncio.sleep(0.5)
        results = await fleet.agent_results()
        drain_deadline = time.monotonic() + options.drain_timeout
        while await _pending(memory, options.sessions) and time.monotonic() < drain_deadline:
            fleet.check()
            await asyncio.sleep(0.2)
        fleet.check()
        progress.end()
        return await _report(memory, stats, options, results, time.monotonic() - started)
    except FleetFailure as exc:
        progress.end()
        out.write(f"FAIL: {exc}\n")
        return 1
    finally:
        await fleet.stop()
        if not options.keep:
            await _clean_up(memory, namespace)
            if queue_redis is not memory.redis:
                await _clean_up_queue(queue_redis, namespace)
        if queue_redis is not memory.redis:
            await queue_redis.aclose()
        await memory.aclose()
        if server is not None:
            server.stop()


async def _clean_up(memory: Memory, namespace: str) -> None:
    """Delete the demo's memory, and its queue, job and health keys, which all
    carry its (random) namespace in their names."""
    await memory.clear_all()
    await _clean_up_queue(memory.redis, namespace)


async def _clean_up_queue(redis: Any, namespace: str) -> None:
    async for key in redis.scan_iter(match=f"*{namespace}*", count=1000):
        await redis.unlink(key)


async def _report(
    memory: Memory,
    stats: QueueStats,
    options: DemoOptions,
    results: list[dict[str, Any]],
    elapsed: float,
) -> int:
    written: dict[str, int] = {}
    for result in results:
        for key, count in result["written"].items():
            written[key] = written.get(key, 0) + count
    lost = 0
    stored_total = summarized_total = 0
    for key, count in written.items():
        user_id, session_id = key.split("/", 1)
        stored = len(await memory.read(session_id=session_id, user_id=user_id))
        summary = await memory.summary(session_id=session_id, user_id=user_id)
        covered = summary.message_count if summary else 0
        stored_total += stored
        summarized_total += covered
        lost += count - stored - covered
    snapshot = await stats.snapshot()
    lags = [float(x) for x in snapshot["lag_ms"]]
    write_ms = [x for r in results for x in r["write_ms"]]
    read_ms = [x for r in results for x in r["read_ms"]]
    total = sum(written.values())
    rows = [
        ("run time", f"{elapsed:.1f} s"),
        ("agent turns", f"{sum(r['turns'] for r in results)}"),
        ("messages written", f"{total} ({total / max(options.duration, 1e-9):.0f}/s)"),
        ("  still stored", f"{stored_total}"),
        ("  covered by summaries", f"{summarized_total}"),
        ("summaries made", f"{snapshot['counters'].get('summaries', 0)}"),
        ("summarization jobs", f"{snapshot['counters'].get('jobs', 0)}"),
        ("summarization lag p50 / p95", f"{_pct(lags, 0.5):.0f} ms / {_pct(lags, 0.95):.0f} ms"),
        (
            "write latency p50 / p99",
            f"{_pct(write_ms, 0.5):.2f} ms / {_pct(write_ms, 0.99):.2f} ms",
        ),
        (
            "read (context) latency p50 / p99",
            f"{_pct(read_ms, 0.5):.2f} ms / {_pct(read_ms, 0.99):.2f} ms",
        ),
        ("failures", f"{snapshot['counters'].get('failures', 0)}"),
        ("lost messages (verified)", f"{lost}"),
    ]
    width = max(len(name) for name, _ in rows)
    out = options.out
    out.write("redismem fleet demo report\n")
    for name, value in rows:
        out.write(f"  {name:<{width}}  {value}\n")
    due = MEMORY_OPTIONS["keep_recent"] + MEMORY_OPTIONS["summarize_batch"]
    due_sessions = sum(1 for count in written.values() if count >= due)
    summaries = snapshot["counters"].get("summaries", 0)
    if lost:
        out.write(f"FAIL: {lost} messages lost\n")
        return 1
    if due_sessions and not summaries:
        out.write(
            f"FAIL: no summary made, though {due_sessions} sessions were due for one "
            "(are the workers summarizing? see redismem stats)\n"
        )
        return 1
    out.write("OK: no message lost\n")
    return 0
