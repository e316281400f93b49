"""Adapters that put redismem behind the memory interfaces of agent frameworks.

Each adapter is an optional extra, in its own module, imported by path (this
package imports no framework)::

    from redismem.adapters.langchain import RedisMemChatMessageHistory  # redismem[langchain]
    from redismem.adapters.llamaindex import RedisMemChatStore  # redismem[llamaindex]

Importing an adapter whose framework is not installed raises
``redismem.MissingDependency`` naming the extra to install.

Both adapters are thin over ``Memory``: a framework session is a redismem
session, a framework message a redismem ``Message``, and whatever a message
carries that redismem has no field for goes into its ``metadata`` under one
reserved key (``"langchain"`` or ``"llama_index"``). A message that would not
come back exactly is rejected with ``InvalidInput`` before anything is
written. An adapter stores exactly what its framework gives it (system
messages too), or raises; it never drops a message, and a read without a
bound returns exactly what is stored. Retention is the framework's: nothing
an adapter writes expires unless the adapter is given a ``ttl`` (see
``_retention``).

Their async methods run on the ``Memory`` passed in. Their sync methods (the
frameworks call them, from a worker thread or inside a running event loop
such as a notebook's) run on one background event-loop thread shared by the
process, through a second ``Memory`` opened with the same configuration (a
``Memory`` is bound to the event loop it was created on); see ``_sync``.
"""
