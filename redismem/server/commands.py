"""The server's commands: ``redismem serve``, ``redismem keys`` and ``redismem mcp``.

``redismem/cli.py`` adds them with ``add_commands(sub)``. Nothing heavy is
imported here: FastAPI and uvicorn only when a command runs, with a
``MissingDependency`` naming ``redismem[server]`` when they are absent.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

from redismem import env
from redismem.errors import InvalidInput

__all__ = ["add_commands"]


def _verbose(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="log at INFO level"
    )


def _whole(minimum: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {text}")
        return value

    parse.__name__ = "int"
    return parse


def _examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines) + "\n"


_RAW = argparse.RawDescriptionHelpFormatter


def _fill(text: str) -> str:
    return textwrap.fill(text, 79)


def add_commands(sub: Any) -> None:
    """Add ``serve`` and ``keys`` to the ``redismem`` command's subparsers."""
    serve = sub.add_parser(
        "serve",
        help="serve the memory over HTTP (needs redismem[server])",
        description=_fill(
            "Serve the HTTP API (/v1), /healthz and /readyz with uvicorn. Every request "
            "needs an API key of the path's namespace (redismem keys create). SIGTERM stops "
            "accepting connections and lets the requests in flight finish (--shutdown-timeout). "
            "TLS belongs to a reverse proxy in front (see deploy/)."
        ),
        epilog=_examples(
            "redismem keys create --namespace prod --role write --file keys.txt",
            "REDISMEM_API_KEYS_FILE=keys.txt redismem serve --host 0.0.0.0 --port 8080",
            "redismem serve --insecure-no-auth --namespace dev      # loopback only",
        )
        + "\n"
        + env.describe(env.SERVER_VARIABLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("--url", help="memory Redis URL (default $REDISMEM_URL)")
    serve.add_argument(
        "--queue-url", help="queue Redis URL (default $REDISMEM_QUEUE_URL, else the memory URL)"
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    serve.add_argument("--port", type=_whole(1), default=8080, help="port (8080)")
    serve.add_argument(
        "--workers",
        type=_whole(1),
        default=1,
        help="server processes (1), each with its app. With more than one, /metrics adds up "
        "every process's whichever answers: their values go to files in "
        "$PROMETHEUS_MULTIPROC_DIR (an empty directory) or, when it is not set, in a private "
        "temporary directory made at start and removed at exit",
    )
    serve.add_argument(
        "--namespace",
        action="append",
        metavar="NS",
        help="a namespace to serve (repeat for more; default $REDISMEM_NAMESPACE, comma "
        "separated, else redismem)",
    )
    serve.add_argument(
        "--keys-file", metavar="FILE", help="API keys file (default $REDISMEM_API_KEYS_FILE)"
    )
    serve.add_argument(
        "--max-body-bytes",
        type=_whole(1),
        metavar="N",
        help="largest request body (default $REDISMEM_SERVER_MAX_BODY, else 1 MiB)",
    )
    serve.add_argument(
        "--rate",
        type=_whole(0),
        metavar="N",
        help="requests per second per API key and process (default $REDISMEM_SERVER_RATE, "
        "else 1000; 0: no limit)",
    )
    serve.add_argument(
        "--burst",
        type=_whole(1),
        metavar="N",
        help="requests a key may make at once (default $REDISMEM_SERVER_BURST, else 2 x rate)",
    )
    serve.add_argument(
        "--shutdown-timeout",
        type=float,
        default=25.0,
        metavar="SECONDS",
        help="on SIGTERM, how long requests in flight may take to finish (25); those "
        "still running then get 503 with Retry-After (and a write its write id)",
    )
    serve.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="serve without API keys, every caller an admin of every namespace; only on a "
        "loopback --host, in one process",
    )
    _verbose(serve)
    serve.set_defaults(run=_serve)

    keys = sub.add_parser(
        "keys",
        help="the server's API keys",
        description=_fill(
            "Make and list the API keys redismem serve accepts. The keys file holds "
            "their hashes only: a key is shown once, when it is made."
        ),
        epilog=_examples(
            "redismem keys create --namespace prod --role read --name dashboards",
            "redismem keys list --file /etc/redismem/keys",
        ),
        formatter_class=_RAW,
    )
    actions = keys.add_subparsers(dest="keys_command", required=True)
    create = actions.add_parser(
        "create",
        help="make an API key: prints it once and appends its hash to the keys file",
        description=_fill(
            "Make an API key for one namespace and role: the key goes to stdout "
            "(once, never again), its hash to the keys file."
        ),
        epilog=_examples(
            "redismem keys create --namespace prod --role write --name agents",
            "redismem keys create --namespace prod --role admin --file keys.txt > admin.key",
        ),
        formatter_class=_RAW,
    )
    create.add_argument("--namespace", required=True, help="the namespace the key is for")
    create.add_argument(
        "--role",
        required=True,
        choices=("read", "write", "admin"),
        help="read: reads and searches; write: + writes, clears of a session, flush; "
        "admin: + clear_user, export, import, purge",
    )
    create.add_argument("--name", default="", help="what the key is for (shown in the file)")
    create.add_argument(
        "--file", metavar="FILE", help="keys file (default $REDISMEM_API_KEYS_FILE)"
    )
    _verbose(create)
    create.set_defaults(run=_keys_create)
    listing = actions.add_parser(
        "list",
        help="the keys of the keys file (never the keys)",
        description=_fill("One line per key of the keys file: its id, namespace, role and name."),
        epilog=_examples("redismem keys list", "redismem keys list --file keys.txt"),
        formatter_class=_RAW,
    )
    listing.add_argument(
        "--file", metavar="FILE", help="keys file (default $REDISMEM_API_KEYS_FILE)"
    )
    _verbose(listing)
    listing.set_defaults(run=_keys_list)

    mcp = sub.add_parser(
        "mcp",
        help="serve the memory as MCP tools over stdio, for desktop and IDE agents",
        description=_fill(
            "Serve the memory's MCP tools over stdin/stdout until the client closes "
            "them: the command an MCP client (Claude Desktop, Cursor...) starts. Redis is "
            "connected on the first tool call. Over HTTP, redismem serve has them at /mcp. "
            "See docs/mcp.md."
        ),
        epilog=_examples(
            "redismem mcp --url redis://localhost:6379/0 --user alice",
            "REDISMEM_URL=redis://localhost:6379/0 redismem mcp --namespace team",
        ),
        formatter_class=_RAW,
    )
    mcp.add_argument("--url", help="memory Redis URL (default $REDISMEM_URL)")
    mcp.add_argument(
        "--queue-url", help="queue Redis URL (default $REDISMEM_QUEUE_URL, else the memory URL)"
    )
    mcp.add_argument("--namespace", help="namespace (default $REDISMEM_NAMESPACE or redismem)")
    mcp.add_argument(
        "--user", default="default", help="the tools' default user id (default 'default')"
    )
    _verbose(mcp)
    mcp.set_defaults(run=_mcp)


def _keys_file(args: argparse.Namespace) -> Path:
    path = args.file or env.text("REDISMEM_API_KEYS_FILE")
    if not path:
        raise InvalidInput("no keys file: pass --file or set REDISMEM_API_KEYS_FILE")
    return Path(path)


def _keys_create(args: argparse.Namespace) -> int:
    from redismem.server.apikeys import create_key

    path = _keys_file(args)
    key, record = create_key(path, namespace=args.namespace, role=args.role, name=args.name)
    print(key)
    print(
        f"key {record.id} ({record.role} on namespace {record.namespace}) added to {path}; "
        "this is the only time the key is shown",
        file=sys.stderr,
    )
    return 0


def _keys_list(args: argparse.Namespace) -> int:
    from redismem.server.apikeys import load_keys

    path = _keys_file(args)
    for record in load_keys(path).values():
        print(f"{record.id}  {record.namespace}  {record.role}  {record.name}".rstrip())
    return 0


def _mcp(args: argparse.Namespace) -> int:
    import asyncio

    from redismem.server.mcp import serve_stdio

    options: dict[str, Any] = {}
    if args.queue_url:
        options["queue_url"] = args.queue_url
    queue_name = env.text("REDISMEM_QUEUE_NAME")
    if queue_name:
        options["queue_name"] = queue_name  # the workers' queue: clients must match
    asyncio.run(serve_stdio(url=args.url, namespace=args.namespace, user_id=args.user, **options))
    return 0


def _serve(args: argparse.Namespace) -> int:
    from redismem.server import require_server_extra

    require_server_extra()
    import uvicorn

    from redismem.server.app import create_app
    from redismem.server.settings import ServerSettings

    keys_file = args.keys_file or env.text("REDISMEM_API_KEYS_FILE")
    settings = ServerSettings.from_env(
        url=args.url,
        queue_url=args.queue_url,
        namespaces=tuple(args.namespace) if args.namespace else None,
        keys_file=str(Path(keys_file).resolve()) if keys_file else None,
        max_body_bytes=args.max_body_bytes,
        rate=args.rate,
        burst=args.burst,
        host=args.host,
        port=args.port,
        workers=args.workers,
        shutdown_timeout=args.shutdown_timeout,
        insecure_no_auth=args.insecure_no_auth or None,
    )
    verbose = bool(getattr(args, "verbose", False))
    options: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "timeout_graceful_shutdown": settings.shutdown_timeout,
        "log_config": None,  # the command's logging (cli.main) applies
        "access_log": verbose,
        "server_header": False,
        "lifespan": "on",
    }
    app: Any
    private_metrics: str | None = None
    if settings.workers > 1:
        # Each process builds its app from the environment it inherits.
        env.export(settings.to_env())
        create_app(settings)  # a bad keys file fails here, once, not in each process
        if env.prometheus_multiproc_dir() is None:
            private_metrics = _private_metrics_dir(settings.workers)
        app = "redismem.server.app:create_app_from_env"
        options.update(factory=True, workers=settings.workers)
    else:
        app = create_app(settings)
    where = f"http://{settings.host}:{settings.port}"
    mode = " WITHOUT API KEYS (--insecure-no-auth)" if settings.insecure_no_auth else ""
    print(
        f"redismem: serving namespace(s) {', '.join(settings.namespaces)} on {where}{mode} "
        f"({settings.workers} process{'es' if settings.workers > 1 else ''})",
        file=sys.stderr,
        flush=True,
    )
    # uvicorn stops gracefully on SIGTERM, then raises the signal again for the
    # handler it found in place: with this one the command exits 0 (a stop that
    # was asked for is no failure, for systemd, Kubernetes or a script).
    signal.signal(signal.SIGTERM, _stopped)
    try:
        uvicorn.run(app, **options)
    finally:
        if private_metrics is not None:
            shutil.rmtree(private_metrics, ignore_errors=True)
    return 0


def _private_metrics_dir(processes: int) -> str:
    """A fresh directory (mode 0700) for prometheus-client's multiprocess
    mode, set as ``PROMETHEUS_MULTIPROC_DIR`` for the server's processes
    (started after this), so that ``/metrics`` adds up all of them; the
    caller removes it at exit."""
    directory = tempfile.mkdtemp(prefix="redismem-metrics-")
    env.set_prometheus_multiproc_dir(directory)
    print(
        f"redismem: the {processes} processes' metrics are merged through "
        f"PROMETHEUS_MULTIPROC_DIR={directory} (made for this run, removed at exit)",
        file=sys.stderr,
        flush=True,
    )
    return directory


def _stopped(signum: int, frame: Any) -> None:
    """SIGTERM once uvicorn has shut down: nothing left to do."""
