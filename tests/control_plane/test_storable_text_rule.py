"""The rule for text every database stores (``shared.wire.body``), over generated JSON: a NUL or
a lone surrogate put anywhere (a value or an object key) is found, at the path it was put, both
in decoded JSON and in the JSON bytes a client sends; JSON without one is never refused."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.wire import body

SAFE_TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"))
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | SAFE_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(SAFE_TEXT, inner, max_size=4),
    max_leaves=20,
)
BAD = st.sampled_from(["\x00", "a\x00", "\ud800", "x\udfff", "\udc00y"])


def _plant(value: Any, bad: str, data: st.DataObject) -> tuple[Any, str]:
    """``value`` with ``bad`` put in one place; the path ``unstorable_text`` must name."""
    if isinstance(value, list) and value and data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(value) - 1))
        inner, path = _plant(value[i], bad, data)
        value = [*value[:i], inner, *value[i + 1 :]]
        return value, f"[{i}]{path}"
    if isinstance(value, dict) and value and data.draw(st.booleans()):
        key = data.draw(st.sampled_from(sorted(value)))
        if data.draw(st.booleans()):  # in the key itself: the object is named
            renamed = {(k + bad if k == key else k): v for k, v in value.items()}
            return renamed, ""
        inner, path = _plant(value[key], bad, data)
        return {**value, key: inner}, f".{key}{path}"
    return data.draw(SAFE_TEXT) + bad, ""


def _field(path: str) -> str:
    return path.removeprefix(".") or "body"


@settings(max_examples=300, derandomize=True)
@given(value=JSON, bad=BAD, data=st.data())
def test_a_bad_string_is_found_where_it_was_put(value: Any, bad: str, data: st.DataObject) -> None:
    assert body.unstorable_text(value) is None
    assert body.unstorable_in_json(json.dumps(value).encode()) is None
    planted, path = _plant({"x": value}, bad, data)
    expected = "NUL" if "\x00" in bad else "surrogate"
    for found in (
        body.unstorable_text(planted),
        body.unstorable_in_json(json.dumps(planted).encode()),  # "\u0000", "\ud800" escapes
    ):
        assert found is not None
        field, message = found
        assert field == _field(path)
        assert expected in message
