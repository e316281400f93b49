"""Summarization, run by the workers: the pass (``job``) and the summarizers."""
