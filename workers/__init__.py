"""arq entry point for a checkout: ``arq workers.WorkerSettings``.

The worker code lives, and is installed, in ``redismem.workers``; this folder
is not part of the wheel (installed, use ``redismem worker`` or ``arq
redismem.workers.WorkerSettings``). ``WorkerSettings`` is built from the
environment when arq imports this module.
"""

from redismem.workers import WorkerSettings

__all__ = ["WorkerSettings"]
