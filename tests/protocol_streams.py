"""Synthetic Anthropic Messages and OpenAI Responses streams for the suite: each reproduces a feature of the real
captures in ``../shared/captures`` (thinking with a signature, a ping inside a block, a tool-use turn, a reasoning
summary, a function call, cache usage, an in-stream overloaded error), none is a copy of one."""

from __future__ import annotations

import json
from typing import Any


def events(*items: dict[str, Any]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in items)


def messages_stream() -> bytes:
    """Thinking with its signature, text, then a tool call whose input arrives in pieces; a ping inside a block."""
    return events(
        {
            "type": "message_start",
            "message": {
                "id": "msg_synthetic",
                "type": "message",
                "role": "assistant",
                "model": "claude-test-1",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 12, "cache_read_input_tokens": 30, "output_tokens": 1},
            },
        },
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Weather "}},
        {"type": "ping"},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "needs a tool."}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "c2lnbmVk"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Checking "}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Paris."}},
        {"type": "content_block_stop", "index": 1},
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {"type": "tool_use", "id": "toolu_paris", "name": "get_weather", "input": {}},
        },
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": ""}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '{"city": '}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '"Paris"}'}},
        {"type": "content_block_stop", "index": 2},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 41},
        },
        {"type": "message_stop"},
    )


def overloaded_mid_stream() -> bytes:
    """A stream that starts, then reports Anthropic's overloaded error in-stream (the real payload's shape)."""
    head = messages_stream().split(b"event: content_block_start")[0]
    error = {"type": "error", "error": {"details": None, "type": "overloaded_error", "message": "Overloaded"}}
    return head + events(error)


def responses_stream() -> bytes:
    """A reasoning item with a summary, text, then a function call whose arguments arrive in pieces."""
    response = {"id": "resp_synthetic", "object": "response", "created_at": 1700000000, "model": "gpt-test-1"}
    base = {**response, "status": "in_progress", "output": [], "usage": None, "error": None, "incomplete_details": None}
    stream: list[dict[str, Any]] = [
        {"type": "response.created", "response": base},
        {"type": "response.in_progress", "response": base},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"id": "rs_1", "type": "reasoning", "summary": []},
        },
        {
            "type": "response.reasoning_summary_part.added",
            "item_id": "rs_1",
            "output_index": 0,
            "summary_index": 0,
            "part": {"type": "summary_text", "text": ""},
        },
        {
            "type": "response.reasoning_summary_text.delta",
            "item_id": "rs_1",
            "output_index": 0,
            "summary_index": 0,
            "delta": "Use the tool.",
        },
        {
            "type": "response.reasoning_summary_text.done",
            "item_id": "rs_1",
            "output_index": 0,
            "summary_index": 0,
            "text": "Use the tool.",
        },
        {
            "type": "response.reasoning_summary_part.done",
            "item_id": "rs_1",
            "output_index": 0,
            "summary_index": 0,
            "part": {"type": "summary_text", "text": "Use the tool."},
        },
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "Use the tool."}]},
        },
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": {"id": "msg_1", "type": "message", "status": "in_progress", "content": [], "role": "assistant"},
        },
        {
            "type": "response.content_part.added",
            "item_id": "msg_1",
            "output_index": 1,
            "content_index": 0,
            "part": {"type": "output_text", "annotations": [], "logprobs": [], "text": ""},
        },
        {
            "type": "response.output_text.delta",
            "item_id": "msg_1",
            "output_index": 1,
            "content_index": 0,
            "delta": "Checking ",
            "logprobs": [],
        },
        {
            "type": "response.output_text.delta",
            "item_id": "msg_1",
            "output_index": 1,
            "content_index": 0,
            "delta": "Paris.",
            "logprobs": [],
        },
        {
            "type": "response.output_text.done",
            "item_id": "msg_1",
            "output_index": 1,
            "content_index": 0,
            "text": "Checking Paris.",
            "logprobs": [],
        },
        {
            "type": "response.content_part.done",
            "item_id": "msg_1",
            "output_index": 1,
            "content_index": 0,
            "part": {"type": "output_text", "annotations": [], "logprobs": [], "text": "Checking Paris."},
        },
        {
            "type": "response.output_item.done",
            "output_index": 1,
            "item": {
                "id": "msg_1",
                "type": "message",
                "status": "completed",
                "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": "Checking Paris."}],
                "role": "assistant",
            },
        },
        {
            "type": "response.output_item.added",
            "output_index": 2,
            "item": {
                "id": "fc_1",
                "type": "function_call",
                "status": "in_progress",
                "arguments": "",
                "call_id": "call_paris",
                "name": "get_weather",
            },
        },
        {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 2, "delta": '{"city": '},
        {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 2, "delta": '"Paris"}'},
        {
            "type": "response.function_call_arguments.done",
            "item_id": "fc_1",
            "output_index": 2,
            "arguments": '{"city": "Paris"}',
        },
    ]
    call = {
        "id": "fc_1",
        "type": "function_call",
        "status": "completed",
        "arguments": '{"city": "Paris"}',
        "call_id": "call_paris",
        "name": "get_weather",
    }
    stream.append({"type": "response.output_item.done", "output_index": 2, "item": call})
    usage = {
        "input_tokens": 20,
        "input_tokens_details": {"cached_tokens": 8},
        "output_tokens": 9,
        "output_tokens_details": {"reasoning_tokens": 4},
        "total_tokens": 29,
    }
    done = {**base, "status": "completed", "usage": usage}
    done["output"] = [stream[7]["item"], stream[14]["item"], call]
    stream.append({"type": "response.completed", "response": done})
    for number, event in enumerate(stream):
        event["sequence_number"] = number
    return events(*stream)


def tool_input_cut_by_max_tokens() -> bytes:
    """Text, then a tool call whose input the token limit cuts: no block stop, ``max_tokens``, the message ends."""
    return events(
        {
            "type": "message_start",
            "message": {
                "id": "msg_cut",
                "type": "message",
                "role": "assistant",
                "model": "claude-test-1",
                "content": [],
                "stop_reason": None,
                "usage": {"input_tokens": 9, "output_tokens": 1},
            },
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Writing it."}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_cut", "name": "write_file", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"path": "a.'},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": 'md", "text": "#'},
        },
        {
            "type": "message_delta",
            "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
            "usage": {"output_tokens": 20},
        },
        {"type": "message_stop"},
    )
