"""An experiment's ``url`` glob against a page's URL (which a public key chooses): exact, and
linear in the URL whatever the pattern (found from outside: ``/*a*a*a*b`` against a long URL
of ``a`` took seconds with a regular expression, each more ``*`` a power more)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from shared.engine.experiments import glob_matches, url_matches

texts = st.text(alphabet="ab/*", max_size=12)


@given(pattern=texts, text=st.text(alphabet="ab/", max_size=16))
def test_the_same_answer_as_the_regular_expression_it_replaces(pattern: str, text: str) -> None:
    regex = "^" + ".*".join(re.escape(part) for part in pattern.split("*")) + "$"
    assert glob_matches(pattern, text) == bool(re.match(regex, text, re.DOTALL))


def test_a_pattern_of_many_stars_against_a_long_url_answers_at_once() -> None:
    # polynomial backtracking for a regex: hours here; the suite's timeout would fail the test
    url = "https://shop.example/" + "a" * 2000
    assert url_matches("/*a*a*a*a*a*a*b", url) is False
    assert url_matches("/*a*a*a*a*a*a*", url) is True
    assert url_matches("/pricing*", "https://shop.example/pricing/annual") is True
    assert url_matches("/pricing*", "https://shop.example/about") is False
