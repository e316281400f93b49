"""One client for OpenAI-compatible ``/chat/completions`` endpoints.

The LLM summarizer, extractor and consolidator all talk to the model through
``ChatEndpoint.complete``: one POST, the assistant's text back. It uses the
standard library's HTTP client in a thread of a shared pool, so it needs no
extra package and many calls run at once without blocking the event loop.
Every failure (HTTP error, unreachable endpoint, timeout, a body that is not
JSON or not a completion, empty content) raises the error type the caller
names, so each component keeps its own error (``SummarizerError``,
``ExtractorError``) for the workers to retry.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from typing import Any

from redismem import env as environment
from redismem.errors import InvalidInput, RedisMemError, SummarizerError

__all__ = ["ChatEndpoint", "chat_endpoint_from_env"]


@cache
def _http_executor() -> ThreadPoolExecutor:
    # LLM calls are slow I/O: a worker runs many at once, more than the
    # default executor's few threads would allow.
    return ThreadPoolExecutor(max_workers=64, thread_name_prefix="redismem-llm")


@dataclass(frozen=True)
class ChatEndpoint:
    """An OpenAI-compatible chat-completions endpoint: ``base_url`` is e.g.
    ``http://localhost:8000/v1``; ``timeout`` is seconds per request."""

    base_url: str
    model: str
    api_key: str | None = None
    timeout: float = 30.0

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise InvalidInput(f"base_url must be an http(s) URL, got {self.base_url!r}")
        if not self.model:
            raise InvalidInput("model must be set")
        if self.timeout <= 0:
            raise InvalidInput("timeout must be positive")

    def request(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        max_tokens: int,
        temperature: float,
        response_format: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The JSON body ``complete`` posts."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(m) for m in messages],
            "max_tokens": max_tokens,
            "temperature": temperature,
        }
        if response_format is not None:
            body["response_format"] = dict(response_format)
        return body

    def _post(self, body: dict[str, Any], error: type[RedisMemError]) -> Any:
        url = self.base_url.rstrip("/") + "/chat/completions"
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:300].decode("utf-8", "replace")
            raise error(f"LLM endpoint answered HTTP {exc.code}: {detail}") from exc
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise error(f"LLM endpoint unreachable: {exc}") from exc
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise error("LLM endpoint returned invalid JSON") from exc

    async def post(self, body: dict[str, Any], *, error: type[RedisMemError]) -> Any:
        """POST ``body``; the decoded JSON answer (any shape)."""
        try:
            loop = asyncio.get_running_loop()
            return await asyncio.wait_for(
                loop.run_in_executor(_http_executor(), self._post, body, error), self.timeout + 1
            )
        except TimeoutError as exc:
            raise error(f"LLM endpoint timed out after {self.timeout}s") from exc

    async def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        max_tokens: int,
        temperature: float,
        response_format: Mapping[str, Any] | None = None,
        error: type[RedisMemError] = SummarizerError,
    ) -> str:
        """The assistant's reply to ``messages`` (chat-completions dicts), stripped."""
        body = self.request(
            messages,
            max_tokens=max_tokens,
            temperature=temperature,
            response_format=response_format,
        )
        return content_of(await self.post(body, error=error), error)


def content_of(payload: Any, error: type[RedisMemError]) -> str:
    """The first choice's text of a chat-completions answer, stripped."""
    try:
        text = payload["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as exc:
        raise error(f"unexpected chat-completions response: {str(payload)[:200]}") from exc
    if not isinstance(text, str) or not text.strip():
        raise error("LLM returned an empty reply")
    return text.strip()


def chat_endpoint_from_env(setting: str, env: Mapping[str, str] | None = None) -> ChatEndpoint:
    """The endpoint ``REDISMEM_LLM_BASE_URL``, ``REDISMEM_LLM_MODEL``,
    ``REDISMEM_LLM_API_KEY`` and ``REDISMEM_LLM_TIMEOUT`` name; ``setting``
    (e.g. ``"REDISMEM_SUMMARIZER=llm"``) is what needs it, for the error."""
    base_url = environment.text("REDISMEM_LLM_BASE_URL", env)
    model = environment.text("REDISMEM_LLM_MODEL", env)
    if not base_url or not model:
        raise InvalidInput(f"{setting} needs REDISMEM_LLM_BASE_URL and REDISMEM_LLM_MODEL")
    timeout = environment.seconds("REDISMEM_LLM_TIMEOUT", env)
    return ChatEndpoint(
        base_url=base_url,
        model=model,
        api_key=environment.text("REDISMEM_LLM_API_KEY", env),
        timeout=30.0 if timeout is None else timeout,
    )
