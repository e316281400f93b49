"""The launchers of tests/servers.py start real servers that behave as such:
a cluster that routes keys to their slot's master, fails over a killed master
and reshards under writes; a Sentinel group whose master clients find and
whose failover moves the master; a Valkey server. Each group is skipped, with
the reason, when its binaries are absent."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.sentinel import Sentinel
from redis.crc import key_slot
from servers import (
    _LIVE,
    LocalCluster,
    LocalSentinel,
    ServerStartError,
    cluster_missing,
    iter_processes,
    sentinel_missing,
    start_cluster,
    start_sentinel,
    start_standalone,
    start_valkey,
    valkey_binary,
    valkey_missing,
)

pytestmark = pytest.mark.cluster  # the launchers start their servers

needs_cluster = pytest.mark.skipif(cluster_missing() is not None, reason=str(cluster_missing()))
needs_sentinel = pytest.mark.skipif(sentinel_missing() is not None, reason=str(sentinel_missing()))
needs_valkey = pytest.mark.skipif(valkey_missing() is not None, reason=str(valkey_missing()))


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture(scope="module")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    if cluster_missing():
        pytest.skip(str(cluster_missing()))
    cluster = start_cluster(tmp_path_factory.mktemp("servers-cluster"))
    try:
        yield cluster
    finally:
        pids = list(iter_processes(cluster))
        cluster.stop()
        assert all(_gone(pid) for pid in pids)
        assert not cluster.directory.exists()


@pytest.fixture
def cluster(local_cluster: LocalCluster) -> Iterator[LocalCluster]:
    """The module's cluster, fully ok before the test and healed after it."""
    local_cluster.wait_ok()
    yield local_cluster
    local_cluster.heal()


@pytest.fixture(scope="module")
def local_sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSentinel]:
    if sentinel_missing():
        pytest.skip(str(sentinel_missing()))
    group = start_sentinel(tmp_path_factory.mktemp("servers-sentinel"))
    try:
        yield group
    finally:
        pids = list(iter_processes(group))
        group.stop()
        assert all(_gone(pid) for pid in pids)


@pytest.fixture
def sentinel(local_sentinel: LocalSentinel) -> Iterator[LocalSentinel]:
    local_sentinel.wait_healthy()
    yield local_sentinel
    local_sentinel.heal()


def _cluster_client(cluster: LocalCluster) -> RedisCluster:
    client: RedisCluster = RedisCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in cluster.startup_nodes],
        socket_timeout=2,
        socket_connect_timeout=1,
    )
    return client


# ---------------------------------------------------------------------------
# cluster
# ---------------------------------------------------------------------------


@needs_cluster
def test_cluster_shape_and_addresses(cluster: LocalCluster) -> None:
    assert cluster.startup_seconds < 30
    assert len(cluster.masters()) == 3
    assert len(cluster.replicas()) == 3
    assert sum(cluster.slots_of(port) for port in cluster.masters()) == 16384
    hosts = ",".join(f"127.0.0.1:{port}" for port in cluster.initial_masters)
    assert cluster.url == f"redis+cluster://{hosts}"
    assert cluster.startup_nodes == [("127.0.0.1", p) for p in cluster.initial_masters]


@needs_cluster
async def test_cluster_key_lands_on_its_slot_master(cluster: LocalCluster) -> None:
    client = _cluster_client(cluster)
    try:
        for index in range(20):
            await client.set(f"{{user-{index}}}:k", index)
    finally:
        await client.aclose()
    owners = set()
    for index in range(20):
        key = f"{{user-{index}}}:k"
        owner = cluster.master_of_slot(key_slot(key.encode()))
        owners.add(owner)
        with redis.Redis(port=owner) as direct:
            assert direct.get(key) == str(index).encode()
        other = next(port for port in cluster.masters() if port != owner)
        with redis.Redis(port=other) as direct, pytest.raises(redis.ResponseError, match="MOVED"):
            direct.get(key)
    assert len(owners) > 1  # 20 hash tags spread over several masters


@needs_cluster
async def test_cluster_reshard_while_a_client_writes(cluster: LocalCluster) -> None:
    source, target = cluster.masters()[:2]
    before = cluster.slots_of(source), cluster.slots_of(target)
    client = _cluster_client(cluster)
    written: list[str] = []
    errors: list[BaseException] = []
    stop = asyncio.Event()

    async def writer() -> None:
        index = 0
        while not stop.is_set():
            key = f"{{w{index}}}:v"
            try:
                await client.set(key, index)
                written.append(key)
            except (redis.RedisError, redis.exceptions.RedisClusterException) as exc:
                errors.append(exc)
            index += 1

    try:
        task = asyncio.create_task(writer())
        await asyncio.sleep(0.2)
        await asyncio.to_thread(cluster.reshard, source, target, 300)
        await asyncio.sleep(0.2)
        stop.set()
        await task
        assert (cluster.slots_of(source), cluster.slots_of(target)) == (
            before[0] - 300,
            before[1] + 300,
        )
        assert len(written) > 100
        assert errors == []
        values = [await client.get(key) for key in written]
        assert all(value is not None for value in values)
    finally:
        stop.set()
        await client.aclose()


