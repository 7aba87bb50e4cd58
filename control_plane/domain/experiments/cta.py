"""What a cta variant may put on a page: a link a browser follows safely, plain colours.

A cta's ``href`` is set on the page's button and its ``bg``/``color`` on its style, so they are
checked as a browser would read them: a scheme is found after dropping what browsers ignore
(leading spaces and control characters, tabs and newlines anywhere), and only ``http``, ``https``
and relative links pass; a colour is a hex value, a colour name, or ``rgb()``/``hsl()`` of
numbers — nothing that could carry more CSS.
"""

from __future__ import annotations

import re

MAX_HREF = 2048
_IGNORED = re.compile(r"[\x00-\x20\x7f]")  # what a browser drops before reading a scheme
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.\-]*):")
_SAFE_SCHEMES = frozenset({"http", "https"})
_COLOUR = re.compile(
    r"^(?:#(?:[0-9a-fA-F]{3,4}|[0-9a-fA-F]{6}|[0-9a-fA-F]{8})"
    r"|[a-zA-Z]{3,24}"
    r"|(?:rgb|rgba|hsl|hsla)\(\s*[-+]?\d*\.?\d+(?:%|deg)?"
    r"(?:\s*[,/]?\s*[-+]?\d*\.?\d+%?){2,3}\s*\))$"
)


def href_problem(href: str) -> str | None:
    """Why ``href`` may not be a cta's link, or None."""
    if len(href) > MAX_HREF:
        return f"at most {MAX_HREF} characters"
    scheme = _SCHEME.match(_IGNORED.sub("", href))
    if scheme is not None and scheme.group(1).lower() not in _SAFE_SCHEMES:
        return "an http(s) URL or a relative link (/path, #part, ?query), never another scheme"
    return None


def colour_problem(colour: str) -> str | None:
    """Why ``colour`` may not be a cta's ``bg`` or ``color``, or None."""
    if not _COLOUR.match(colour.strip()):
        return "a plain colour: #rgb, #rrggbb, a colour name, rgb(…) or hsl(…) of numbers"
    return None


def check(name: str, value: str) -> str | None:
    """The problem with a cta variant's ``href``, ``bg`` or ``color`` (``name``), or None."""
    return href_problem(value) if name == "href" else colour_problem(value)
