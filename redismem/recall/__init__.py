"""Recall: search over everything a user's agents said.

Text to index terms (``terms``), ranking (``ranking``: BM25 and fusion), the
index the workers maintain and its search (``index``) and optional embeddings
(``embeddings``).
"""
