"""The ACL of ``deploy/README.md``, run as written.

The rule is read from the README's ``ACL SETUSER redismem reset ...`` line
(so the docs and this test cannot drift) and set, unchanged but for the
password, on a server started for the test: ``redis-server`` (7.0) and
Valkey (a 7.2+ server). As that user, in the default namespace ``redismem``
and queue ``redismem/queue`` the rule names:

* the client: writes, reads, context, search, summaries, the long-term store
  and memories APIs, ``flush``, ``clear``, ``clear_user``, ``clear_all``;
* a ``redismem worker`` process summarizing, indexing (with vectors) and
  extracting (``REDISMEM_EXTRACTOR=rules``);
* the operator commands ``stats``, ``sessions``, ``inspect``, ``memories``
  and ``worker --check``;
* the adapters: LangChain's chat history, LlamaIndex's chat store, and
  LangGraph's checkpointer and store;

each succeeds, and the server's ACL log holds no refusal at all (not even of
a command a library sends and ignores the failure of). So do a db other
than 0 with ``replica_acks`` (``SELECT``, ``WAIT``), the client and adapters
behind Sentinel and on a Redis Cluster with the README's cluster line (and
not without it), and
``redismem demo`` with the README's demo line. Then, grant by grant, a user
with one grant of the rule less fails a named operation: the rule is no
wider than what runs needs. Outside it, keys and server-wide commands are
refused.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import pytest
import redis
import redis.asyncio
from arq.connections import ArqRedis
from conftest import RedisServer
from helpers import redismem_command
from servers import LocalCluster, LocalSentinel, ServerProcess, start_valkey, valkey_missing
from worker_support import WorkerProcess, eventually

from redismem import Fact, Memory, RedisMemError
from redismem.recall.embeddings import HashingEmbedder

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "deploy" / "README.md"
CLI = redismem_command()
USER = "redismem"
PASSWORD = "acl-test-password"
#: The namespace and queue the documented rule's key patterns name (the defaults).
NAMESPACE = "redismem"
QUEUE = "redismem/queue"

Server = RedisServer | ServerProcess


def _setuser_lines() -> list[list[str]]:
    """The README's ``ACL SETUSER redismem ...`` lines, each as its rule words."""
    found = []
    for line in README.read_text().splitlines():
        if line.strip().startswith("ACL SETUSER "):
            words = shlex.split(line)
            assert words[:3] == ["ACL", "SETUSER", USER], words[:3]
            found.append(words[3:])
    return found


def documented_rule() -> list[str]:
    """The rule of the README's one ``ACL SETUSER redismem reset ...`` line,
    with ``>PASSWORD`` as written there."""
    rules = [words for words in _setuser_lines() if words[:1] == ["reset"]]
    assert len(rules) == 1, f"deploy/README.md has {len(rules)} 'ACL SETUSER ... reset' lines"
    return rules[0]


def documented_additions() -> list[list[str]]:
    """The README's other ``ACL SETUSER redismem`` lines: what a cluster, or
    the demo, adds to the user."""
    return [words for words in _setuser_lines() if words[:1] != ["reset"]]


def documented_addition(grant: str) -> list[str]:
    """The README's addition holding ``grant``."""
    found = [words for words in documented_additions() if grant in words]
    assert len(found) == 1, (grant, documented_additions())
    return found[0]


def with_password(rule: list[str]) -> list[str]:
    assert rule.count(">PASSWORD") <= 1, rule
    return [f">{PASSWORD}" if word == ">PASSWORD" else word for word in rule]


def grants(rule: list[str]) -> list[str]:
    """The words of the rule that allow something: key patterns, ``+``
    commands and categories (not ``reset``, ``on``, the password, or ``-``
    restrictions)."""
    return [word for word in rule if word.startswith(("~", "+", "%"))]


def set_user(server: Server | int, *rules: list[str]) -> str:
    """Create the user with ``rules`` applied in turn (the first starts with
    ``reset``), on ``server`` or the one on that port; its URL."""
    port = server if isinstance(server, int) else server.port
    admin = redis.Redis(port=port)
    try:
        for rule in rules:
            admin.execute_command("ACL", "SETUSER", USER, *with_password(rule))
        admin.execute_command("ACL", "LOG", "RESET")
    finally:
        admin.close()
    return f"redis://{USER}:{PASSWORD}@127.0.0.1:{port}/0"


