"""Adapters that produce streams: the scripted offline adapter and real OpenAI-compatible providers."""

import typing as _typing

from chunktape._lazy import lazy_names as _lazy_names

# Loaded on first use (``__getattr__``), so the CLI and ``import chunktape`` need not load what they do not use.
if _typing.TYPE_CHECKING:
    from chunktape.providers._openai_compat import OpenAICompatAdapter
    from chunktape.providers._scripted import (
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

if not _typing.TYPE_CHECKING:  # type checkers see the imports above, and no __getattr__ hiding typos
    __getattr__, __dir__ = _lazy_names(
        __name__,
        __all__,
        (
            "chunktape.providers._scripted",
            "chunktape.providers._openai_compat",
        ),
    )
