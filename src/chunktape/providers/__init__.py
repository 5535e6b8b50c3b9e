"""Adapters that produce streams: the scripted offline adapter (and, later, real providers)."""

from chunktape.providers.scripted import (
    ScriptedAdapter,
    ScriptedError,
    ScriptedToolCall,
    ScriptedTurn,
    script_chunks,
)

__all__ = ["ScriptedAdapter", "ScriptedError", "ScriptedToolCall", "ScriptedTurn", "script_chunks"]
