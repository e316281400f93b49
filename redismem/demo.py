"""``redismem demo``: a fleet of agent processes sharing memory, with workers.

N agent processes hold multi-turn conversations (with tool calls) on shared
sessions, several processes serving the same session; M arq worker
processes summarize in the background. The demo shows live progress, then a
report, including a verified count of lost messages: for every session, the
messages the agents wrote must equal the messages still stored plus those
covered by the summary.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from .client import Memory
from .demo_agent import run_agent, session_of
from .localserver import LocalRedis, redis_server_binary
from .queue import QueueStats

__all__ = ["DemoOptions", "run_demo"]

MEMORY_OPTIONS: dict[str, Any] = {
    "keep_recent": 12,
    "summarize_batch": 16,
    "summarize_delay": 0.2,
    "ttl": 3600,
}


@dataclass
class DemoOptions:
    url: str | None = None
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


class _Fleet:
    """The demo's processes (or in-process tasks on the embedded backend)."""

    def __init__(self, options: DemoOptions, url: str, namespace: str, embedded: bool) -> None:
        self.options = options
        self.url = url
        self.namespace = namespace
        self.queue_name = f"{namespace}:queue"
        self.embedded = embedded
        self.workers: list[asyncio.subprocess.Process] = []
        self.agents: list[asyncio.subprocess.Process] = []
        self.in_process: list[Any] = []
        self.tasks: list[asyncio.Task[dict[str, Any]]] = []

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            REDISMEM_URL=self.url,
            REDISMEM_NAMESPACE=self.namespace,
            REDISMEM_QUEUE_NAME=self.queue_name,
            REDISMEM_SUMMARIZER=self.options.summarizer,
            REDISMEM_SWEEP_SECONDS="2",
            REDISMEM_SWEEP_GRACE="5",
        )
        env.pop("REDISMEM_QUEUE_URL", None)
        return env

    async def start(self) -> None:
        memory_options = dict(MEMORY_OPTIONS, queue_name=self.queue_name)
        if self.embedded:
            from workers.inprocess import InProcessWorker

            for _ in range(self.options.workers):
                worker = InProcessWorker(
                    self.url, namespaces=[self.namespace], queue_name=self.queue_name
                )
                await worker.start()
                self.in_process.append(worker)
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
        env = self.env()
        for _ in range(self.options.workers):
            self.workers.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "arq",
                    "workers.WorkerSettings",
                    env=env,
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.DEVNULL,
                )
            )
        for i in range(self.options.agents):
            self.agents.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "redismem.demo_agent",
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
                    env=env,
                    stdout=asyncio.subprocess.PIPE,
                )
            )

    def agents_running(self) -> bool:
        if self.embedded:
            return any(not t.done() for t in self.tasks)
        return any(p.returncode is None for p in self.agents)

    async def agent_results(self) -> list[dict[str, Any]]:
        if self.embedded:
            return [await t for t in self.tasks]
        results = []
        for process in self.agents:
            stdout, _ = await process.communicate()
            if process.returncode != 0:
                raise RuntimeError(f"agent process exited with {process.returncode}")
            results.append(json.loads(stdout.decode().strip().splitlines()[-1]))
        return results

    async def stop(self) -> None:
        for process in self.agents + self.workers:
            if process.returncode is None:
                process.terminate()
        for process in self.agents + self.workers:
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
                await process.wait()
        for item in reversed(self.in_process):
            await item.aclose()


async def _progress(memory: Memory, stats: QueueStats, sessions: int) -> tuple[int, int, int]:
    """(messages written, messages summarized, summaries) from the store."""
    written = 0
    pipe = memory.redis.pipeline(transaction=False)
    for index in range(sessions):
        user_id, session_id = session_of(index)
        pipe.hget(memory.layout.session(user_id, session_id).meta, "seq")
    for value in await pipe.execute():
        written += int(value or 0)
    counters = (await stats.snapshot())["counters"]
    return written, counters.get("messages_summarized", 0), counters.get("summaries", 0)


async def _pending(memory: Memory, sessions: int) -> int:
    users = {session_of(i)[0] for i in range(sessions)}
    return sum([await memory.redis.zcard(memory.layout.pending(u)) for u in users])


async def run_demo(options: DemoOptions) -> int:
    """Run the demo; returns the process exit code (non-zero if a message was lost)."""
    out = options.out
    server: LocalRedis | None = None
    url = options.url or os.environ.get("REDISMEM_URL")
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
        f"workers, {options.sessions} shared sessions, {options.duration:.0f}s, ns {namespace}\n"
    )
    fleet = _Fleet(options, url, namespace, embedded)
    memory = await Memory.connect(url, namespace=namespace)
    stats = QueueStats(memory.redis, memory.layout)
    started = time.monotonic()
    try:
        await fleet.start()
        while fleet.agents_running():
            written, summarized, summaries = await _progress(memory, stats, options.sessions)
            elapsed = time.monotonic() - started
            out.write(
                f"\r  {elapsed:5.1f}s  messages written {written:6d}  summarized {summarized:6d}  "
                f"summaries {summaries:4d}  "
            )
            out.flush()
            await asyncio.sleep(0.5)
        results = await fleet.agent_results()
        drain_deadline = time.monotonic() + options.drain_timeout
        while await _pending(memory, options.sessions) and time.monotonic() < drain_deadline:
            await asyncio.sleep(0.2)
        out.write("\n")
        return await _report(memory, stats, options, results, time.monotonic() - started)
    finally:
        await fleet.stop()
        if not options.keep:
            await memory.clear_all()
        await memory.aclose()
        if server is not None:
            server.stop()


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
    out.write("OK: no message lost\n" if lost == 0 else f"FAIL: {lost} messages lost\n")
    return 0 if lost == 0 else 1
