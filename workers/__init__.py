"""arq entry point for a checkout: ``arq workers.WorkerSettings``.

The worker code lives, and is installed, in ``redismem.workers``; this folder
is not part of the wheel (installed, use ``redismem worker`` or ``arq
redismem.workers.WorkerSettings``). ``WorkerSettings`` is built from the
environment when arq imports this module. arq's CLI takes no Worker class
from its settings; looking ``WorkerSettings`` up makes that CLI build a
``redismem.workers.run.MemoryWorker`` (``use_in_arq_cli``), as ``redismem
worker`` does.
"""

from redismem.workers import WorkerSettings

__all__ = ["WorkerSettings"]
