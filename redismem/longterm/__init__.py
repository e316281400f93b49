"""Long-term memory: the namespaced store and typed memories.

The store with versions and history (``store``), typed memory records
(``records``), the memories API over the store (``memories``), conflict
handling (``consolidation``) and extraction from conversations
(``extraction``).
"""
