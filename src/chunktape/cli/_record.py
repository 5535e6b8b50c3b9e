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
from chunktape._protocol import GenerateOptions, Message, ToolSpec
from chunktape._secrets import redact_text
from chunktape.cli._common import EXIT_USAGE, CliError, check_output_suffix, console, err_console
from chunktape.cli._render import ChunkPrinter, tool_result_line
from chunktape.harness._events import ToolCallEvent, ToolResultEvent
from chunktape.harness._tools import Tool, tool_error
from chunktape.harness._tooltape import RecordingToolRunner
from chunktape.wire._openai_chat import (
    DEEPSEEK_BASE_URL,
    message_from_openai,
    options_from_openai_request,
    options_to_openai_request,
)

if TYPE_CHECKING:
    from chunktape._recorder import RecordingAdapter

__all__ = ["record"]

_EXIT_WORDS = ("/exit", "/quit")
_MAX_TOOL_ROUNDS = 25
"""Tool-call turns answered in a row before the user is asked again (a model that never stops calling tools)."""


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


class _Session:
    """One recording session: the conversation so far, the recorder every turn goes through, and the runner (if
    any) that answers tool calls."""

    def __init__(
        self,
        recorder: RecordingAdapter,
        out: Console,
        options: GenerateOptions,
        secrets: Sequence[str],
        tools: Mapping[str, Tool] | None = None,
    ) -> None:
        self.recorder = recorder
        self.out = out
        self.options = options
        self.secrets = secrets
        self.runner = None if tools is None else RecordingToolRunner(tools, recorder.record_tool)

    async def turn(self) -> LlmError | None:
        """Stream one reply to the conversation so far, live; the reply joins the conversation."""
        printer = ChunkPrinter(self.out)
        try:
            async for chunk in self.recorder.stream(self.options):
                printer.feed(chunk)
        except LlmError as error:
            shown = _without_secrets(error, self.secrets)
            printer.error(shown)
            return shown
        finally:
            printer.done()
        said = printer.reply
        reply = Message(
            role="assistant",
            content=said.text or None,
            tool_calls=said.tool_calls,
            # DeepSeek wants the reasoning back only on tool-call turns.
            reasoning_content=(said.reasoning or None) if said.tool_calls else None,
        )
        self.add(reply)
        return None

    async def agent_turn(self) -> LlmError | None:
        """A model turn, then (with a tool runner) its tool results and the next model turn, until one makes no
        tool calls: every tool call is answered before the user is asked again."""
        for _ in range(_MAX_TOOL_ROUNDS):
            failure = await self.turn()
            last = self.options.messages[-1]
            if failure is not None or self.runner is None or last.role != "assistant" or not last.tool_calls:
                return failure
            for result in await self._answer(last):
                line = tool_result_line(result.name, result.content, is_error=result.is_error)
                self.out.print(line, style="dim", markup=False, soft_wrap=True)
                self.add(Message(role="tool", tool_call_id=result.tool_call_id, content=result.content))
        self.out.print(f"(stopped after {_MAX_TOOL_ROUNDS} tool-call turns in a row)", style="dim")
        return None

    async def _answer(self, reply: Message) -> list[ToolResultEvent]:
        assert self.runner is not None
        calls: list[ToolCallEvent] = []
        bad: dict[int, ToolResultEvent] = {}
        for index, block in enumerate(reply.tool_calls):
            try:
                calls.append(ToolCallEvent.from_block(block, index))
            except LlmError as error:  # the model's arguments are not a JSON object: tell it so
                call = ToolCallEvent(
                    id=block.id, name=block.name, arguments={}, raw_arguments=block.arguments, index=index
                )
                bad[index] = tool_error(call, error.message)
        answered = iter(await self.runner.run_turn(calls))
        results = [bad[index] if index in bad else next(answered) for index in range(len(reply.tool_calls))]
        return [result for result in results if result is not None]

    def mark(self) -> int:
        return len(self.options.messages)

    def rewind(self, mark: int) -> None:
        """Back to the conversation as it was at ``mark`` (a failed turn: the user can try again)."""
        self.options = msgspec.structs.replace(self.options, messages=self.options.messages[:mark])

    def add(self, message: Message) -> None:
        self.options = msgspec.structs.replace(self.options, messages=[*self.options.messages, message])


