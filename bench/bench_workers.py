"""Benchmark: queue-driven summarization with 1, 2 and 4 worker processes.

1. Throughput: S sessions are each given a backlog that makes them due while
   no worker runs (their jobs wait in the queue); then W worker processes
   start and we time until every session is summarized. Two summarizers:
   ``keypoints`` (CPU only: measures our pipeline) and ``llm`` against a
   local chat-completions stub answering after a fixed delay (I/O bound, as
   a real LLM is).
2. Lag under load: 2 workers, writers at a steady rate over many sessions;
   lag = time from the write that made a session due to its summary commit.

    python bench/bench_workers.py            # full run (~2-3 min on 2 cores)
    python bench/bench_workers.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from redismem import Memory
from redismem.core.queue import QueueStats
from redismem.demo.agent import make_turn
from redismem.demo.localserver import LocalRedis

KEEP_RECENT = 10
BATCH = 20


class _StubLLM(BaseHTTPRequestHandler):
    delay = 0.2

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        self.rfile.read(length)
        time.sleep(self.delay)
        body = json.dumps(
            {"choices": [{"message": {"role": "assistant", "content": "summary of the turns"}}]}
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: Any) -> None:
        pass


def start_stub_llm(delay: float) -> tuple[ThreadingHTTPServer, str]:
    _StubLLM.delay = delay
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StubLLM)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


async def start_workers(count: int, env: dict[str, str]) -> list[asyncio.subprocess.Process]:
    return [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "arq",
            "workers.WorkerSettings",
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        for _ in range(count)
    ]


async def stop_workers(workers: list[asyncio.subprocess.Process]) -> None:
    for worker in workers:
        worker.terminate()
    for worker in workers:
        await worker.wait()


def worker_env(url: str, namespace: str, summarizer: str, llm_url: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        REDISMEM_URL=url,
        REDISMEM_NAMESPACE=namespace,
        REDISMEM_QUEUE_NAME=f"redismem/queue-{namespace}",
        REDISMEM_SUMMARIZER=summarizer,
        REDISMEM_LLM_BASE_URL=llm_url,
        REDISMEM_LLM_MODEL="stub",
        REDISMEM_SWEEP_SECONDS="30",
    )
    return env


async def fill(memory: Memory, sessions: int, turns: int, rng: random.Random) -> None:
    async def one(index: int) -> None:
        for turn in range(turns):
            await memory.write(
                make_turn(rng, 0, turn), session_id=f"s{index}", user_id=f"u{index % 10}"
            )

    await asyncio.gather(*(one(i) for i in range(sessions)))


async def throughput(url: str, workers: int, sessions: int, summarizer: str, llm_url: str) -> float:
    """Sessions summarized per second by ``workers`` processes."""
    namespace = f"bw-{secrets.token_hex(3)}"
    queue_name = f"redismem/queue-{namespace}"
    # Jobs are deferred far into the future while the sessions fill and the
    # workers start; then all are made due at once and the clock starts.
    options = {
        "keep_recent": KEEP_RECENT,
        "summarize_batch": BATCH,
        "queue_name": queue_name,
        "summarize_delay": 3600.0,
    }
    async with await Memory.connect(url, namespace=namespace, **options) as memory:
        # A turn has 2-4 messages: 15 turns leave a backlog of >= 20 beyond the recent window.
        await fill(memory, sessions, 15, random.Random(7))
        stats = QueueStats(memory.redis, memory.layout)
        due = sum([await memory.redis.zcard(memory.layout.pending(f"u{i}")) for i in range(10)])
        assert due == sessions, f"{due} of {sessions} sessions are due"

        procs = await start_workers(workers, worker_env(url, namespace, summarizer, llm_url))
        await asyncio.sleep(3.0)  # worker start-up (imports, connections) is not measured
        jobs = await memory.redis.zrange(queue_name, 0, -1)
        now_ms = int(time.time() * 1000)
        started = time.perf_counter()
        await memory.redis.zadd(queue_name, dict.fromkeys(jobs, now_ms))
        try:
            while True:
                counters = (await stats.snapshot())["counters"]
                if counters.get("jobs", 0) >= sessions:
                    break
                if time.perf_counter() - started > 120:
                    raise TimeoutError(f"only {counters} after 120 s")
                await asyncio.sleep(0.05)
            elapsed = time.perf_counter() - started
        finally:
            await stop_workers(procs)
            await memory.clear_all()
    return sessions / elapsed


async def lag_under_load(url: str, rate: float, seconds: float, sessions: int) -> dict[str, float]:
    namespace = f"bl-{secrets.token_hex(3)}"
    options = {
        "keep_recent": KEEP_RECENT,
        "summarize_batch": BATCH,
        "queue_name": f"redismem/queue-{namespace}",
    }
    async with await Memory.connect(url, namespace=namespace, **options) as memory:
        procs = await start_workers(2, worker_env(url, namespace, "keypoints", ""))
        rng = random.Random(3)
        written = 0
        try:
            await asyncio.sleep(1.0)  # let the workers start
            started = time.perf_counter()
            turn = 0
            while (now := time.perf_counter() - started) < seconds:
                due = int(now * rate / 3)  # ~3 messages per turn
                while turn < due:
                    messages = make_turn(rng, 0, turn)
                    await memory.write(
                        messages, session_id=f"s{rng.randrange(sessions)}", user_id="u"
                    )
                    written += len(messages)
                    turn += 1
                await asyncio.sleep(0.005)
            await asyncio.sleep(3.0)  # let the last jobs finish
            lags = sorted((await QueueStats(memory.redis, memory.layout).snapshot())["lag_ms"])
        finally:
            await stop_workers(procs)
            await memory.clear_all()
    return {
        "messages/s": written / seconds,
        "summaries": len(lags),
        "p50": statistics.median(lags) if lags else float("nan"),
        "p95": lags[int(0.95 * (len(lags) - 1))] if lags else float("nan"),
    }


async def main_async(args: argparse.Namespace) -> None:
    llm, llm_url = start_stub_llm(args.llm_delay)
    server = None
    url = args.url or os.environ.get("REDISMEM_BENCH_URL")
    if url is None:
        server = LocalRedis.start()
        url = server.url
    sessions = 40 if args.quick else args.sessions
    try:
        print(
            f"summarization throughput: {sessions} due sessions,"
            f" keep_recent={KEEP_RECENT}, batch={BATCH}"
        )
        print(f"{'summarizer':<28}{'workers':>8}{'sessions/s (median)':>22}{'vs 1 worker':>13}")
        for summarizer in ("keypoints", "llm"):
            base = None
            for workers in (1, 2, 4):
                runs = [
                    await throughput(url, workers, sessions, summarizer, llm_url)
                    for _ in range(args.rounds)
                ]
                rate = statistics.median(runs)
                base = base or rate
                label = (
                    summarizer
                    if summarizer != "llm"
                    else f"llm stub ({args.llm_delay * 1000:.0f} ms/call)"
                )
                print(f"{label:<28}{workers:>8}{rate:>22.1f}{rate / base:>12.2f}x")
        seconds = 5 if args.quick else 20
        result = await lag_under_load(url, args.rate, seconds, 50)
        print(
            f"\nlag under load: 2 workers, {result['messages/s']:.0f} messages/s over 50 sessions "
            f"for {seconds} s: {result['summaries']:.0f} summaries, "
            f"lag p50 {result['p50']:.0f} ms, p95 {result['p95']:.0f} ms"
        )
    finally:
        llm.shutdown()
        if server is not None:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", help="Redis URL (default: a throwaway redis-server)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--rate", type=float, default=600.0, help="messages per second in the lag test"
    )
    parser.add_argument("--llm-delay", type=float, default=0.2)
    args = parser.parse_args()
    if args.quick:
        args.rounds = 1
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
