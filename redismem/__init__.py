"""redismem: shared, durable, fast memory for fleets of LLM agents, on plain Redis."""

from .client import Memory
from .config import MemoryConfig
from .errors import (
    ClientClosed,
    CorruptData,
    InvalidInput,
    MissingDependency,
    RedisMemError,
    StoreError,
    StoreUnavailable,
    SummarizerError,
)
from .keys import KeyLayout
from .models import (
    ROLES,
    Context,
    EntryMetadata,
    MemoryEntry,
    Message,
    Role,
    SessionInfo,
    Summary,
    ToolCall,
)
from .strategies import Hybrid, MemoryStrategy, SlidingWindow, StrategyResult, TokenBudget, Turns
from .summarizers import (
    KeyPointsSummarizer,
    LLMSummarizer,
    Summarizer,
    TruncationSummarizer,
    summarizer_from_env,
)
from .tokens import (
    MESSAGE_OVERHEAD_TOKENS,
    Tokenizer,
    default_tokenizer,
    estimate_messages_tokens,
    estimate_tokens,
    message_tokens,
    tiktoken_tokenizer,
    trim_to_token_budget,
)

__version__ = "0.1.0"

__all__ = [
    "ClientClosed",
    "Context",
    "CorruptData",
    "EntryMetadata",
    "Hybrid",
    "InvalidInput",
    "KeyLayout",
    "KeyPointsSummarizer",
    "LLMSummarizer",
    "MESSAGE_OVERHEAD_TOKENS",
    "Memory",
    "MemoryConfig",
    "MemoryEntry",
    "MemoryStrategy",
    "Message",
    "MissingDependency",
    "ROLES",
    "RedisMemError",
    "Role",
    "SessionInfo",
    "SlidingWindow",
    "StoreError",
    "StoreUnavailable",
    "StrategyResult",
    "Summarizer",
    "SummarizerError",
    "Summary",
    "TokenBudget",
    "Tokenizer",
    "ToolCall",
    "TruncationSummarizer",
    "Turns",
    "__version__",
    "default_tokenizer",
    "estimate_messages_tokens",
    "estimate_tokens",
    "message_tokens",
    "summarizer_from_env",
    "tiktoken_tokenizer",
    "trim_to_token_budget",
]
