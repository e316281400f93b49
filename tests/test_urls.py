"""Redis URLs: what each form names, the queue's refusal of a cluster, and the
errors of cluster and Sentinel clients mapped into redismem's tree."""

from __future__ import annotations

import pytest
import redis.exceptions as rexc

from redismem import BackendError, BackendUnavailable, InvalidInput, Memory
from redismem.config import WorkerConfig, check_queue_url, check_url
from redismem.core.connection import map_error
from redismem.core.urls import describe_url, parse_url


@pytest.mark.parametrize(
    ("url", "kind", "nodes", "service", "db", "username", "password"),
    [
        ("redis://h:1/2", "server", (("h", 1),), None, 0, None, None),
        ("unix:///tmp/r.sock?db=2", "server", (), None, 0, None, None),
        (
            "redis+cluster://u:p%40w@h1:7000,h2:7001",
            "cluster",
            (("h1", 7000), ("h2", 7001)),
            None,
            0,
            "u",
            "p@w",
        ),
        ("redis://h1:1,h2:2?cluster=1", "cluster", (("h1", 1), ("h2", 2)), None, 0, None, None),
        (
            "redis+sentinel://:pw@s1,s2:26380/main/3",
            "sentinel",
            (("s1", 26379), ("s2", 26380)),
            "main",
            3,
            None,
            "pw",
        ),
        ("memory://x", "embedded", (), None, 0, None, None),
    ],
)
def test_each_form_names_its_kind(
    url: str,
    kind: str,
    nodes: tuple[tuple[str, int], ...],
    service: str | None,
    db: int,
    username: str | None,
    password: str | None,
) -> None:
    target = parse_url(url)
    assert (target.kind, target.nodes, target.service, target.db) == (kind, nodes, service, db)
    if kind in ("cluster", "sentinel"):
        assert (target.username, target.password) == (username, password)


def test_tls_forms() -> None:
    assert parse_url("rediss+cluster://h:1").tls
    assert parse_url("rediss+sentinel://h:1/m").tls
    assert not parse_url("redis+cluster://h:1").tls


@pytest.mark.parametrize(
    "url",
    [
        "http://h",
        "redis+foo://h",
        "redis://h1:1,h2:2",  # several hosts need a mode
        "redis+sentinel://h:1",  # no service
        "redis+sentinel://h:1/m/x",  # db not a number
        "redis+cluster://h:1/3",  # a cluster has db 0 only
        "redis+cluster://h:99999",
        "unix+cluster:///tmp/s",
        "",
    ],
)
def test_malformed_urls_are_invalid_input(url: str) -> None:
    with pytest.raises(InvalidInput):
        parse_url(url)


def test_passwords_are_masked_in_descriptions() -> None:
    assert describe_url("redis+sentinel://u:secret@h:1/m") == "redis+sentinel://u:***@h:1/m"
    assert "secret" not in describe_url("redis+cluster://:secret@h1:1,h2:2")


def test_operator_urls_accept_every_server_form_but_not_the_embedded_one() -> None:
    for url in ("redis://h", "redis+cluster://h:1", "redis+sentinel://h:1/m"):
        assert check_url(url) == url
    with pytest.raises(InvalidInput, match="embedded"):
        check_url("memory://")
    with pytest.raises(InvalidInput, match="redis\\+cluster://"):
        check_url("http://h")


def test_the_queue_refuses_a_cluster_with_a_hint() -> None:
    with pytest.raises(InvalidInput, match="REDISMEM_QUEUE_URL"):
        check_queue_url("redis+cluster://h:1")
    assert check_queue_url("redis+sentinel://h:1/m") == "redis+sentinel://h:1/m"
    with pytest.raises(InvalidInput, match="arq does not run on Redis Cluster"):
        WorkerConfig(url="redis+cluster://h:1")
    config = WorkerConfig(url="redis+cluster://h:1", queue_url="redis://q:6379/0")
    assert config.queue_url == "redis://q:6379/0"


async def test_a_client_on_a_cluster_needs_a_queue_url_unless_nothing_is_queued() -> None:
    with pytest.raises(InvalidInput, match="queue_url"):
        await Memory.connect("redis+cluster://127.0.0.1:1")
    with pytest.raises(InvalidInput, match="queue_url"):
        await Memory.connect("redis://127.0.0.1:1?cluster=1", keep_recent=5)
    # Nothing queued: the URL is accepted (and the unreachable cluster reported).
    with pytest.raises(BackendUnavailable):
        await Memory.connect(
            "redis+cluster://127.0.0.1:1", index=False, retries=0, connect_timeout=0.5
        )


def test_cluster_and_sentinel_errors_map_into_the_tree() -> None:
    url = "redis+cluster://h:1"
    transient = [
        rexc.ClusterDownError("The cluster is down"),
        rexc.TryAgainError(),
        rexc.MasterDownError("master down"),
        rexc.SlotNotCoveredError("slot 3 not covered"),
        rexc.RedisClusterException("Redis Cluster cannot be connected"),
        rexc.ResponseError("TRYAGAIN Multiple keys request during rehashing of slot"),
        rexc.ResponseError("CLUSTERDOWN Hash slot not served"),
    ]
    for error in transient:
        assert isinstance(map_error(error, url), BackendUnavailable), error
    not_a_cluster = map_error(rexc.RedisClusterException("Cluster mode is not enabled"), url)
    assert isinstance(not_a_cluster, BackendError)
    assert not isinstance(not_a_cluster, BackendUnavailable)
    from redis.asyncio.sentinel import MasterNotFoundError

    assert isinstance(
        map_error(MasterNotFoundError("No master found for 'm'"), url), BackendUnavailable
    )


def test_replica_acks_are_checked() -> None:
    from redismem.config import MemoryConfig

    for bad in (-1, 17, 1.5, True, "1"):
        with pytest.raises(InvalidInput, match="replica_acks"):
            MemoryConfig(replica_acks=bad)
    with pytest.raises(InvalidInput, match="replica_timeout"):
        MemoryConfig(replica_acks=1, replica_timeout=10.0, socket_timeout=5.0)


async def test_replica_acks_need_a_url_the_hot_path_connection_serves() -> None:
    with pytest.raises(InvalidInput, match="replica_acks"):
        await Memory.connect("memory://acks", replica_acks=1)
