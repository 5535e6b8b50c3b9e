"""One reply fold (``protocol.ReplyBuilder``) and what its consumers print: ``show``/``diff``, the stream:false
completion body, the CLI's live printer, and the harness transcript."""

from __future__ import annotations

import ast
import io
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from rich.console import Console
from typer.testing import CliRunner

from chunktape import Cancelled, Cassette, Completed, Event, Interaction, RecordedRequest, save_cassette
from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import (
    BlockEnd,
    BlockStart,
    CallId,
    Finish,
    FinishReason,
    Message,
    ReasoningBlock,
    ReasoningDelta,
    Reply,
    ReplyBuilder,
    StreamChunk,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    UsageChunk,
)
from chunktape._report.analysis import diff_cassettes, summarize
from chunktape.cli import app
from chunktape.cli._render import ChunkPrinter
from chunktape.harness import DoneEvent, ErrorEvent, TextEvent, ToolCallEvent, TurnEvent, collect
from chunktape.harness._events import HarnessEvent, ReasoningEvent, ToolResultEvent, turn_reply
from chunktape.http._render import completion_from_chunks
from chunktape.wire._openai_chat import decode_openai_completion
from helpers import options
from strategies import valid_streams

CALL = ToolCallBlock(id=CallId("c1"), name="lookup", arguments='{"q":"tea"}')
USAGE = TokenUsage(input_tokens=3, output_tokens=7, cached_input_tokens=1)
STREAM: list[StreamChunk] = [
    BlockStart(index=0, block_type="reasoning"),
    ReasoningDelta(index=0, text="Think"),
    ReasoningDelta(index=0, text="ing."),
    BlockEnd(index=0, block=ReasoningBlock(text="Thinking.")),
    BlockStart(index=1, block_type="tool-call"),
    ToolCallDelta(index=1, id=CallId("c1"), name="lookup", arguments_delta='{"q":'),
    ToolCallDelta(index=1, arguments_delta='"tea"}'),
    BlockEnd(index=1, block=CALL),
    BlockStart(index=2, block_type="text"),
    TextDelta(index=2, text="Tea is "),
    TextDelta(index=2, text="ready."),
    BlockEnd(index=2, block=TextBlock(text="Tea is ready.")),
    UsageChunk(usage=USAGE),
    Finish(reason=FinishReason(kind="tool-calls")),
]
CUT = STREAM[:10]
"""Cut in the middle of the text block: after ``Tea is ``, before its block-end, usage and finish."""
REPLY = Reply(
    text="Tea is ready.", reasoning="Thinking.", tool_calls=[CALL], usage=USAGE, finish=FinishReason(kind="tool-calls")
)


def _interaction(chunks: Sequence[StreamChunk], *, cut: bool = False) -> Interaction:
    events = [Event(t_ns=(n + 1) * 1_000_000, chunk=chunk) for n, chunk in enumerate(chunks)]
    end = (len(chunks) + 1) * 1_000_000
    return Interaction(
        request=RecordedRequest.from_options(options("tea?")),
        events=events,
        outcome=Cancelled(t_ns=end, reason="cut") if cut else Completed(t_ns=end),
    )


