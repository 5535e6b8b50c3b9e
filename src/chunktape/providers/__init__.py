"""Adapters that produce streams: the scripted offline adapter and real providers (OpenAI-compatible chat
completions, Anthropic Messages, OpenAI Responses)."""

import typing as _typing

from chunktape._lazy import lazy_names as _lazy_names

# Loaded on first use (``__getattr__``), so the CLI and ``import chunktape`` need not load what they do not use.
if _typing.TYPE_CHECKING:
    from chunktape.providers._anthropic import AnthropicAdapter
    from chunktape.providers._openai_compat import OpenAICompatAdapter
    from chunktape.providers._openai_responses import OpenAIResponsesAdapter
    from chunktape.providers._scripted import (
        ScriptedAdapter,
        ScriptedError,
        ScriptedToolCall,
        ScriptedTurn,
        script_chunks,
    )

__all__ = [
    "AnthropicAdapter",
    "OpenAICompatAdapter",
    "OpenAIResponsesAdapter",
    "ScriptedAdapter",
    "ScriptedError",
    "ScriptedToolCall",
    "ScriptedTurn",
    "script_chunks",
]

if not _typing.TYPE_CHECKING:  # type checkers see the imports above, and no __getattr__ hiding typos
    __getattr__, __dir__ = _lazy_names(
        __name__,
        __all__,
        (
            "chunktape.providers._scripted",
            "chunktape.providers._openai_compat",
            "chunktape.providers._anthropic",
            "chunktape.providers._openai_responses",
        ),
    )
