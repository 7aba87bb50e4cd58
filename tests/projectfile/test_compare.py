"""The plan's field-by-field difference (``compare.diff``): what its shortcuts answer (a value
created, two values that are the same JSON) is what walking them answers."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from control_plane.domain.projectfile.compare import diff

LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 2),
    st.sampled_from([0.0, 1.0, -0.0, 2.5]),
    st.sampled_from(["", "a", "1", "true"]),
)
KEYS = st.sampled_from(["a", "b", "c"])
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(KEYS, inner, max_size=3)),
    max_leaves=12,
)
RESOURCES = st.dictionaries(KEYS, VALUES, max_size=4)


def _like(value: Any, data: st.DataObject) -> Any:
    """``value`` with some leaves swapped for ones equal in Python but not in JSON (1 and
    True, 1 and 1.0, 0.0 and -0.0) or for another leaf."""
    if isinstance(value, dict):
        return {k: _like(v, data) for k, v in value.items()}
    if isinstance(value, list):
        return [_like(v, data) for v in value]
    choice = data.draw(st.integers(0, 5))
    if choice == 0:
        return _twin(value, data.draw(st.booleans()))
    if choice == 1:
        return data.draw(LEAVES)
    return value


def _twin(value: Any, as_bool: bool) -> Any:
    """A leaf equal to ``value`` in Python and not in JSON, where there is one (1 and True,
    1 and 1.0, 0.0 and -0.0)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return bool(value) if value in (0, 1) and as_bool else float(value)
    if isinstance(value, float):
        return -value if value == 0 else (int(value) if value.is_integer() else value)
    return value


@given(RESOURCES, st.data())
@settings(max_examples=300, deadline=None)
def test_the_shortcuts_answer_as_the_walk(before: dict[str, Any], data: st.DataObject) -> None:
    after = data.draw(st.one_of(st.just(before), RESOURCES, st.builds(lambda: _like(before, data))))
    walked = [  # under a path, the walk is taken all the way down
        (c.path.removeprefix("r."), c.before, c.after) for c in diff(before, after, "r")
    ]
    answered = [(c.path, c.before, c.after) for c in diff(before, after)]
    assert answered == walked