def _accumulates_text(node: ast.AST) -> bool:
    """``pieces.append(x.text)`` or ``"".join(x.text for ...)``: the shape of folding text into a reply."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute) or not node.args:
        return False
    argument = node.args[0]
    if node.func.attr == "append":
        return isinstance(argument, ast.Attribute) and argument.attr == "text"
    if node.func.attr == "join" and isinstance(argument, ast.GeneratorExp | ast.ListComp):
        return isinstance(argument.elt, ast.Attribute) and argument.elt.attr == "text"
    return False


# Places that add up delta text for another job than a reply, each with its reason.
NOT_A_REPLY = {
    "validation.py",  # checks that a block-end equals its deltas
    "cassettes/redaction.py",  # screens deltas for secrets split across them
    "cli/demo_loop.py",  # the demo's one line per turn, from the transcript's events
    "faults/plan.py",  # joins the text of a request's messages (Message.text), not of a stream
}


def test_the_fold_so_far_reads_a_cut_stream() -> None:
    fold = ReplyBuilder(CUT)
    assert (fold.text, fold.reasoning, fold.tool_calls) == ("Tea is ", "Thinking.", [CALL])
    assert (fold.usage, fold.finish, fold.chunks) == (None, None, 10)
    with pytest.raises(LlmError) as raised:
        fold.reply()
    assert raised.value.code is ErrorCode.STREAM_ABORTED
    for chunk in STREAM[10:]:
        fold.feed(chunk)
    assert fold.reply() == REPLY == ReplyBuilder.fold(STREAM)


@settings(max_examples=60, deadline=None)
@given(chunks=valid_streams())
def test_the_fold_of_a_valid_stream_is_what_its_block_ends_say(chunks: list[StreamChunk]) -> None:
    ends = [chunk.block for chunk in chunks if isinstance(chunk, BlockEnd)]
    fold = ReplyBuilder(chunks)
    assert fold.text == "".join(block.text for block in ends if isinstance(block, TextBlock))
    assert fold.reasoning == "".join(block.text for block in ends if isinstance(block, ReasoningBlock))
    assert fold.tool_calls == [block for block in ends if isinstance(block, ToolCallBlock)]


def test_show_and_diff_read_a_cut_recording_with_the_fold() -> None:
    summary = summarize(_interaction(CUT, cut=True))
    assert (summary.text, summary.reasoning, summary.tool_calls) == ("Tea is ", "Thinking.", ['lookup({"q":"tea"})'])
    assert summary.usage is None
    assert summary.outcome == "cancelled (cut)"
    whole = Cassette(interactions=[_interaction(STREAM)])
    diff = diff_cassettes(Cassette(interactions=[_interaction(CUT, cut=True)]), whole)
    assert "#0 text: 'Tea is ' -> 'Tea is ready.'" in diff.changes
    assert "#0 usage: none -> 3 in / 7 out" in diff.changes


def test_the_stream_false_body_is_the_fold_on_the_wire() -> None:
    body = completion_from_chunks(STREAM, model="m", id="chatcmpl-1")
    assert body["choices"] == [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Tea is ready.",
                "reasoning_content": "Thinking.",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q":"tea"}'}}
                ],
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
        }
    ]
    assert body["usage"]["prompt_cache_hit_tokens"] == 1
    assert ReplyBuilder.fold(decode_openai_completion(body)) == REPLY
    only_calls = completion_from_chunks(STREAM[4:8] + STREAM[12:], model="m")
    assert only_calls["choices"][0]["message"]["content"] is None
    unfinished = completion_from_chunks(CUT, model="m")
    assert unfinished["choices"][0]["finish_reason"] is None
    assert unfinished["choices"][0]["message"]["content"] == "Tea is "


def test_the_live_printer_prints_the_stream_and_keeps_its_fold() -> None:
    screen = io.StringIO()
    console = Console(file=screen, no_color=True, width=200)
    printer = ChunkPrinter(console)
    for chunk in STREAM:
        printer.feed(chunk)
    printer.done()
    assert printer.reply.reply() == REPLY
    assert screen.getvalue() == (
        'thinking: Thinking.\n→ lookup({"q":"tea"})  [c1]\nTea is ready.\n'
        "usage: 3 in (1 cached) / 7 out\nfinish: tool-calls\n"
    )


def test_play_prints_a_cut_recording_up_to_the_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    path = tmp_path / "cut.json"
    save_cassette(Cassette(interactions=[_interaction(CUT, cut=True)]), path)
    result = CliRunner().invoke(app, ["play", str(path), "--instant"])
    assert result.exit_code == 0, result.output
    assert 'thinking: Thinking.\n→ lookup({"q":"tea"})  [c1]\nTea is \nthe recording was cut short here (cut)' in (
        result.output
    )


async def _events(*events: HarnessEvent) -> AsyncIterator[HarnessEvent]:
    for event in events:
        yield event


def _failed(attempt: int) -> ErrorEvent:
    error = LlmError("broke", ErrorCode.STREAM_ABORTED)
    return ErrorEvent(error=error, recoverable=True, will_retry=True, partial=True, attempt=attempt)


TOOL_CALL = ToolCallEvent(id="c1", name="lookup", arguments={"q": "tea"}, raw_arguments='{"q":"tea"}', index=1)


async def test_the_transcript_keeps_each_turns_counted_attempt() -> None:
    turn_done = DoneEvent(reason="tool_use", finish="tool-calls", usage=USAGE)
    transcript = await collect(
        _events(
            ReasoningEvent(text="Thin", index=0),
            TextEvent(text="Tea", index=2),
            _failed(1),
            ReasoningEvent(text="Thinking.", index=0, attempt=2),
            TOOL_CALL,
            TurnEvent(turn=1, done=turn_done),
            ToolResultEvent(tool_call_id="c1", name="lookup", result="hot", content="hot"),
            TextEvent(text="Tea is", index=0),
            _failed(1),
            TextEvent(text="Tea is ready.", index=0, attempt=2),
            TurnEvent(turn=2, done=DoneEvent(reason="stop", finish="stop")),
            DoneEvent(reason="stop", finish="stop"),
        )
    )
    assert (transcript.text, transcript.reasoning) == ("Tea is ready.", "Thinking.")
    assert transcript.tool_calls == [TOOL_CALL]


def test_a_turns_reply_is_the_fold_of_its_events() -> None:
    done = DoneEvent(reason="tool_use", finish="tool-calls", usage=USAGE)
    output: list[TextEvent | ReasoningEvent | ToolCallEvent] = [
        ReasoningEvent(text="Thinking.", index=0),
        TOOL_CALL,
        TextEvent(text="Tea is ready.", index=2),
    ]
    reply = turn_reply(output, done)
    assert reply == REPLY
    assert reply.message() == Message(
        role="assistant", content="Tea is ready.", tool_calls=[CALL], reasoning_content="Thinking."
    )
