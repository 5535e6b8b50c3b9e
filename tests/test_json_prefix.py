"""Whether a tool call's arguments stopped early (a token limit cut them) or are broken: every proper prefix of a
JSON text is unfinished, a complete text is not, and nothing with junk in it is."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chunktape._json_prefix import unfinished_json

JSON_VALUES: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


@given(value=JSON_VALUES, indent=st.sampled_from([None, 1]), ascii_only=st.booleans())
def test_every_proper_prefix_of_a_json_text_is_unfinished_and_the_whole_is_not(
    value: Any, indent: int | None, ascii_only: bool
) -> None:
    # Arguments are an object; a bare number is complete JSON and the start of a longer one, so it counts as complete.
    text = json.dumps({"v": value}, indent=indent, ensure_ascii=ascii_only)
    assert not unfinished_json(text)
    for end in range(len(text)):
        assert unfinished_json(text[:end]), text[:end]


@given(value=JSON_VALUES, junk=st.sampled_from([",", "}", "]", '"', "{", "x", ":", "1"]))
def test_junk_after_a_complete_object_or_array_is_no_cut(value: Any, junk: str) -> None:
    text = json.dumps({"v": value}) + junk
    assert not unfinished_json(text)


@given(text=st.text(alphabet='{}[]":,.-+eE0123456789truefalsn \\u', max_size=12))
def test_an_unfinished_text_is_never_valid_json(text: str) -> None:
    if unfinished_json(text):
        with pytest.raises(json.JSONDecodeError):
            json.loads(text)


@pytest.mark.parametrize(
    "text",
    ['{"a": tr', '{"a": 1.', '{"a": "x\\', '{"a": "\\u12', '{"a', "[1, 2", '{"a": -', '{"a": 1e+', "", "  ", "{\n"],
)
def test_texts_a_limit_could_have_cut(text: str) -> None:
    assert unfinished_json(text)


@pytest.mark.parametrize(
    "text",
    [
        '{"broken":}',
        '{"a" 1',
        '{"a":]',
        '{"a":1,}',
        '{"a":01',
        '{"a":1},',
        "[1]]",
        '{"a": trux',
        '{"a": "\\x',
        '{"a": "\\u12g',
        '{"a": "line\nbreak',
        '{"a": 1.e',
        "{} {",
        "nulll",
    ],
)
def test_texts_no_limit_cuts_so(text: str) -> None:
    assert not unfinished_json(text)
