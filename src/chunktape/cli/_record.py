"""``chunktape record``: a live session against an OpenAI-compatible provider, recorded as it streams.

With tools, every tool-call turn is answered before anything else is sent (providers reject a user message
after unanswered tool calls): each result is typed on the terminal in ``--chat``, or computed by the callables
of ``--tools-module``; each execution is recorded in the cassette beside the model calls.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
import typer
from rich.console import Console

from chunktape._errors import LlmError
from chunktape._protocol import GenerateOptions, Message, StreamChunk, ToolSpec
from chunktape._secrets import redact_text
from chunktape.cli._common import (
    EXIT_INTERRUPTED,
    EXIT_RUNTIME,
    EXIT_USAGE,
    CliError,
    check_output_suffix,
    console,
    err_console,
)
from chunktape.cli._render import ChunkPrinter, tool_result_line
from chunktape.harness._conversation import MAX_TOOL_ROUNDS, Conversation
from chunktape.harness._events import ToolResultEvent
from chunktape.harness._tools import Tool
from chunktape.harness._tooltape import RecordingToolRunner
from chunktape.wire._openai_chat import (
    DEEPSEEK_BASE_URL,
    message_from_openai,
    options_from_openai_request,
)

if TYPE_CHECKING:
    pass

__all__ = ["record"]

_EXIT_WORDS = ("/exit", "/quit")


class _InputEnded(BaseException):
    """stdin ended while a tool result was asked for: stop, sending nothing more (not a tool failure)."""


_SECRET_ADVICE = "add --allow-secret VALUE (its value) to this chunktape record command"


def _read_json(path: Path, what: str) -> Any:
    from chunktape._limits import UnreadableFile, read_user_file

    try:
        return msgspec.json.decode(read_user_file(path))
    except UnreadableFile as exc:
        raise CliError(f"{what} file {exc}") from None
    except msgspec.DecodeError as exc:
        raise CliError(f"{what} file {path} is not valid JSON ({exc})") from None


def load_messages(path: Path) -> list[Message]:
    """A JSON list of messages in OpenAI's chat format, or an object with a ``messages`` list.

    Assistant ``tool_calls``, ``tool_call_id``, role ``developer`` and lists of content parts are understood (the
    library's ``message_from_openai``); anything else is a ``CliError`` naming the file and the message.
    """
    data = _read_json(path, "messages")
    if isinstance(data, dict) and "messages" in data:
        data = data["messages"]
    if not isinstance(data, list):
        raise CliError(f"messages file {path}: expected a JSON list of messages, got {type(data).__name__}")
    try:
        return [message_from_openai(item, f"messages[{position}]") for position, item in enumerate(data)]
    except LlmError as error:
        raise CliError(f"messages file {path}: {error.message}") from None


def load_tools(path: Path) -> list[ToolSpec]:
    """A JSON list of OpenAI tools (``{"type": "function", "function": {...}}``) or bare ``{"name", ...}`` specs."""
    data = _read_json(path, "tools")
    if isinstance(data, dict) and "tools" in data:
        data = data["tools"]
    if not isinstance(data, list):
        raise CliError(f"tools file {path}: expected a JSON list of tools, got {type(data).__name__}")
    wire = [
        item if not isinstance(item, dict) or "function" in item else {"type": "function", "function": item}
        for item in data
    ]
    try:
        return options_from_openai_request({"model": "-", "messages": [], "tools": wire}).tools
    except LlmError as error:
        raise CliError(f"tools file {path}: {error.message}") from None


def _without_secrets(error: LlmError, secrets: Sequence[str]) -> LlmError:
    """``error`` with credentials redacted from its message (a provider may echo the key in a 401 body)."""
    message = redact_text(error.message, secrets)
    hint = None if error.hint is None else redact_text(error.hint, secrets)
    if message == error.message and hint == error.hint:
        return error
    return LlmError(message, error.code, status=error.status, retry_after=error.retry_after, hint=hint)


def load_tools_module(spec: str) -> dict[str, Tool]:
    """``pkg.mod:TOOLS``: a mapping of tool names to callables, imported from the current directory or the path."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise CliError(f"--tools-module {spec!r}: expected pkg.module:NAME", EXIT_USAGE)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's module may fail in any way while importing
        raise CliError(f"--tools-module {spec!r}: cannot import {module_name} ({type(exc).__name__}: {exc})") from None
    tools = getattr(module, attribute, None)
    if not isinstance(tools, Mapping) or not all(isinstance(k, str) and callable(v) for k, v in tools.items()):
        raise CliError(f"--tools-module {spec!r}: {attribute} must be a mapping of tool names to callables")
    return dict(tools)


def _prompted_tools(specs: Sequence[ToolSpec], out: Console) -> dict[str, Tool]:
    """One tool per spec whose result is the line the user types for it."""

    def prompter(name: str) -> Callable[..., str]:
        def ask(**arguments: object) -> str:
            out.print(f"{name}({msgspec.json.encode(arguments).decode()}) result> ", style="bold", end="", markup=False)
            line = sys.stdin.readline()
            if not line:
                out.print()
                raise _InputEnded
            return line.rstrip("\r\n")

        return ask

    return {spec.name: prompter(spec.name) for spec in specs}


class _Screen:
    """What the person sees of a conversation: each reply as it streams, each tool result, each failure (with the
    credentials in use masked: a provider may echo the key in a 401 body)."""

    def __init__(self, out: Console, secrets: Sequence[str]) -> None:
        self.out = out
        self.secrets = secrets
        self.printer = ChunkPrinter(out)

    def chunk(self, chunk: StreamChunk) -> None:
        self.printer.feed(chunk)

    def tool_result(self, result: ToolResultEvent) -> None:
        self.printer.done()
        line = tool_result_line(result.name, result.content, is_error=result.is_error)
        self.out.print(line, style="dim", markup=False, soft_wrap=True)

    async def agent_turn(self, conversation: Conversation) -> LlmError | None:
        try:
            failure = await conversation.agent_turn()
        finally:
            self.printer.done()
        if failure is not None:
            failure = _without_secrets(failure, self.secrets)
            self.printer.error(failure)
        elif conversation.messages[-1].role == "tool":  # answered, but the model is not asked again
            self.out.print(f"(stopped after {MAX_TOOL_ROUNDS} tool-call turns in a row)", style="dim")
        return failure


def _read_user_line(out: Console) -> str | None:
    out.print("you> ", style="bold", end="")
    line = sys.stdin.readline()
    if not line:
        out.print()
        return None
    return line.rstrip("\r\n")


_DEFAULTS: Mapping[str, tuple[str, str, str]] = {
    "chat": (DEEPSEEK_BASE_URL, "deepseek-chat", "DEEPSEEK_API_KEY"),
    "anthropic": ("https://api.anthropic.com", "claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
    "responses": ("https://api.openai.com/v1", "gpt-5-mini", "OPENAI_API_KEY"),
}
"""Per wire protocol: the base URL, model and key variable ``record`` uses when none is given."""


def _protocol(given: str | None, base_url: str | None) -> str:
    """The wire protocol to record: the one given, else the one the base URL's host says (else chat)."""
    if given is not None:
        if given not in _DEFAULTS:
            raise CliError(f"--protocol must be one of {', '.join(_DEFAULTS)}, got {given!r}", EXIT_USAGE)
        return given
    from urllib.parse import urlsplit

    host = urlsplit(base_url or "").hostname or ""
    path = urlsplit(base_url or "").path.rstrip("/")
    if host.endswith("anthropic.com") or path.endswith("/messages"):
        return "anthropic"
    if path.endswith("/responses"):
        return "responses"
    return "chat"


def _adapter(protocol: str, base_url: str, api_key: str, model: str) -> Any:
    """The adapter that records ``protocol`` (httpx is imported only now, when recording)."""
    if protocol == "anthropic":
        from chunktape.providers._anthropic import AnthropicAdapter

        return AnthropicAdapter(base_url=base_url.removesuffix("/messages"), api_key=api_key, model=model)
    if protocol == "responses":
        from chunktape.providers._openai_responses import OpenAIResponsesAdapter

        return OpenAIResponsesAdapter(base_url=base_url.removesuffix("/responses"), api_key=api_key, model=model)
    from chunktape.providers._openai_compat import OpenAICompatAdapter

    return OpenAICompatAdapter(base_url=base_url, api_key=api_key, model=model)


def record(
    output: Annotated[Path, typer.Option("--output", "-o", help="The cassette to write (.msgpack or .json).")],
    prompt: Annotated[str | None, typer.Option("--prompt", "-p", help="The user message to send.")] = None,
    messages: Annotated[
        Path | None,
        typer.Option("--messages", help="A JSON file with the conversation to send, in OpenAI chat format."),
    ] = None,
    tools: Annotated[
        Path | None,
        typer.Option(
            "--tools",
            help="A JSON file with the tools to offer, in OpenAI format. With --chat, each tool call's result is "
            "asked for on the terminal (or computed with --tools-module) before the conversation goes on.",
        ),
    ] = None,
    tools_module: Annotated[
        str | None,
        typer.Option(
            "--tools-module",
            metavar="PKG.MOD:TOOLS",
            help="Compute tool results with this mapping of tool names to callables (needs --tools).",
        ),
    ] = None,
    chat: Annotated[
        bool, typer.Option("--chat", help="Interactive: read user turns from stdin until EOF or /exit.")
    ] = False,
    system: Annotated[str | None, typer.Option("--system", help="A system message to start with.")] = None,
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="The model to ask (default: the protocol's, deepseek-chat).")
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option("--base-url", help="The API base URL (default: DeepSeek, Anthropic or OpenAI by --protocol)."),
    ] = None,
    protocol: Annotated[
        str | None,
        typer.Option(
            "--protocol",
            help="The wire protocol: chat (OpenAI-compatible chat completions), anthropic (Messages) or responses "
            "(OpenAI Responses); default: inferred from --base-url (api.anthropic.com is anthropic, else chat).",
        ),
    ] = None,
    api_key_env: Annotated[
        str | None,
        typer.Option(
            "--api-key-env",
            help="The environment variable holding the API key (default: DEEPSEEK_API_KEY, ANTHROPIC_API_KEY or "
            "OPENAI_API_KEY by protocol).",
        ),
    ] = None,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", help="Cap the reply length.")] = None,
    temperature: Annotated[float | None, typer.Option("--temperature", help="Sampling temperature.")] = None,
    append: Annotated[bool, typer.Option("--append", help="Add to the cassette instead of replacing it.")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Write the cassette even when no call completed (every call failed).")
    ] = False,
    allow_secret: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-secret",
            metavar="VALUE",
            help="A value that looks like a credential but may stay in the cassette (repeatable).",
        ),
    ] = None,
) -> None:
    """Record a live session against a provider, streaming it to the terminal.

    The provider is DeepSeek (chat completions) unless --base-url names another API; --protocol anthropic records
    the Anthropic Messages API and --protocol responses the OpenAI Responses API (inferred from --base-url when
    not given: an anthropic.com host is anthropic).

    Give the input with --prompt, --messages FILE.json (and --tools FILE.json), or --chat for a multi-turn
    session on stdin (each turn is another interaction of the same cassette). With --tools, every tool call is
    answered before the conversation goes on: in --chat by the line you type for it, or by --tools-module
    pkg.mod:TOOLS; each tool execution is recorded in the cassette. Ctrl-C stops, keeps what was
    recorded (aside, as below, if no reply had completed), says where, and exits 130. The API key is read
    from --api-key-env and never written to the cassette or printed.

    A run in which no call completed (a down server, a wrong URL or key, Ctrl-C before the reply) writes no
    cassette unless --force: it is kept beside it as <name>.failed.<suffix>, and the exit code is 3. So is a
    recording that still holds a credential, with every credential replaced; --allow-secret VALUE keeps a
    value that only looks like one.

    Example: chunktape record --prompt "Say hello" -o hello.msgpack
    """
    if prompt is None and messages is None and not chat:
        raise CliError("give --prompt, --messages FILE or --chat", EXIT_USAGE)
    wire = _protocol(protocol, base_url)
    default_url, default_model, default_env = _DEFAULTS[wire]
    base_url = base_url or default_url
    model = model or default_model
    api_key_env = api_key_env or default_env
    check_output_suffix(output, "--output")
    history: list[Message] = []
    if system is not None:
        history.append(Message(role="system", content=system))
    if messages is not None:
        history.extend(load_messages(messages))
    if prompt is not None:
        history.append(Message(role="user", content=prompt))
    tool_specs = load_tools(tools) if tools is not None else []
    if tools_module is not None and tools is None:
        raise CliError("--tools-module needs --tools FILE (the tools the model is offered)", EXIT_USAGE)
    implementations = load_tools_module(tools_module) if tools_module is not None else None
    api_key = os.environ.get(api_key_env, "")
    if not api_key and not _loopback(base_url):  # a provider on this machine (a scripted one, a proxy) needs none
        raise CliError(f"no API key: set the environment variable {api_key_env} (or name another with --api-key-env)")
    if output.is_dir():
        raise CliError(f"{output} is a directory; give the cassette file name with -o")
    options = GenerateOptions(
        model=model, messages=history, tools=tool_specs, max_tokens=max_tokens, temperature=temperature
    )
    adapter = _adapter(wire, base_url, api_key, model)
    try:
        adapter.build_request_body(options)  # a conversation the provider cannot take fails here, unrecorded
    except LlmError as error:
        where = f"messages file {messages}: " if messages is not None else ""
        raise CliError(f"{where}cannot be sent: {error.message}") from None
    out = console()
    from chunktape._recorder import RecordingAdapter

    recorder = RecordingAdapter(adapter, output, append=append, allow_secrets=allow_secret or ())
    if implementations is None and chat and tool_specs:
        implementations = _prompted_tools(tool_specs, out)
    screen = _Screen(out, [api_key])  # redact_text adds the environment's credentials
    conversation = Conversation(
        recorder,
        options,
        tools=None if implementations is None else RecordingToolRunner(implementations, recorder.record_tool),
        on_chunk=screen.chunk,
        on_tool_result=screen.tool_result,
    )
    failure: LlmError | None = None
    interrupted = False
    with asyncio.Runner() as runner:
        try:
            if conversation.messages and conversation.messages[-1].role in ("user", "tool"):
                start = conversation.mark()
                failure = runner.run(screen.agent_turn(conversation))
                if failure is not None and chat:
                    conversation.rewind(start - 1)
            while chat:
                line = _read_user_line(out)
                if line is None or line.strip() in _EXIT_WORDS:
                    break
                if not line.strip():
                    continue
                start = conversation.mark()
                conversation.add(Message(role="user", content=line))
                turn_failure = runner.run(screen.agent_turn(conversation))
                if turn_failure is not None:
                    failure = turn_failure
                    conversation.rewind(start)  # the user can try again; the failure stays recorded
        except _InputEnded:
            pass
        except KeyboardInterrupt:
            interrupted = True
        finally:
            try:  # a run in which no call completed is kept aside unless --force: not the provider's answer
                written = recorder.save(failed=False if force else None, secret_advice=_SECRET_ADVICE)
            finally:
                runner.run(adapter.aclose())
    code = EXIT_INTERRUPTED if interrupted else EXIT_RUNTIME  # Ctrl-C: 130, once it said what it kept
    if recorder.written is not None and recorder.written != output:
        state = "was left as it was" if output.exists() else "was not written"
        reason = f": {failure}" if failure is not None else ": interrupted" if interrupted else ""
        raise CliError(
            f"no call completed{reason}; kept the failed recording in {recorder.written}, {output} {state} "
            "(--force writes it)",
            code,
        )
    if interrupted and written is None:
        state = "was left as it was" if output.exists() else "was not written"
        raise CliError(f"interrupted before anything was recorded; {output} {state}", code)
    count = 0 if written is None else len(written.interactions)
    note = "interrupted; kept" if interrupted else "saved"
    err_console().print(f"{note} {count} interaction(s) in {output}", style="dim", markup=False, soft_wrap=True)
    if interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)
    if failure is not None and not chat:
        raise CliError(str(failure))


def _loopback(base_url: str | None) -> bool:
    """Whether ``base_url`` is a provider on this machine (127.0.0.1, ::1, localhost)."""
    if base_url is None:
        return False
    import ipaddress
    from urllib.parse import urlsplit

    host = urlsplit(base_url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