@needs_cluster
async def test_cluster_killed_master_fails_over_and_comes_back_as_replica(
    cluster: LocalCluster,
) -> None:
    victim = cluster.masters()[0]
    victim_node = next(node for node in cluster.table() if node.port == victim)
    slot_key = next(
        f"{{k{i}}}" for i in range(100_000) if victim_node.owns(key_slot(f"{{k{i}}}".encode()))
    )
    with redis.Redis(port=victim) as direct:
        direct.set(slot_key, "kept")
        assert direct.wait(1, 5000) == 1  # on the replica before the kill

    began = time.monotonic()
    assert cluster.kill_master(victim) == victim
    promoted = await asyncio.to_thread(cluster.wait_failover, victim)
    took = time.monotonic() - began
    assert promoted != victim
    assert took < cluster.node_timeout_ms / 1000 + 10, took

    client = _cluster_client(cluster)
    try:
        assert await client.get(slot_key) == b"kept"
    finally:
        await client.aclose()

    await asyncio.to_thread(cluster.restart, victim)
    await asyncio.to_thread(cluster.wait_ok)
    assert victim in cluster.replicas()
    assert promoted in cluster.masters()


# ---------------------------------------------------------------------------
# sentinel
# ---------------------------------------------------------------------------


async def _master_client(group: LocalSentinel) -> tuple[Sentinel, aioredis.Redis]:
    watcher = Sentinel(group.sentinel_addresses, socket_timeout=1)  # type: ignore[no-untyped-call]
    return watcher, watcher.master_for(group.service_name, socket_timeout=1)


async def _close(watcher: Sentinel, master: aioredis.Redis) -> None:
    await master.aclose()
    for client in watcher.sentinels:
        await client.aclose()


@needs_sentinel
async def test_sentinel_master_for_writes_on_the_master(sentinel: LocalSentinel) -> None:
    assert sentinel.startup_seconds < 30
    ports = ",".join(f"127.0.0.1:{port}" for _, port in sentinel.sentinel_addresses)
    assert sentinel.url == f"redis+sentinel://{ports}/mymaster/0"
    watcher, master = await _master_client(sentinel)
    try:
        await master.set("sentinel-key", "v")
        host, port = await watcher.discover_master(sentinel.service_name)
        assert (host, port) == ("127.0.0.1", sentinel.master_port())
    finally:
        await _close(watcher, master)
    with redis.Redis(port=sentinel.master_port()) as direct:
        assert direct.get("sentinel-key") == b"v"


@needs_sentinel
async def test_sentinel_failover_switches_the_master(sentinel: LocalSentinel) -> None:
    old = sentinel.master_port()
    new = await asyncio.to_thread(sentinel.failover, 30, True)
    assert new != old
    assert sentinel.master_port() == new
    await asyncio.to_thread(sentinel.wait_healthy)
    assert sentinel.replica_ports() == [old]
    watcher, master = await _master_client(sentinel)
    try:
        await master.set("after-failover", "v")
        assert (await watcher.discover_master(sentinel.service_name))[1] == new
    finally:
        await _close(watcher, master)


@needs_sentinel
async def test_sentinel_promotes_the_replica_of_a_killed_master(tmp_path: Path) -> None:
    # A group of its own: the session's group carries other tests' failovers,
    # and the sentinels' view of the replicas lags behind a heal.
    sentinel = await asyncio.to_thread(start_sentinel, tmp_path)
    try:
        began = time.monotonic()
        old = sentinel.kill_master()
        new = await asyncio.to_thread(sentinel.wait_master_change, old)
        assert new != old
        assert time.monotonic() - began < 20
        watcher, master = await _master_client(sentinel)
        try:
            await master.set("after-kill", "v")
        finally:
            await _close(watcher, master)
        await asyncio.to_thread(sentinel.heal)
        deadline = time.monotonic() + 20
        while sentinel.replica_ports() != [old] and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert sentinel.replica_ports() == [old]
    finally:
        await asyncio.to_thread(sentinel.stop)


# ---------------------------------------------------------------------------
# valkey, failures, leaks
# ---------------------------------------------------------------------------


@needs_valkey
async def test_valkey_answers_and_says_it_is_valkey(tmp_path: Path) -> None:
    server = await asyncio.to_thread(start_valkey, tmp_path)
    pid = server.process.pid if server.process else 0
    try:
        client = aioredis.Redis.from_url(server.url)
        try:
            assert await client.ping()
            info = await client.info("server")
        finally:
            await client.aclose()
        assert info.get("server_name") == "valkey" or "valkey_version" in info
    finally:
        server.stop()
    assert _gone(pid)
    assert valkey_binary() is not None


@needs_sentinel
def test_a_server_that_cannot_start_raises_the_reason_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    live = set(_LIVE)
    began = time.monotonic()
    with pytest.raises(ServerStartError, match="no-such-directive"):
        start_standalone(tmp_path, extra_args=("--no-such-directive", "1"))
    assert time.monotonic() - began < 10
    assert set(_LIVE) == live


@needs_cluster
def test_a_cluster_that_cannot_start_kills_every_node(tmp_path: Path) -> None:
    live = set(_LIVE)
    with pytest.raises(ServerStartError, match="cluster nodes"):
        start_cluster(tmp_path, extra_config=["cluster-node-timeout not-a-number"])
    assert set(_LIVE) == live
