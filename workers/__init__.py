"""redismem workers: arq settings and jobs for queue-driven summarization."""

from .settings import WorkerSettings

__all__ = ["WorkerSettings"]
