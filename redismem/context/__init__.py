"""Building what a model reads: budgets, tool-call groups, strategies, providers.

Token counting (``tokens``), tool-call grouping
(``toolgroups``), history strategies (``strategies``), fencing remembered text
as data (``quoting``), context providers and their composition
(``providers``, ``composite``), the agent-facing memory (``agent_memory``) and
the one-call context builder (``builder``).
"""
