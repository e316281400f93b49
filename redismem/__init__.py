"""redismem: shared, durable, fast memory for fleets of LLM agents, on plain Redis."""

from redismem._moved import install as _install_moved
from redismem.client import Memory
from redismem.config import MemoryConfig
from redismem.context.agent_memory import (
    SNAPSHOT_FORMAT,
    SNAPSHOT_VERSION,
    AgentMemory,
    AgentMemoryState,
    ManageResult,
    WindowStats,
)
from redismem.context.builder import BuiltContext, build_context
from redismem.context.composite import MERGE_MODES, CombinedProvider, MergeMode, merge_messages
from redismem.context.providers import (
    BufferMemory,
    LastTurnsMemory,
    MemoryProvider,
    SummarizingMemory,
)
from redismem.context.quoting import MEMORY_DATA_HEADER, fence, unfence
from redismem.context.strategies import (
    Hybrid,
    LastMessages,
    MemoryStrategy,
    StrategyResult,
    TokenBudget,
    Turns,
    trim_to_token_budget,
)
from redismem.context.tokens import (
    MESSAGE_OVERHEAD_TOKENS,
    Tokenizer,
    default_tokenizer,
    estimate_messages_tokens,
    estimate_tokens,
    message_tokens,
    tiktoken_tokenizer,
)
from redismem.core.keys import KeyLayout
from redismem.errors import (
    BackendError,
    BackendFull,
    BackendUnavailable,
    ClientClosed,
    ConfigurationError,
    CorruptData,
    EmbedderError,
    ExtractorError,
    InvalidInput,
    MissingDependency,
    RedisMemError,
    SummarizerError,
    VersionConflict,
)
from redismem.llm import ChatEndpoint, chat_endpoint_from_env
from redismem.longterm.consolidation import (
    Consolidator,
    Decision,
    KeepBothConsolidator,
    LLMConsolidator,
    consolidator_from_env,
)
from redismem.longterm.extraction import (
    Extractor,
    LLMExtractor,
    RuleExtractor,
    extractor_from_env,
)
from redismem.longterm.memories import AddOutcome, AddResult, Knowledge, MemoryHit
from redismem.longterm.records import (
    MEMORY_KINDS,
    SINGLE_VALUED_PREDICATES,
    Action,
    AgentTask,
    Document,
    DocumentChunk,
    Fact,
    Goal,
    MemoryBase,
    MemoryChange,
    MemoryKind,
    MemoryRecord,
    MemoryStatus,
    Provenance,
    Relationship,
)
from redismem.longterm.store import Item, ItemHistory, ItemVersion, LongTermStore, SearchItem
from redismem.models import (
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
from redismem.portability import USER_FORMAT, ImportReport, UserDocument, export_user, import_user
from redismem.recall.embeddings import Embedder, HashingEmbedder, MiniLMEmbedder
from redismem.summarization.summarizers import (
    KeyPointsSummarizer,
    LLMSummarizer,
    Summarizer,
    TruncationSummarizer,
    summarizer_from_env,
)
from redismem.sync import SyncMemory

__version__ = "0.1.0"

__all__ = [
    "Action",
    "AddOutcome",
    "AddResult",
    "AgentMemory",
    "AgentMemoryState",
    "AgentTask",
    "BackendError",
    "BackendFull",
    "BackendUnavailable",
    "BufferMemory",
    "BuiltContext",
    "ChatEndpoint",
    "ClientClosed",
    "CombinedProvider",
    "ConfigurationError",
    "Consolidator",
    "Context",
    "CorruptData",
    "Decision",
    "Document",
    "DocumentChunk",
    "Embedder",
    "EmbedderError",
    "EntryMetadata",
    "Extractor",
    "ExtractorError",
    "Fact",
    "Goal",
    "HashingEmbedder",
    "Hit",
    "Hybrid",
    "ImportReport",
    "InvalidInput",
    "Item",
    "ItemHistory",
    "ItemVersion",
    "KeepBothConsolidator",
    "KeyLayout",
    "KeyPointsSummarizer",
    "Knowledge",
    "LLMConsolidator",
    "LLMExtractor",
    "LLMSummarizer",
    "LastMessages",
    "LastTurnsMemory",
    "LongTermStore",
    "MEMORY_DATA_HEADER",
    "MEMORY_KINDS",
    "MERGE_MODES",
    "MESSAGE_OVERHEAD_TOKENS",
    "ManageResult",
    "Memory",
    "MemoryBase",
    "MemoryChange",
    "MemoryConfig",
    "MemoryEntry",
    "MemoryHit",
    "MemoryKind",
    "MemoryProvider",
    "MemoryRecord",
    "MemoryStatus",
    "MemoryStrategy",
    "MergeMode",
    "Message",
    "MiniLMEmbedder",
    "MissingDependency",
    "Provenance",
    "ROLES",
    "RedisMemError",
    "Relationship",
    "Role",
    "RuleExtractor",
    "SINGLE_VALUED_PREDICATES",
    "SNAPSHOT_FORMAT",
    "SNAPSHOT_VERSION",
    "SearchItem",
    "SessionInfo",
    "StrategyResult",
    "Summarizer",
    "SummarizerError",
    "SummarizingMemory",
    "Summary",
    "SyncMemory",
    "TokenBudget",
    "Tokenizer",
    "ToolCall",
    "TruncationSummarizer",
    "Turns",
    "USER_FORMAT",
    "UserDocument",
    "VersionConflict",
    "WindowStats",
    "__version__",
    "build_context",
    "chat_endpoint_from_env",
    "consolidator_from_env",
    "default_tokenizer",
    "estimate_messages_tokens",
    "estimate_tokens",
    "export_user",
    "extractor_from_env",
    "fence",
    "import_user",
    "merge_messages",
    "message_tokens",
    "summarizer_from_env",
    "tiktoken_tokenizer",
    "trim_to_token_budget",
    "unfence",
]


def __getattr__(name: str) -> object:
    from redismem._moved import renamed

    return renamed(__name__, name, globals())


_install_moved()
