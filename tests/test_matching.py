"""Request matchers and the readable diff behind CASSETTE_MISMATCH."""

from __future__ import annotations

from typing import Any

from chunktape import GenerateOptions, Message, RecordedRequest, ToolSpec
from chunktape.cassettes.matching import DEFAULT_MATCH, RequestMatcher, diff_requests
from helpers import options


def _request(content: str = "hi", **fields: Any) -> RecordedRequest:
    return RecordedRequest.from_options(options(content, **fields))


def test_the_default_matcher_compares_model_messages_tools_and_params() -> None:
    matcher = RequestMatcher(DEFAULT_MATCH)
    base = _request(temperature=0.5)
    assert matcher(_request(temperature=0.5), base)
    assert not matcher(_request("other", temperature=0.5), base)
    assert not matcher(_request(temperature=0.7), base)
    assert not matcher(_request(temperature=0.5, model="other"), base)
    assert not matcher(_request(temperature=0.5, tools=[ToolSpec(name="t")]), base)
    assert not matcher(_request(temperature=0.5, extra={"seed": 1}), base)
    assert matcher.failing(_request("other", temperature=0.7), base) == ["messages", "params"]


def test_the_diff_names_each_difference_by_path() -> None:
    recorded = RecordedRequest.from_options(
        GenerateOptions(
            model="m", messages=[Message(role="user", content="hello"), Message(role="assistant", content="hi")]
        )
    )
    live = RecordedRequest.from_options(options("hello!", model="m", max_tokens=20))
    assert diff_requests(recorded, live) == [
        "maxTokens: recorded (absent), requested 20",
        "messages[0].content: recorded 'hello', requested 'hello!'",
        'messages[1]: recorded {"role":"assistant","content":"hi"}, requested (absent)',
    ]
