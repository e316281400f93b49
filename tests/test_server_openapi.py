"""The committed OpenAPI document (``docs/openapi.json``) is the app's.

After changing a route or a model, regenerate it:

    python -m redismem.server.openapi > docs/openapi.json
"""

from __future__ import annotations

import json
from pathlib import Path

from redismem.server.openapi import document, render

COMMITTED = Path(__file__).resolve().parents[1] / "docs" / "openapi.json"
REGENERATE = "python -m redismem.server.openapi > docs/openapi.json"


def test_the_committed_openapi_document_is_the_apps() -> None:
    committed = json.loads(COMMITTED.read_text(encoding="utf-8"))
    current = document()
    added = sorted(set(current["paths"]) - set(committed["paths"]))
    removed = sorted(set(committed["paths"]) - set(current["paths"]))
    assert (added, removed) == ([], []), f"routes changed: regenerate with {REGENERATE}"
    assert committed == current, f"docs/openapi.json drifted from the app: {REGENERATE}"
    assert COMMITTED.read_text(encoding="utf-8") == render(), f"regenerate with {REGENERATE}"


def test_every_api_route_says_how_to_send_a_key_and_takes_its_namespace() -> None:
    current = document()
    schemes = current["components"]["securitySchemes"]
    assert schemes["HTTPBearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "an API key, rmk_<id>_<secret>",
    }
    assert schemes["APIKeyHeader"]["name"] == "X-API-Key"
    operations = [
        (path, operation)
        for path, item in current["paths"].items()
        if path.startswith("/v1/namespaces/{namespace}/")
        for operation in item.values()
    ]
    assert operations
    for path, operation in operations:
        assert operation["security"] == [{"HTTPBearer": []}, {"APIKeyHeader": []}], path
        names = [p["name"] for p in operation.get("parameters", []) if p["in"] == "path"]
        assert "namespace" in names, path


def test_the_error_body_is_documented_on_the_session_and_recall_routes() -> None:
    paths = document()["paths"]
    append = paths["/v1/namespaces/{namespace}/users/{user_id}/sessions/{session_id}/messages"]
    responses = append["post"]["responses"]
    assert set(responses) >= {"201", "401", "403", "404", "422", "429", "503"}
    assert responses["503"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorBody"
    }
    headers = [p["name"] for p in append["post"]["parameters"] if p["in"] == "header"]
    assert headers == ["Idempotency-Key"]