def acl_entries(server: Server | int) -> list[dict[str, Any]]:
    """The server's ACL log: every refusal, newest first."""
    port = server if isinstance(server, int) else server.port
    admin = redis.Redis(port=port, decode_responses=True)
    try:
        return list(admin.acl_log())
    finally:
        admin.close()


def acl_log(server: Server | int) -> list[str]:
    """The server's ACL refusals, one line each."""
    return [f"{e['reason']} {e['object']} ({e['context']})" for e in acl_entries(server)]


@pytest.fixture(params=["redis", "valkey"])
def server(
    request: pytest.FixtureRequest,
    redis_server_factory: Callable[..., RedisServer],
    tmp_path: Path,
) -> Iterator[Server]:
    """A server of this test alone (the rule names the default namespace):
    the suite's ``redis-server`` (7.0), and Valkey (a 7.2+ server, where
    redis-py also sends ``CLIENT SETINFO`` on connect)."""
    if request.param == "redis":
        yield redis_server_factory()
        return
    reason = valkey_missing()
    if reason:
        pytest.skip(reason)
    valkey = start_valkey(tmp_path / "valkey")
    try:
        yield valkey
    finally:
        valkey.stop()


def env_for(url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDISMEM_")}
    env.update(PYTHONUNBUFFERED="1", REDISMEM_URL=url, **extra)
    return env


def run_cli(*args: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], env=dict(env), capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture
def cli_worker(tmp_path: Path) -> Iterator[Callable[[Mapping[str, str]], WorkerProcess]]:
    """``redismem worker`` processes, stopped (SIGTERM) at teardown."""
    started: list[WorkerProcess] = []

    def start(env: Mapping[str, str]) -> WorkerProcess:
        name = f"acl-{uuid.uuid4().hex[:6]}"
        log_path = tmp_path / f"{name}.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [*CLI, "worker", "--name", name, "--wait", "5"],
                env=dict(env),
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        worker = WorkerProcess(process, log_path, QUEUE, name)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop(timeout=10)


async def wait_ready(url: str, worker: WorkerProcess) -> None:
    """Until the worker's own health record is there (it then polls its queue)."""
    client = redis.asyncio.Redis.from_url(url)
    try:

        async def ready() -> bool:
            assert worker.alive, f"worker exited:\n{worker.log()[-3000:]}"
            return bool(await client.exists(f"{QUEUE}:health-check:{worker.name}"))

        await eventually(ready, within=60, what="the worker's health record")
    finally:
        await client.aclose()


# -- a small LangGraph graph ---------------------------------------------------------------


class Counter(TypedDict):
    count: int


def _step(state: Counter) -> Counter:
    return {"count": state["count"] + 1}


def counter_graph(saver: Any) -> Any:
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(Counter)
    graph.add_node("step", _step)
    graph.add_edge(START, "step")
    graph.add_edge("step", END)
    return graph.compile(checkpointer=saver)


# -- what runs as the documented user -----------------------------------------------------

CHAT = [
    {"role": "user", "content": "Hi, my name is Dana and I live in Lisbon."},
    {"role": "assistant", "content": "Nice to meet you, Dana!"},
    {"role": "user", "content": "I prefer trains over planes."},
    {"role": "assistant", "content": "Trains it is."},
]


async def client_calls(mem: Memory) -> None:
    """Every family of client call, on sessions, the store and memories."""
    await mem.ping()
    await mem.write(CHAT, session_id="s1", user_id="alice", tags={"topic": "travel"})
    assert [m.content for m in await mem.read(session_id="s1", user_id="alice", limit=2)] == [
        CHAT[2]["content"],
        CHAT[3]["content"],
    ]
    assert len(await mem.read(session_id="s1", user_id="alice", max_tokens=40)) >= 1
    assert len(await mem.entries(session_id="s1", user_id="alice")) == 1
    assert (await mem.context(session_id="s1", user_id="alice", max_tokens=500)).messages
    assert [s.session_id for s in await mem.sessions(user_id="alice")] == ["s1"]
    await mem.summary(session_id="s1", user_id="alice")
    await mem.build_context(session_id="s2", user_id="alice", request="trains", max_tokens=500)
    await mem.search("trains", user_id="alice")

    put = await mem.store.put(("alice", "prefs"), "seat", {"text": "window seat, please"})
    await mem.store.put(("alice", "prefs"), "seat", {"text": "aisle seat now"})
    assert (await mem.store.get(("alice", "prefs"), "seat")) is not None
    assert len(await mem.store.history(("alice", "prefs"), "seat")) == 2
    assert [h.key for h in await mem.store.search(("alice",), query="aisle")] == [put.key]
    assert await mem.store.list_namespaces(prefix=("alice",))
    await mem.store.delete(("alice", "prefs"), "seat")
    assert await mem.store.purge(("alice",)) >= 1

    fact = Fact(
        text="The user lives in Porto.", subject="user", predicate="lives_in", object="Porto"
    )
    added = await mem.memories.add(fact, user_id="alice")
    record = added.record
    assert (await mem.memories.get(record.id, user_id="alice")) is not None
    await mem.memories.update(record.id, user_id="alice", text="The user lives in Porto, Portugal.")
    assert await mem.memories.search("Porto", user_id="alice")
    assert len(await mem.memories.history(record.id, user_id="alice")) == 2
    assert await mem.memories.delete(record.id, user_id="alice")
    assert await mem.memories.restore(record.id, user_id="alice")
    await mem.memories.profile(user_id="alice")
    assert await mem.memories.purge(record.id, user_id="alice") >= 1

    assert await mem.clear(session_id="s1", user_id="alice") > 0
    await mem.write(CHAT[:1], session_id="s3", user_id="bob")
    assert await mem.clear_user("bob") > 0


async def adapter_calls(mem: Memory) -> None:
    """Each adapter's reads, writes and clears."""
    # The frameworks are imported here, not at collection: they are slow to import.
    from langchain_core.messages import AIMessage, HumanMessage
    from llama_index.core.llms import ChatMessage

    from redismem.adapters.langchain import RedisMemChatMessageHistory
    from redismem.adapters.langgraph import RedisMemSaver
    from redismem.adapters.langgraph_store import RedisMemStore
    from redismem.adapters.llamaindex import RedisMemChatStore

    history = RedisMemChatMessageHistory(mem, "lc", user_id="carol")
    await history.aadd_messages([HumanMessage("hello"), AIMessage("hi there")])
    assert [m.content for m in await history.aget_messages()] == ["hello", "hi there"]
    await history.aclear()
    assert await history.aget_messages() == []

    chats = RedisMemChatStore(mem, "carol")
    await chats.aset_messages("li", [ChatMessage(role="user", content="one")])
    await chats.async_add_message("li", ChatMessage(role="assistant", content="two"))
    assert [m.content for m in await chats.aget_messages("li")] == ["one", "two"]
    assert "li" in await chats.aget_keys()
    await chats.adelete_message("li", 0)
    assert [m.content for m in await chats.aget_messages("li")] == ["two"]
    await chats.adelete_messages("li")

    saver = RedisMemSaver(mem)
    graph = counter_graph(saver)
    config: Any = {"configurable": {"thread_id": "lg-1"}}
    assert (await graph.ainvoke({"count": 0}, config))["count"] == 1
    assert (await graph.aget_state(config)).values == {"count": 1}
    assert len([s async for s in graph.aget_state_history(config)]) >= 2
    await saver.adelete_thread("lg-1")

    store = RedisMemStore(mem, index={"dims": 64, "embed": HashingEmbedder(64)})
    await store.aput(("carol", "notes"), "n1", {"text": "likes green tea"})
    assert (await store.aget(("carol", "notes"), "n1")) is not None
    assert [i.key for i in await store.asearch(("carol",), query="green tea")] == ["n1"]
    assert await store.alist_namespaces(prefix=("carol",)) == [("carol", "notes")]
    await store.adelete(("carol", "notes"), "n1")
    assert await store.aget(("carol", "notes"), "n1") is None


async def test_the_documented_user_runs_clients_workers_cli_and_adapters(
    server: Server, cli_worker: Callable[[Mapping[str, str]], WorkerProcess]
) -> None:
    url = set_user(server, documented_rule())
    env = env_for(
        url, REDISMEM_EXTRACTOR="rules", REDISMEM_EXTRACT_QUIET="0.2", REDISMEM_EMBEDDER="hashing"
    )
    worker = cli_worker(env)
    await wait_ready(url, worker)
    mem = await Memory.connect(
        url, keep_recent=2, summarize_batch=2, index=True, embedder="hashing"
    )
    try:
        await client_calls(mem)
        await adapter_calls(mem)

        # The worker summarizes, indexes and extracts, as that user.
        await mem.write(CHAT, session_id="trip", user_id="dana")
        await mem.write(CHAT, session_id="trip", user_id="dana")
        assert await mem.flush(user_id="dana", timeout=60), worker.log()[-3000:]
        summary = await mem.summary(session_id="trip", user_id="dana")
        assert summary is not None and summary.message_count >= 2, worker.log()[-3000:]
        assert await mem.search("trains", user_id="dana")
        facts = await mem.memories.search(user_id="dana", kinds="fact")
        found = {(f.record.predicate, f.record.object) for f in facts}  # type: ignore[union-attr]
        assert ("lives_in", "Lisbon") in found, (found, worker.log()[-3000:])

        # The operator commands.
        for args in (
            ("stats",),
            ("sessions", "--user", "dana"),
            ("inspect", "trip", "--user", "dana"),
            ("memories", "--user", "dana"),
            ("memories", "--user", "dana", "Lisbon"),
            ("worker", "--check"),
            ("worker", "--check", worker.name),
        ):
            result = run_cli(*args, env=env)
            assert result.returncode == 0, (args, result.stdout, result.stderr)
        assert "Lisbon" in run_cli("memories", "--user", "dana", env=env).stdout

        assert await mem.clear_user("dana") > 0
        await mem.clear_all()
    finally:
        await mem.aclose()
    worker.stop()
    assert worker.process.returncode == 0, worker.log()[-3000:]
    assert "NOPERM" not in worker.log(), worker.log()[-3000:]
    assert acl_log(server) == []


# -- no grant of the rule is superfluous --------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """Without ``grant``, ``run(url, start_worker)`` shows an operation
    failing, and the ACL log a refusal of ``refused``: ``key:PREFIX`` (a key
    starting so), ``command:NAME`` or ``category:NAME`` (a command of that ACL
    category). The servers word their errors differently; the log says what
    was refused."""

    grant: str
    run: Callable[[str, Callable[[Mapping[str, str]], WorkerProcess]], Awaitable[None]]
    refused: str


def refuses(server: Server, expected: str) -> Callable[[dict[str, Any]], bool]:
    kind, _, name = expected.partition(":")
    if kind == "key":
        return lambda entry: entry["reason"] == "key" and entry["object"].startswith(name)
    if kind == "command":
        return lambda entry: entry["reason"] == "command" and entry["object"] == name
    assert kind == "category", expected
    admin = redis.Redis(port=server.port, decode_responses=True)
    try:
        members = set(admin.execute_command("ACL", "CAT", name))
    finally:
        admin.close()
    return lambda entry: entry["reason"] == "command" and entry["object"] in members


async def write_fails(url: str, _: object) -> None:
    mem = await Memory.connect(url)
    try:
        with pytest.raises(RedisMemError):
            await mem.write(CHAT[:1], session_id="s", user_id="alice")
    finally:
        await mem.aclose()


async def read_fails(url: str, _: object) -> None:
    mem = await Memory.connect(url)
    try:
        with pytest.raises(RedisMemError):
            await mem.read(session_id="s", user_id="alice")
    finally:
        await mem.aclose()


async def ping_fails(url: str, _: object) -> None:
    with pytest.raises(RedisMemError):
        mem = await Memory.connect(url)
        try:
            await mem.ping()
        finally:
            await mem.aclose()


async def enqueue_fails(url: str, _: object) -> None:
    """What a client does to enqueue a job (arq's own ``enqueue_job``)."""
    pool = ArqRedis.from_url(url)
    try:
        with pytest.raises(redis.exceptions.NoPermissionError):
            await pool.enqueue_job("summarize_session", _job_id="acl-probe", _queue_name=QUEUE)
    finally:
        await pool.aclose()


async def stats_fails(url: str, _: object) -> None:
    result = await asyncio.to_thread(run_cli, "stats", env=env_for(url))
    assert result.returncode != 0, result.stdout
    assert "permission" in result.stderr.lower(), result.stderr


async def worker_exits(url: str, start: Callable[[Mapping[str, str]], WorkerProcess]) -> None:
    worker = start(env_for(url))

    async def exited() -> bool:
        return not worker.alive

    await eventually(exited, within=60, what="the worker to exit", describe=worker.log)
    assert worker.process.returncode != 0
    assert "NOPERM" in worker.log() or "no permissions" in worker.log(), worker.log()


PROBES = [
    Probe("~redismem:*", write_fails, "key:redismem:{u:alice}"),
    Probe("~redismem/*", stats_fails, "key:redismem/"),
    Probe("~arq:*", enqueue_fails, "key:arq:"),
    Probe("+@read", read_fails, "category:read"),
    Probe("+@write", write_fails, "category:write"),
    Probe("+@transaction", enqueue_fails, "category:transaction"),
    Probe("+@connection", ping_fails, "command:ping"),
    Probe("+evalsha", write_fails, "command:evalsha"),
    Probe("+script|load", write_fails, "command:script|load"),
    Probe("+time", write_fails, "command:time"),
]
#: The grants ``+info|SECTION``: arq's worker logs these sections at start-up.
INFO_SECTIONS = ("server", "memory", "clients")
PROBES += [Probe(f"+info|{name}", worker_exits, "command:info") for name in INFO_SECTIONS]


def test_every_grant_of_the_rule_has_a_probe() -> None:
    """A grant added to the README without a proof that runs need it fails here."""
    assert sorted(grants(documented_rule())) == sorted(p.grant for p in PROBES)
    for addition in documented_additions():
        assert grants(addition) == addition
    assert len(documented_additions()) == 2  # the cluster's and the demo's, tested below


@pytest.mark.parametrize("probe", PROBES, ids=[p.grant for p in PROBES])
async def test_one_grant_less_fails(
    probe: Probe,
    server: Server,
    cli_worker: Callable[[Mapping[str, str]], WorkerProcess],
) -> None:
    rule = documented_rule()
    assert probe.grant in rule
    url = set_user(server, [word for word in rule if word != probe.grant])
    await probe.run(url, cli_worker)
    log = acl_entries(server)
    assert any(map(refuses(server, probe.refused), log)), log


async def test_a_db_other_than_0_and_replica_acks_run_as_the_documented_user(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    """``SELECT`` and ``WAIT`` (``replica_acks=1``) with a replica attached."""
    primary = redis_server_factory(extra_args=("--repl-diskless-sync-delay", "0"))
    replica = redis_server_factory(extra_args=("--replicaof", "127.0.0.1", str(primary.port)))
    url = set_user(primary, documented_rule()).removesuffix("/0") + "/3"
    admin = redis.asyncio.Redis(port=primary.port)
    try:

        async def attached() -> bool:
            replica = (await admin.info("replication")).get("slave0")
            return isinstance(replica, dict) and replica.get("state") == "online"

        await eventually(attached, within=30, what="the replica to attach")
        mem = await Memory.connect(url, replica_acks=1, replica_timeout=4)
        try:
            await mem.write(CHAT, session_id="s", user_id="alice")
            assert len(await mem.read(session_id="s", user_id="alice")) == len(CHAT)
            assert await mem.clear_user("alice") > 0
        finally:
            await mem.aclose()
        assert await admin.dbsize() == 0  # it wrote to db 3
        used = await admin.info("commandstats")
        assert used["cmdstat_wait"]["calls"] > 0 and used["cmdstat_select"]["calls"] > 0
    finally:
        await admin.aclose()
    assert replica.process.poll() is None
    assert acl_log(primary) == []


# -- what the rule refuses -----------------------------------------------------------------

#: Commands the documented user may not run: other keys, server-wide changes,
#: other clients, arbitrary scripts, functions, channels.
REFUSED: list[tuple[Any, ...]] = [
    ("SET", "other:key", "x"),
    ("GET", "other:key"),
    ("UNLINK", "other:key"),
    ("SET", "redismemx", "x"),
    ("EVAL", "return 1", 0),
    ("FLUSHALL",),
    ("FLUSHDB",),
    ("KEYS", "*"),
    ("CONFIG", "GET", "maxmemory"),
    ("CONFIG", "SET", "maxmemory-policy", "allkeys-lru"),
    ("FUNCTION", "FLUSH"),
    ("FUNCTION", "LOAD", "#!lua name=x\nredis.register_function('x', function() return 1 end)"),
    ("SCRIPT", "FLUSH"),
    ("SCRIPT", "KILL"),
    ("CLIENT", "LIST"),
    ("CLIENT", "KILL", "TYPE", "normal"),
    ("CLIENT", "PAUSE", "10"),
    ("INFO", "keyspace"),
    ("INFO",),
    ("ACL", "LIST"),
    ("BGSAVE",),
    ("REPLICAOF", "NO", "ONE"),
    ("SWAPDB", "0", "1"),
    ("PUBLISH", "channel", "x"),
    ("SHUTDOWN",),
]


async def test_the_documented_user_is_refused_what_it_does_not_need(server: Server) -> None:
    url = set_user(server, documented_rule())
    client = redis.asyncio.Redis.from_url(url)
    try:
        for refused in REFUSED:
            with pytest.raises(redis.exceptions.NoPermissionError):
                await client.execute_command(*refused)
        # A script it may load and run cannot reach a key outside the patterns.
        sha = await client.script_load("return redis.call('SET', KEYS[1], 'x')")
        with pytest.raises(redis.exceptions.ResponseError, match=r"(?i)no permissions"):
            await client.evalsha(sha, 1, "other:key")
        assert await client.evalsha(sha, 1, "redismem:{u:x}:probe") == b"OK"
        await client.unlink("redismem:{u:x}:probe")
    finally:
        await client.aclose()
    admin = redis.Redis(port=server.port)
    try:
        assert admin.exists("other:key", "redismemx", "redismem:{u:x}:probe") == 0
        assert admin.ping()  # not shut down
    finally:
        admin.close()


# -- Redis Cluster -------------------------------------------------------------------------


async def test_on_a_cluster_the_user_needs_cluster_slots_and_nothing_more(
    cluster_for_faults: LocalCluster, redis_server_factory: Callable[..., RedisServer]
) -> None:
    """The memory side on a cluster (every node holding the user), the queue
    on a standalone server: without the README's cluster line the client
    cannot read the slot map; with it, the client and the adapters run."""
    cluster = cluster_for_faults  # healthy: every node up, every slot served
    queue_url = set_user(redis_server_factory(), documented_rule())
    url = f"redis+cluster://{USER}:{PASSWORD}@" + ",".join(
        f"{host}:{port}" for host, port in cluster.startup_nodes
    )
    try:
        for port in cluster.ports:
            set_user(port, documented_rule())
        with pytest.raises(RedisMemError):
            await Memory.connect(url, queue_url=queue_url)
        assert any("cluster|slots" in line for port in cluster.ports for line in acl_log(port))

        for port in cluster.ports:
            set_user(port, documented_rule(), documented_addition("+cluster|slots"))
        mem = await Memory.connect(url, queue_url=queue_url, keep_recent=2, summarize_batch=2)
        try:
            await client_calls(mem)
            await adapter_calls(mem)
            await mem.clear_all()
        finally:
            await mem.aclose()
        assert [line for port in cluster.ports for line in acl_log(port)] == []
    finally:
        cluster.delete_matching(f"{NAMESPACE}:*")
        for port in cluster.ports:
            admin = redis.Redis(port=port)
            try:
                admin.execute_command("ACL", "DELUSER", USER)
            finally:
                admin.close()


async def test_behind_sentinel_the_user_on_each_data_node_is_enough(
    sentinel_for_faults: LocalSentinel, redis_server_factory: Callable[..., RedisServer]
) -> None:
    """A master and its replica managed by Sentinel, each holding the user
    (the sentinels keep their own, default, user): the client and the
    adapters run."""
    sentinel = sentinel_for_faults  # healthy: master, replica and sentinels up
    queue_url = set_user(redis_server_factory(), documented_rule())
    sentinels = ",".join(f"{host}:{port}" for host, port in sentinel.sentinel_addresses)
    url = f"redis+sentinel://{USER}:{PASSWORD}@{sentinels}/{sentinel.service_name}/0"
    try:
        for port in sentinel.data:
            set_user(port, documented_rule())
        mem = await Memory.connect(url, queue_url=queue_url, keep_recent=2, summarize_batch=2)
        try:
            await client_calls(mem)
            await adapter_calls(mem)
            await mem.clear_all()
        finally:
            await mem.aclose()
        assert [line for port in sentinel.data for line in acl_log(port)] == []
    finally:
        sentinel.delete_matching(f"{NAMESPACE}:*")
        for port in sentinel.data:
            admin = redis.Redis(port=port)
            try:
                admin.execute_command("ACL", "DELUSER", USER)
            finally:
                admin.close()


async def test_the_demo_runs_as_the_documented_user_with_its_namespaces(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    """``redismem demo`` (its own namespace ``demo-...``) with the README's
    addition for it."""
    server = redis_server_factory()
    url = set_user(server, documented_rule(), documented_addition("~demo-*"))
    result = await asyncio.to_thread(
        run_cli,
        "demo",
        "--url",
        url,
        "--agents",
        "1",
        "--workers",
        "1",
        "--sessions",
        "2",
        "--duration",
        "1",
        env=env_for(url),
    )
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "no message lost" in result.stdout, result.stdout
    assert acl_log(server) == []
