"""The Redis layer every feature builds on.

URLs and connections (``urls``, ``connection``), the retry policy
(``retry``), the pipelined transport and its reply futures (``transport``,
``replies``), the key layout (``keys``), the Lua script registry and its
runner (``scripts``, scripts in ``redismem/lua/``), the user guard that makes
clears final (``guard``), the stored-value codec (``codec``) and the job queue
(``queue``). ``Backend`` (``backend``) holds them together for the features.
"""
