"""Which requests are chat completions, and the model a route names: the routes the transports and ``serve`` answer.

A chat completion is a ``POST`` to a path ending in ``/chat/completions``: OpenAI's ``/v1/chat/completions``, a
provider's ``/chat/completions`` (DeepSeek), an OpenAI-compatible gateway's ``/api/v1/...`` (OpenRouter) or
``/openai/v1/...`` (Groq), and Azure OpenAI's ``/openai/deployments/{deployment}/chat/completions?api-version=...``,
whose body may name no model: the deployment is the model then, in recording as in matching.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

__all__ = ["AZURE_ROUTE", "CHAT_PATH", "is_chat", "route_model"]

CHAT_PATH = "/chat/completions"
"""Requests to a path ending like this are chat completions (``/v1/chat/completions``, ``/openai/...``)."""

AZURE_ROUTE = "/openai/deployments/{deployment}/chat/completions"
"""Azure OpenAI's chat-completions route (the replay server answers it, with or without ``api-version``)."""

_AZURE = re.compile(r"/openai/deployments/(?P<deployment>[^/]+)/chat/completions$")


def is_chat(method: str, path: str) -> bool:
    """Whether a request to ``path`` with ``method`` is a chat completion."""
    return method == "POST" and path.endswith(CHAT_PATH)


def route_model(path: str) -> str | None:
    """The model a route names: Azure's deployment (URL-decoded), else None (the body names it)."""
    found = _AZURE.search(path) if "/deployments/" in path else None  # no search for the other routes
    return None if found is None else unquote(found["deployment"])
