"""Cluster benchmark: ``redismem.Memory`` on a 3-master Redis Cluster against a standalone Redis.

One run measures, for 1, 2 and 4 client processes (each one asyncio loop with
16 tasks sharing one ``Memory`` per target):

* writes/s: each call ``await mem.write([message], session_id=..., user_id=...)``,
  one message; every task cycles over sessions of its own users (8 per task),
  so the users' hash tags ``{u:<user>}`` spread over the slots and masters;
* read-last-50/s: ``await mem.read(session_id=..., user_id=..., limit=50)`` on
  sessions of 100 messages (2 per task, each of its own user, filled before
  the clock starts).

Both targets run in the same run, rounds alternating which goes first; each
phase runs for a fixed time in all processes at once (they start together on
a barrier) and the figure is the sum of the processes' ops/s; medians of the
rounds are reported, with the cluster/standalone ratio. Between phases the
parent reads ``INFO commandstats`` and ``INFO cpu`` of every server, which
gives how the script calls spread over the masters and the server CPU spent
per operation; each client process reports its own CPU time.

``Memory.connect(url, namespace="benchcl", ttl=3600, index=False)``: with
``index=False`` (and no summarization) a write enqueues no job, so neither
target needs a work queue (arq cannot run on a cluster; a deployment puts it
on a standalone or Sentinel Redis via ``queue_url``). Indexing on would add
the same pending-mark check to both sides and a queue round trip only when a
job is due, which is not what this bench compares.

By default both targets are throwaway servers started from the installed
``redis-server``/``redis-cli`` (the launchers of ``tests/servers.py``): a
standalone server and a cluster of 3 masters + 3 replicas, all with AOF on
(``appendfsync everysec``, the setting the deploy docs require) and no RDB,
stopped at the end. ``--url`` / ``--cluster-url`` use existing servers
instead; only keys under ``benchcl:`` are written, and they are deleted at
the end.

    .venv/bin/python bench/bench_cluster.py           # full run, about 3 minutes on 2 cores
    .venv/bin/python bench/bench_cluster.py --quick   # smoke check, about 30 seconds
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import platform
import queue
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import redis
from _util import Table, conversation, median, package_version, rotated

from redismem import Memory
from redismem.core.urls import parse_url

NAMESPACE = "benchcl"
TTL = 3600
READ_LIMIT = 50
STANDALONE = "standalone"
CLUSTER = "cluster"
TARGETS = (STANDALONE, CLUSTER)
OPS = ("write", "read")
THROWAWAY = "throwaway servers on loopback"
TESTS_DIR = Path(__file__).resolve().parent.parent / "tests"


@dataclass(frozen=True)
class Plan:
    rounds: int
    seconds: float  # length of one timed phase
    warm_seconds: float  # untimed warm-up per target and operation, in every process
    procs: tuple[int, ...] = (1, 2, 4)
    tasks: int = 16  # asyncio tasks per process
    write_users: int = 8  # users (one session each) every task writes to
    read_sessions: int = 2  # sessions (one user each) every task reads from
    prefill: int = 100  # messages in each read session
    smoke: bool = False


FULL = Plan(rounds=8, seconds=1.5, warm_seconds=0.5)
QUICK = Plan(rounds=2, seconds=0.5, warm_seconds=0.2, smoke=True)


# -- the client processes ------------------------------------------------------------


def _write_user(nprocs: int, proc: int, task: int, k: int) -> str:
    return f"w{nprocs}-{proc}-{task}-{k}"


def _read_user(nprocs: int, proc: int, task: int, k: int) -> str:
    return f"r{nprocs}-{proc}-{task}-{k}"


async def _phase(
    mem: Memory,
    op: str,
    seconds: float,
    plan: Plan,
    nprocs: int,
    proc: int,
    messages: list[dict[str, Any]],
) -> tuple[int, float, float]:
    """``plan.tasks`` tasks doing ``op`` for ``seconds``: (operations, elapsed s, CPU s)."""
    counts = [0] * plan.tasks
    cpu0 = time.process_time()
    start = time.perf_counter()
    deadline = start + seconds

    async def writer(task: int) -> None:
        users = [_write_user(nprocs, proc, task, k) for k in range(plan.write_users)]
        i = 0
        while time.perf_counter() < deadline:
            message = messages[(task * 7 + i) % len(messages)]
            await mem.write([message], session_id="s", user_id=users[i % len(users)])
            i += 1
        counts[task] = i

    async def reader(task: int) -> None:
        users = [_read_user(nprocs, proc, task, k) for k in range(plan.read_sessions)]
        got = await mem.read(session_id="s", user_id=users[0], limit=READ_LIMIT)
        if len(got) != READ_LIMIT:
            raise AssertionError(f"read {len(got)} messages of {users[0]}, not {READ_LIMIT}")
        i = 1
        while time.perf_counter() < deadline:
            await mem.read(session_id="s", user_id=users[i % len(users)], limit=READ_LIMIT)
            i += 1
        counts[task] = i

    run = writer if op == "write" else reader
    await asyncio.gather(*(run(t) for t in range(plan.tasks)))
    return sum(counts), time.perf_counter() - start, time.process_time() - cpu0


async def _client(
    proc: int,
    nprocs: int,
    urls: dict[str, str],
    plan: Plan,
    barrier: Any,
    results: Any,
) -> None:
    messages = conversation(seed=100 + proc, count=400)
    mems: dict[str, Memory] = {}
    try:
        for name in TARGETS:
            mems[name] = await Memory.connect(urls[name], namespace=NAMESPACE, ttl=TTL, index=False)
        for name in TARGETS:  # the read sessions, one write of 100 messages each
            fill = conversation(seed=7, count=plan.prefill)
            await asyncio.gather(
                *(
                    mems[name].write(fill, session_id="s", user_id=_read_user(nprocs, proc, t, k))
                    for t in range(plan.tasks)
                    for k in range(plan.read_sessions)
                )
            )
            for op in OPS:
                await _phase(mems[name], op, plan.warm_seconds, plan, nprocs, proc, messages)
        barrier.wait()  # everyone ready
        for r in range(plan.rounds):
            for name in rotated(TARGETS, r):
                for op in OPS:
                    barrier.wait()  # start together
                    ops, elapsed, cpu = await _phase(
                        mems[name], op, plan.seconds, plan, nprocs, proc, messages
                    )
                    results.put(("ok", proc, ops, elapsed, cpu))
                    barrier.wait()  # all done: the parent reads the servers' stats
    finally:
        for mem in mems.values():
            await mem.aclose()


def client_process(
    proc: int, nprocs: int, urls: dict[str, str], plan: Plan, barrier: Any, results: Any
) -> None:
    """Entry point of one client process (spawned)."""
    try:
        asyncio.run(_client(proc, nprocs, urls, plan, barrier, results))
    except threading.BrokenBarrierError:
        pass  # another process failed and said why
    except BaseException:
        results.put(("error", proc, traceback.format_exc()))
        barrier.abort()


# -- server statistics -----------------------------------------------------------------


@dataclass
class Node:
    port: int
    host: str
    role: str  # "standalone", "master" or "replica"
    slots: int = 0
    username: str | None = None
    password: str | None = None
    url: str | None = None  # the standalone: its own URL (may be a unix socket)

    @property
    def label(self) -> str:
        local = self.host in ("127.0.0.1", "localhost")
        return f":{self.port}" if local else f"{self.host}:{self.port}"

    def client(self) -> redis.Redis:
        if self.url:
            return redis.Redis.from_url(self.url, socket_timeout=10)
        return redis.Redis(
            host=self.host,
            port=self.port,
            username=self.username,
            password=self.password,
            socket_timeout=10,
        )


@dataclass(frozen=True)
class Snapshot:
    scripts: int  # EVALSHA + EVAL calls
    cpu: float  # used_cpu_user + used_cpu_sys, seconds


def _snapshot(node: Node) -> Snapshot:
    with node.client() as client:
        stats = client.info("commandstats")
        cpu = client.info("cpu")
    scripts = sum(
        int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
        for name in ("evalsha", "eval", "evalsha_ro", "eval_ro")
    )
    return Snapshot(scripts, float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]))


def _as_str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def cluster_nodes(url: str) -> list[Node]:
    """Masters (with their slot counts) and replicas, from ``CLUSTER NODES`` of a seed."""
    target = parse_url(url)
    error: Exception | None = None
    for host, port in target.nodes:
        try:
            with redis.Redis(
                host=host, port=port, username=target.username, password=target.password
            ) as client:
                text = _as_str(client.execute_command("CLUSTER", "NODES"))
            break
        except redis.RedisError as exc:
            error = exc
    else:
        raise SystemExit(f"no seed node of {url} answers CLUSTER NODES: {error}")
    out = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 8 or {"fail", "noaddr", "handshake"} & set(fields[2].split(",")):
            continue
        address = fields[1].split("@")[0]
        node_host, _, node_port = address.rpartition(":")
        slots = 0
        for item in fields[8:]:
            if not item.startswith("["):
                first, _, last = item.partition("-")
                slots += int(last or first) - int(first) + 1
        role = "master" if "master" in fields[2].split(",") else "replica"
        if role == "master" and not slots:
            continue
        host = node_host or "127.0.0.1"
        out.append(Node(int(node_port), host, role, slots, target.username, target.password))
    return sorted(out, key=lambda n: (n.role != "master", n.port))


def standalone_node(url: str) -> Node:
    target = parse_url(url)
    host, port = target.nodes[0] if target.nodes else ("localhost", 0)
    return Node(port, host, "standalone", url=url)


def count_keys(node: Node) -> int:
    with node.client() as client:
        return sum(1 for _ in client.scan_iter(match=f"{NAMESPACE}:*", count=1000))


# -- the run ---------------------------------------------------------------------------


@dataclass
class Phase:
    rate: float  # ops/s, summed over the processes
    ops: int
    client_cpu: float  # seconds, summed over the processes
    server_cpu: float  # seconds, every server of the target
    scripts: dict[int, int]  # script calls per master port


@dataclass
class Results:
    redis_version: str = "?"
    nodes: dict[str, list[Node]] = field(default_factory=dict)
    phases: dict[tuple[int, str, str], list[Phase]] = field(default_factory=dict)
    keys: dict[int, int] = field(default_factory=dict)  # cluster master port -> benchcl keys
    standalone_keys: int = 0


def run_procs(
    nprocs: int, urls: dict[str, str], plan: Plan, nodes: dict[str, list[Node]], res: Results, log
) -> None:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(nprocs + 1, timeout=120)
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=client_process,
            args=(i, nprocs, urls, plan, barrier, results),
            name=f"benchcl-client-{i}",
        )
        for i in range(nprocs)
    ]
    for p in procs:
        p.start()

    def collect() -> list[tuple[Any, ...]]:
        out = []
        while len(out) < nprocs:
            item = results.get(timeout=120)
            if item[0] == "error":
                raise RuntimeError(f"client process {item[1]} failed:\n{item[2]}")
            out.append(item)
        return out

    def failure() -> RuntimeError:
        try:
            while True:
                item = results.get(timeout=2)
                if item[0] == "error":
                    return RuntimeError(f"client process {item[1]} failed:\n{item[2]}")
        except queue.Empty:
            return RuntimeError("a client process stopped without saying why")

    try:
        try:
            barrier.wait()  # connected, filled, warmed up
            for r in range(plan.rounds):
                for name in rotated(TARGETS, r):
                    for op in OPS:
                        before = {n.port: _snapshot(n) for n in nodes[name]}
                        barrier.wait()
                        barrier.wait()
                        after = {n.port: _snapshot(n) for n in nodes[name]}
                        got = collect()
                        res.phases.setdefault((nprocs, name, op), []).append(
                            Phase(
                                rate=sum(item[2] / item[3] for item in got),
                                ops=sum(item[2] for item in got),
                                client_cpu=sum(item[4] for item in got),
                                server_cpu=sum(after[p].cpu - before[p].cpu for p in after),
                                scripts={
                                    n.port: after[n.port].scripts - before[n.port].scripts
                                    for n in nodes[name]
                                    if n.role in ("master", "standalone")
                                },
                            )
                        )
                log(f"{nprocs} process(es): round {r + 1}/{plan.rounds} done")
        except threading.BrokenBarrierError:
            raise failure() from None
        for p in procs:
            p.join(timeout=60)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=10)
    bad = [p.exitcode for p in procs if p.exitcode != 0]
    if bad:
        raise RuntimeError(f"client processes exited with {bad}")


async def _clear(url: str) -> int:
    mem = await Memory.connect(url, namespace=NAMESPACE, ttl=TTL, index=False)
    try:
        return await mem.clear_all()
    finally:
        await mem.aclose()


def bench(urls: dict[str, str], plan: Plan, log) -> Results:
    res = Results()
    nodes = {STANDALONE: [standalone_node(urls[STANDALONE])], CLUSTER: cluster_nodes(urls[CLUSTER])}
    res.nodes = nodes
    masters = [n for n in nodes[CLUSTER] if n.role == "master"]
    with masters[0].client() as client:
        res.redis_version = _as_str(client.info("server").get("redis_version", "?"))
    for name in TARGETS:
        asyncio.run(_clear(urls[name]))
    try:
        for nprocs in plan.procs:
            log(f"{nprocs} client process(es) x {plan.tasks} tasks: starting")
            run_procs(nprocs, urls, plan, nodes, res, log)
        res.keys = {n.port: count_keys(n) for n in masters}
        res.standalone_keys = count_keys(nodes[STANDALONE][0])
    finally:
        for name in TARGETS:
            removed = asyncio.run(_clear(urls[name]))
            log(f"removed {removed:,} {NAMESPACE}: keys from the {name}")
    return res


# -- report ----------------------------------------------------------------------------


def _med(phases: list[Phase], what: str) -> float:
    return median(getattr(p, what) for p in phases)


def _round_ratios(res: Results, nprocs: int, op: str) -> list[float]:
    """cluster/standalone of each round (the two ran back to back in it)."""
    pairs = zip(
        res.phases[(nprocs, CLUSTER, op)], res.phases[(nprocs, STANDALONE, op)], strict=True
    )
    return [c.rate / s.rate for c, s in pairs]


def _per_op_us(phases: list[Phase], what: str) -> float:
    """Microseconds of CPU per operation (= ms per 1,000 operations)."""
    return median(getattr(p, what) / p.ops * 1e6 for p in phases)


def header(t: Table, label: str, last: str = "") -> None:
    t.lines.append("")
    t.row(label, STANDALONE, CLUSTER, "cluster/sa", last)
    t.lines.append("-" * len(t.lines[-1]))


def report(res: Results, plan: Plan, where: str) -> str:
    t = Table(label_width=50, value_width=14, ratio_width=14)
    masters = [n for n in res.nodes[CLUSTER] if n.role == "master"]
    replicas = [n for n in res.nodes[CLUSTER] if n.role == "replica"]
    t.note(
        f"redismem cluster benchmark: Redis {res.redis_version} ({where}), "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"redis-py {package_version('redis')}"
    )
    t.note(
        f"cluster: {len(masters)} masters + {len(replicas)} replicas; standalone: 1 server; "
        "both AOF everysec, no RDB (throwaway ones)"
        if where == THROWAWAY
        else f"cluster: {len(masters)} masters + {len(replicas)} replicas; standalone: 1 server"
    )
    t.note(
        f"Memory.connect(url, namespace={NAMESPACE!r}, ttl={TTL}, index=False): no work queue "
        "needed on either side"
    )
    t.note(
        f"each process: one asyncio loop, {plan.tasks} tasks; a write = 1 message to a session "
        f"of one of the task's {plan.write_users} users; a read = last {READ_LIMIT} of a "
        f"{plan.prefill}-message session"
    )
    t.note(
        f"medians of {plan.rounds} rounds of {plan.seconds:g} s per phase, targets alternating "
        "first; ops/s summed over the processes; cluster/sa = median of the rounds' ratios "
        "(each round runs both targets back to back), with their range"
    )

    header(t, "throughput (ops/s)", "rounds' range")
    for op, label in (("write", "writes/s"), ("read", f"read-last-{READ_LIMIT}/s")):
        for n in plan.procs:
            a = _med(res.phases[(n, STANDALONE, op)], "rate")
            b = _med(res.phases[(n, CLUSTER, op)], "rate")
            word = "process" if n == 1 else "processes"
            ratios = _round_ratios(res, n, op)
            t.row(
                f"{label}, {n} {word} x {plan.tasks} tasks",
                f"{a:,.0f}",
                f"{b:,.0f}",
                f"{median(ratios):.2f}x",
                f"{min(ratios):.2f}-{max(ratios):.2f}",
            )
        first, last = plan.procs[0], plan.procs[-1]
        sa = _med(res.phases[(last, STANDALONE, op)], "rate") / _med(
            res.phases[(first, STANDALONE, op)], "rate"
        )
        cl = _med(res.phases[(last, CLUSTER, op)], "rate") / _med(
            res.phases[(first, CLUSTER, op)], "rate"
        )
        t.row(f"  scaling, {last} processes / {first}", f"{sa:.2f}x", f"{cl:.2f}x")

    header(t, "CPU per 1,000 ops (ms)")
    for op, label in (("write", "writes"), ("read", "reads")):
        for what, who in (("client_cpu", "client processes"), ("server_cpu", "servers")):
            for n in (plan.procs[0], plan.procs[-1]):
                a = _per_op_us(res.phases[(n, STANDALONE, op)], what)
                b = _per_op_us(res.phases[(n, CLUSTER, op)], what)
                t.row(f"{label}, {who}, {n} proc", f"{a:,.0f}", f"{b:,.0f}", f"{b / a:.2f}x")
    t.note("servers: the standalone process; the cluster's 3 masters and 3 replicas together")

    t.lines.append("")
    width = 12
    head = f"{'spread over the cluster masters':50}" + "".join(
        f"{n.label:>{width}}" for n in masters
    )
    t.lines.append(head)
    t.lines.append("-" * len(head))

    def spread(label: str, values: list[float], fmt: str) -> None:
        t.lines.append(f"{label:50}" + "".join(f"{format(v, fmt):>{width}}" for v in values))

    spread("hash slots owned", [n.slots for n in masters], ",")
    total_keys = sum(res.keys.values()) or 1
    spread(
        f"{NAMESPACE}: keys at the end (share)",
        [100 * res.keys[n.port] / total_keys for n in masters],
        ".1f",
    )
    for op in OPS:
        for n in plan.procs:
            calls = {m.port: 0 for m in masters}
            for phase in res.phases[(n, CLUSTER, op)]:
                for port, count in phase.scripts.items():
                    calls[port] += count
            total = sum(calls.values()) or 1
            word = "process" if n == 1 else "processes"
            spread(
                f"script calls, {op}s, {n} {word} (share %)",
                [100 * calls[m.port] / total for m in masters],
                ".1f",
            )
    per_op = []
    for op in OPS:
        phases = [p for n in plan.procs for p in res.phases[(n, CLUSTER, op)]]
        calls = sum(sum(p.scripts.values()) for p in phases)
        per_op.append(f"{op}s {calls / max(1, sum(p.ops for p in phases)):.3f}")
    spread_note = "script calls per operation on the cluster: " + ", ".join(per_op)
    t.note(spread_note)
    t.note(
        f"keys: {sum(res.keys.values()):,} {NAMESPACE}: keys on the cluster's masters, "
        f"{res.standalone_keys:,} on the standalone; script calls = EVALSHA/EVAL counted by "
        "INFO commandstats of each master around each phase"
    )
    t.note("")
    if plan.smoke:
        t.note("smoke run (--quick): phases too short for the figures to mean much")
    return t.text()


# -- servers ---------------------------------------------------------------------------


@contextmanager
def throwaway_servers(want_standalone: bool, want_cluster: bool, log) -> Iterator[dict[str, str]]:
    """Start what is wanted (``tests/servers.py`` launchers) and stop it at the end."""
    sys.path.insert(0, str(TESTS_DIR))
    import servers  # tests/servers.py (imports tests/helpers)

    reason = servers.cluster_missing()
    if reason:
        raise SystemExit(f"{reason}; or pass --url and --cluster-url")
    out: dict[str, str] = {}
    with ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="benchcl-")))
        if want_standalone:
            began = time.perf_counter()
            server = servers.start_standalone(
                root, extra_args=("--appendonly", "yes", "--appendfsync", "everysec")
            )
            stack.callback(server.stop)
            out[STANDALONE] = server.url
            log(f"standalone redis-server on :{server.port} ({time.perf_counter() - began:.1f} s)")
        if want_cluster:
            cluster = servers.start_cluster(root)
            stack.callback(cluster.stop)
            out[CLUSTER] = cluster.url
            log(
                f"cluster of {len(cluster.nodes)} nodes, masters {cluster.masters()} "
                f"({cluster.startup_seconds:.1f} s)"
            )
        yield out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--url",
        default=os.environ.get("REDISMEM_BENCH_URL"),
        help="standalone Redis to use instead of a throwaway one (default: $REDISMEM_BENCH_URL)",
    )
    parser.add_argument(
        "--cluster-url",
        default=os.environ.get("REDISMEM_BENCH_CLUSTER_URL"),
        help="redis+cluster://host:port,... to use instead of a throwaway 3-master cluster "
        "(default: $REDISMEM_BENCH_CLUSTER_URL)",
    )
    parser.add_argument("--quick", action="store_true", help="short phases, for a smoke check")
    parser.add_argument("--rounds", type=int, help="override the number of rounds")
    parser.add_argument("--seconds", type=float, help="override the length of a timed phase")
    parser.add_argument(
        "--procs", help="comma-separated client process counts (default 1,2,4)", default=None
    )
    args = parser.parse_args(argv)

    plan = QUICK if args.quick else FULL
    if args.rounds:
        plan = replace(plan, rounds=args.rounds)
    if args.seconds:
        plan = replace(plan, seconds=args.seconds)
    if args.procs:
        plan = replace(plan, procs=tuple(int(p) for p in args.procs.split(",")))
    if args.cluster_url and not parse_url(args.cluster_url).is_cluster:
        parser.error("--cluster-url must name a cluster (redis+cluster://host:port,...)")

    started = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)

    given = {STANDALONE: args.url, CLUSTER: args.cluster_url}
    with (
        throwaway_servers(not args.url, not args.cluster_url, log)
        if not (args.url and args.cluster_url)
        else _nothing() as started_urls
    ):
        urls = {name: given[name] or started_urls[name] for name in TARGETS}
        res = bench(urls, plan, log)
    where = (
        THROWAWAY
        if not (args.url or args.cluster_url)
        else "given by --url/--cluster-url"
        if args.url and args.cluster_url
        else "partly given, partly throwaway"
    )
    print(report(res, plan, where))
    log("done")
    return 0


@contextmanager
def _nothing() -> Iterator[dict[str, str]]:
    yield {}


if __name__ == "__main__":
    sys.exit(main())
