"""The Redis layer every feature builds on.

URLs and connections, the retry policy and error mapping (``urls``,
``connection``; ``local``: the server of a ``local://PATH`` URL), the
multiplexed transport and its reply futures (``transport``, ``replies``), the
key layout (``keys``), the Lua scripts' registry (``lua``, the scripts in
``redismem/lua/``) and their one runner (``scripts``), each user's epoch and
the guard that makes clears final (``epochs``, ``guard``), the stored-value
codec (``codec``) and the job queue (``queue``). ``Backend`` (``backend``)
holds them together for the features.
"""
