"""redismem workers: arq settings and jobs for queue-driven summarization (next issue)."""
