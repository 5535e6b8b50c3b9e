"""Request matchers and the readable diff behind CASSETTE_MISMATCH."""

from __future__ import annotations

import msgspec

from chunktape import GenerateOptions, Message, RecordedRequest, ToolSpec
from chunktape._cassettes.matching import DEFAULT_MATCH, RequestMatcher, diff_requests
from helpers import options, recorded_request


def test_the_default_matcher_compares_model_messages_tools_and_params() -> None:
    matcher = RequestMatcher(DEFAULT_MATCH)
    base = recorded_request("hi", temperature=0.5)
    assert matcher(recorded_request("hi", temperature=0.5), base)
    assert not matcher(recorded_request("other", temperature=0.5), base)
    assert not matcher(recorded_request("hi", temperature=0.7), base)
    assert not matcher(recorded_request("hi", temperature=0.5, model="other"), base)
    assert not matcher(recorded_request("hi", temperature=0.5, tools=[ToolSpec(name="t")]), base)
    assert not matcher(recorded_request("hi", temperature=0.5, extra={"seed": 1}), base)
    assert matcher.failing(recorded_request("other", temperature=0.7), base) == ["messages", "params"]


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


def test_content_parts_match_as_json_values_and_another_image_misses() -> None:
    def request(*parts: dict[str, object]) -> RecordedRequest:
        message = Message(role="user", content_parts=[{"type": "text", "text": "what is this?"}, *parts])
        return RecordedRequest.from_options(GenerateOptions(model="m", messages=[message]))

    matcher = RequestMatcher(DEFAULT_MATCH)
    cat = request({"type": "image_url", "image_url": {"url": "https://img.test/cat.png", "detail": "low"}})
    assert matcher(
        request({"image_url": {"detail": "low", "url": "https://img.test/cat.png"}, "type": "image_url"}), cat
    )
    dog = request({"type": "image_url", "image_url": {"url": "https://img.test/dog.png", "detail": "low"}})
    assert matcher.failing(dog, cat) == ["messages"]
    assert not matcher(request(), cat)  # the text alone is not the question with its picture
    assert any("contentParts[1]" in line for line in diff_requests(cat, dog))


def test_a_messages_other_fields_match_as_json_values_except_those_that_say_nothing() -> None:
    def request(**extra: object) -> RecordedRequest:
        messages = [Message(role="user", content="haiku"), Message(role="assistant", content="Autumn", extra=extra)]
        return RecordedRequest.from_options(GenerateOptions(model="m", messages=messages))

    matcher = RequestMatcher(DEFAULT_MATCH)
    plain = request()
    # An SDK's echo of the reply it got (openai's ``model_dump``) carries empty fields the recording never had.
    assert matcher(request(refusal=None, audio=None, annotations=[], function_call=None), plain)
    assert matcher(request(provider_specific_fields={"refusal": None, "citations": []}), plain)  # litellm's
    assert not matcher(request(provider_specific_fields={"refusal": "no"}), plain)
    assert matcher(request(audio={"id": "a1", "format": "wav"}), request(audio={"format": "wav", "id": "a1"}))
    prefix = request(prefix=True)  # DeepSeek completes the turn instead of answering it: another question
    assert matcher.failing(prefix, plain) == ["messages"]
    assert not matcher(request(prefix=False), prefix)
    assert any("prefix" in line for line in diff_requests(plain, prefix))
    # A miss for another reason lists that reason alone, not the empty fields matching ignored.
    echoed = request(refusal=None, annotations=[], provider_specific_fields={"refusal": None})
    retold = msgspec.structs.replace(plain, model="other")
    assert diff_requests(retold, echoed) == ["model: recorded 'other', requested 'm'"]
    assert diff_requests(plain, request(audio={"id": "a1"})) == [
        'messages[1].extra: recorded (absent), requested {"audio":{"id":"a1"}}'
    ]
