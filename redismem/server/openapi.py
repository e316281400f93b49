"""The API's OpenAPI document, as committed in ``docs/openapi.json``.

Regenerate it after changing a route or a model::

    python -m redismem.server.openapi > docs/openapi.json

``tests/test_server_openapi.py`` fails when the committed document and the
app's differ.
"""

from __future__ import annotations

import json
import sys
from typing import Any

__all__ = ["document", "main", "render"]


def document() -> dict[str, Any]:
    """The OpenAPI document of the app ``redismem serve`` runs (building the
    app connects to nothing)."""
    from redismem.server import create_app
    from redismem.server.settings import ServerSettings

    settings = ServerSettings(url="redis://127.0.0.1:6379/0", insecure_no_auth=True)
    openapi: dict[str, Any] = create_app(settings).openapi()
    return openapi


def render() -> str:
    """``document()`` as the committed file holds it."""
    return json.dumps(document(), indent=2, ensure_ascii=False) + "\n"


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
