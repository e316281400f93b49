"""redismem: shared, durable, fast memory for fleets of LLM agents, on plain Redis."""

from .agent_memory import (
    SNAPSHOT_FORMAT,
    SNAPSHOT_VERSION,
    AgentMemory,
    AgentMemoryState,
    ManageResult,
    WindowStats,
)
from .client import Memory
from .composite import MERGE_MODES, CompositeMemory, MergeMode, merge_messages
from .config import MemoryConfig
from .context_builder import BuiltContext, build_context
from .embeddings import Embedder, HashingEmbedder, MiniLMEmbedder
from .errors import (
    ClientClosed,
    CorruptData,
    EmbedderError,
    InvalidInput,
    MissingDependency,
    RedisMemError,
    StoreError,
    StoreFull,
    StoreUnavailable,
    SummarizerError,
)
from .fencing import MEMORY_DATA_HEADER, fence, unfence
from .keys import KeyLayout
from .models import (
    ROLES,
    Context,
    EntryMetadata,
    Hit,
    MemoryEntry,
    Message,
    Role,
    SessionInfo,
    Summary,
    ToolCall,
)
from .providers import BufferMemory, MemoryProvider, SlidingWindowMemory, SummarizingMemory
from .store import Item, ItemVersion, LongTermStore, SearchItem
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
    "AgentMemory",
    "AgentMemoryState",
    "BufferMemory",
    "BuiltContext",
    "ClientClosed",
    "CompositeMemory",
    "Context",
    "CorruptData",
    "Embedder",
    "EmbedderError",
    "EntryMetadata",
    "HashingEmbedder",
    "Hit",
    "Hybrid",
    "InvalidInput",
    "Item",
    "ItemVersion",
    "KeyLayout",
    "KeyPointsSummarizer",
    "LLMSummarizer",
    "LongTermStore",
    "MEMORY_DATA_HEADER",
    "MERGE_MODES",
    "MESSAGE_OVERHEAD_TOKENS",
    "ManageResult",
    "Memory",
    "MemoryConfig",
    "MemoryEntry",
    "MemoryProvider",
    "MemoryStrategy",
    "MergeMode",
    "Message",
    "MiniLMEmbedder",
    "MissingDependency",
    "ROLES",
    "RedisMemError",
    "Role",
    "SNAPSHOT_FORMAT",
    "SNAPSHOT_VERSION",
    "SearchItem",
    "SessionInfo",
    "SlidingWindow",
    "SlidingWindowMemory",
    "StoreError",
    "StoreFull",
    "StoreUnavailable",
    "StrategyResult",
    "Summarizer",
    "SummarizerError",
    "SummarizingMemory",
    "Summary",
    "TokenBudget",
    "Tokenizer",
    "ToolCall",
    "TruncationSummarizer",
    "Turns",
    "WindowStats",
    "__version__",
    "build_context",
    "default_tokenizer",
    "estimate_messages_tokens",
    "estimate_tokens",
    "fence",
    "merge_messages",
    "message_tokens",
    "summarizer_from_env",
    "tiktoken_tokenizer",
    "trim_to_token_budget",
    "unfence",
]
