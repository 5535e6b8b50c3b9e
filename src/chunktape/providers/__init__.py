"""Adapters that produce streams: the scripted offline adapter and real OpenAI-compatible providers."""

from chunktape.providers.openai_compat import OpenAICompatAdapter
from chunktape.providers.scripted import (
    ScriptedAdapter,
    ScriptedError,
    ScriptedToolCall,
    ScriptedTurn,
    script_chunks,
)

__all__ = [
    "OpenAICompatAdapter",
    "ScriptedAdapter",
    "ScriptedError",
    "ScriptedToolCall",
    "ScriptedTurn",
    "script_chunks",
]
