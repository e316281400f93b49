"""``redismem serve`` over real HTTP (httpx) against the suite's Redis: the
probes, every sessions and recall route, round trips, idempotent appends and
the request limits (413, 415, 400, 422)."""

from __future__ import annotations

import httpx
import pytest
import server_support
from server_support import RunningServer

pytestmark = pytest.mark.processes
http_server = server_support.http_server
served = server_support.served


def test_healthz_answers_without_a_key(served: RunningServer) -> None:
    response = httpx.get(f"{served.base_url}/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_is_503_without_a_worker(served: RunningServer) -> None:
    response = httpx.get(f"{served.base_url}/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["checks"]["redis"] == "ok"
    assert body["checks"]["queue"] == "ok"
    assert "no healthy worker" in body["checks"]["workers"]
    assert body["error"]["type"] == "NotReady"
    assert response.headers["retry-after"] == "1"
