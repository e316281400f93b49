"""Extraction of typed memories from conversations, run by the workers.

The extractors (rule-based and LLM) and the worker pass that runs them
(``job``).
"""