def _read_user_line(out: Console) -> str | None:
    out.print("you> ", style="bold", end="")
    line = sys.stdin.readline()
    if not line:
        out.print()
        return None
    return line.rstrip("\r\n")


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
    model: Annotated[str, typer.Option("--model", "-m", help="The model to ask.")] = "deepseek-chat",
    base_url: Annotated[
        str, typer.Option("--base-url", help="The OpenAI-compatible API base URL.")
    ] = DEEPSEEK_BASE_URL,
    api_key_env: Annotated[
        str, typer.Option("--api-key-env", help="The environment variable holding the API key.")
    ] = "DEEPSEEK_API_KEY",
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
    """Record a live session against an OpenAI-compatible provider, streaming it to the terminal.

    The provider is DeepSeek unless --base-url names another OpenAI-compatible API.
    Give the input with --prompt, --messages FILE.json (and --tools FILE.json), or --chat for a multi-turn
    session on stdin (each turn is another interaction of the same cassette). With --tools, every tool call is
    answered before the conversation goes on: in --chat by the line you type for it, or by --tools-module
    pkg.mod:TOOLS; each tool execution is recorded in the cassette. Ctrl-C stops and keeps what was
    recorded (aside, as below, if no reply had completed). The API key is read from --api-key-env and never
    written to the cassette or printed.
    A run in which no call completed (a down server, a wrong URL or key, Ctrl-C before the reply) writes no
    cassette unless --force: it is kept beside it as <name>.failed.<suffix>, and the exit code is 3. So is a
    recording that still holds a credential, with every credential replaced; --allow-secret VALUE keeps a
    value that only looks like one.

    Example: chunktape record --prompt "Say hello" -o hello.msgpack
    """
    if prompt is None and messages is None and not chat:
        raise CliError("give --prompt, --messages FILE or --chat", EXIT_USAGE)
    check_output_suffix(output, "--output")
    conversation: list[Message] = []
    if system is not None:
        conversation.append(Message(role="system", content=system))
    if messages is not None:
        conversation.extend(load_messages(messages))
    if prompt is not None:
        conversation.append(Message(role="user", content=prompt))
    tool_specs = load_tools(tools) if tools is not None else []
    if tools_module is not None and tools is None:
        raise CliError("--tools-module needs --tools FILE (the tools the model is offered)", EXIT_USAGE)
    implementations = load_tools_module(tools_module) if tools_module is not None else None
    api_key = os.environ.get(api_key_env, "")
    if not api_key:
        raise CliError(f"no API key: set the environment variable {api_key_env} (or name another with --api-key-env)")
    if output.is_dir():
        raise CliError(f"{output} is a directory; give the cassette file name with -o")
    options = GenerateOptions(
        model=model, messages=conversation, tools=tool_specs, max_tokens=max_tokens, temperature=temperature
    )
    try:
        options_to_openai_request(options)  # a conversation the provider cannot take fails here, unrecorded
    except LlmError as error:
        where = f"messages file {messages}: " if messages is not None else ""
        raise CliError(f"{where}cannot be sent: {error.message}") from None
    out = console()
    from chunktape._recorder import RecordingAdapter, none_completed
    from chunktape.providers._openai_compat import OpenAICompatAdapter  # httpx: only when recording

    adapter = OpenAICompatAdapter(base_url=base_url, api_key=api_key, model=model)
    recorder = RecordingAdapter(adapter, output, append=append, allow_secrets=allow_secret or ())
    secrets = [api_key]  # redact_text adds the environment's
    if implementations is None and chat and tool_specs:
        implementations = _prompted_tools(tool_specs, out)
    session = _Session(recorder, out, options, secrets, implementations)
    failure: LlmError | None = None
    interrupted = False
    with asyncio.Runner() as runner:
        try:
            if conversation and conversation[-1].role in ("user", "tool"):
                start = session.mark()
                failure = runner.run(session.agent_turn())
                if failure is not None and chat:
                    session.rewind(start - 1)
            while chat:
                line = _read_user_line(out)
                if line is None or line.strip() in _EXIT_WORDS:
                    break
                if not line.strip():
                    continue
                start = session.mark()
                session.add(Message(role="user", content=line))
                turn_failure = runner.run(session.agent_turn())
                if turn_failure is not None:
                    failure = turn_failure
                    session.rewind(start)  # the user can try again; the failure stays recorded
        except _InputEnded:
            pass
        except KeyboardInterrupt:
            interrupted = True
        finally:
            # A down server, a wrong --base-url or key, a Ctrl-C before the reply: not the provider's answer.
            aside = not force and none_completed(recorder.interactions)
            try:
                written = recorder.save(failed=aside, secret_advice=_SECRET_ADVICE)
            finally:
                runner.run(adapter.aclose())
    if aside:
        state = "was left as it was" if output.exists() else "was not written"
        reason = f": {failure}" if failure is not None else ": interrupted" if interrupted else ""
        raise CliError(
            f"no call completed{reason}; kept the failed recording in {recorder.written}, {output} {state} "
            "(--force writes it)"
        )
    count = 0 if written is None else len(written.interactions)
    note = "interrupted; kept" if interrupted else "saved"
    err_console().print(f"{note} {count} interaction(s) in {output}", style="dim", markup=False, soft_wrap=True)
    if failure is not None and not chat:
        raise CliError(str(failure))
