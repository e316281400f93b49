"""A throwaway ``redis-server`` on a free loopback port (benchmarks).

Never used implicitly by the library: only the benchmark
scripts start one, and they stop it when done.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass

__all__ = ["LocalRedis", "free_port", "redis_server_binary"]


def redis_server_binary() -> str | None:
    return shutil.which("redis-server") or shutil.which("valkey-server")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class LocalRedis:
    """``with LocalRedis.start() as server: server.url``."""

    process: subprocess.Popen[bytes]
    port: int
    directory: tempfile.TemporaryDirectory[str]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @classmethod
    def start(cls, binary: str | None = None, timeout: float = 10.0) -> LocalRedis:
        binary = binary or redis_server_binary()
        if binary is None:
            raise FileNotFoundError("no redis-server (or valkey-server) on PATH")
        port = free_port()
        directory = tempfile.TemporaryDirectory(prefix="redismem-redis-")
        process = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                directory.name,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        server = cls(process, port, directory)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return server
            except OSError:
                time.sleep(0.05)
        server.stop()
        raise TimeoutError(f"redis-server did not answer on port {port} within {timeout}s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.directory.cleanup()

    def __enter__(self) -> LocalRedis:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
