"""Clause operators: each compiles its clause values once into a predicate on one value.

A predicate receives one attribute value that is neither missing nor null nor an array (the
clause handles those: a missing or null attribute never matches, even negated; an array matches
when any element does) and tells whether it matches any of the clause's values.

Edge cases, following LaunchDarkly:

* ``in`` is type-strict JSON equality: ``1 == 1.0`` but ``1 != "1"`` and ``true != 1`` (Python's
  ``True == 1`` is not used); arrays and objects compare deeply.
* ``startsWith``, ``endsWith``, ``contains``, ``matches``: both sides strings, case-sensitive;
  ``matches`` is a regex *search*, not a full match, run by RE2 (``google-re2``): time linear in
  the attribute's length whatever the pattern, because a public key chooses the attribute. A
  pattern RE2 cannot run (backreferences, lookaround) is refused when compiling. An attribute
  longer than ``MAX_MATCHED_LENGTH`` characters never matches any string operator (the bound on
  what a public key makes one clause read; see "the search budget" below).
* ``lessThan`` … ``greaterThanOrEqual``: numbers only; a boolean is not a number and a numeric
  string is not a number.
* ``before``, ``after``: each side is an RFC 3339 timestamp string (date *and* time *and* offset,
  fractional seconds optional: ``2017-12-06T07:00:00Z``) or a number of epoch milliseconds; a
  numeric string is neither. Strictly before / after: equal instants match neither.
* ``semVer*``: semantic versions 2.0 with LaunchDarkly's leniency: a missing minor or patch
  is zero (``"2"`` and ``"2.0"`` are ``2.0.0``, ``"2-rc"`` is ``2.0.0-rc``); no leading zeros, no
  ``v`` prefix, no fourth component. Prerelease precedence is semver's (``1.0.0-rc < 1.0.0``,
  numeric identifiers below alphanumeric ones, ``rc.2 < rc.10``); build metadata is ignored.

Clause values an operator cannot use are refused when compiling (a bad regex, a date or version
that does not parse, a non-number for a numeric operator, a non-string for a string operator);
attribute values of the wrong type are simply not a match.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from shared.engine.model import InvalidAt

Predicate = Callable[[Any], bool]
SemVer = tuple[int, int, int, int, tuple[tuple[int, int | str], ...]]

STRING_OPS = frozenset({"startsWith", "endsWith", "contains", "matches"})
NUMBER_OPS = frozenset({"lessThan", "lessThanOrEqual", "greaterThan", "greaterThanOrEqual"})
DATE_OPS = frozenset({"before", "after"})
SEMVER_OPS = frozenset({"semVerEqual", "semVerLessThan", "semVerGreaterThan"})
SEGMENT_MATCH = "segmentMatch"
OPERATORS = frozenset({"in", SEGMENT_MATCH}) | STRING_OPS | NUMBER_OPS | DATE_OPS | SEMVER_OPS


def _never(_value: Any) -> bool:
    return False


# ------------------------------------------------------------------------------------- values


# isinstance with a prebuilt tuple: ``int | float`` in a call builds a union object every time.
NUMBERS = (int, float)
ARRAYS = (list, tuple)
COMPOSITES = (list, tuple, Mapping)


def is_number(value: Any) -> bool:
    return isinstance(value, NUMBERS) and not isinstance(value, bool)


def _finite(value: int | float) -> bool:
    return isinstance(value, int) or math.isfinite(value)


MAX_VALUE_DEPTH = 32
"""The deepest an ``in`` clause's composite value nests; an attribute nested deeper cannot equal
one, and is not walked past it (a context nested ~1,000 deep decodes, and once exhausted the
recursion limit here: a 500)."""


class _TooDeep(Exception):
    pass


def _canonical(value: Any, depth: int = 0) -> Any:
    """A hashable form of a JSON value under type-strict equality (``True`` is not ``1``);
    ``_TooDeep`` past ``MAX_VALUE_DEPTH`` levels."""
    if isinstance(value, str):
        return ("s", str(value))
    if isinstance(value, bool):
        return ("b", bool(value))
    if isinstance(value, NUMBERS):
        return ("n", value)
    if value is None:
        return ("z",)
    if depth > MAX_VALUE_DEPTH:
        raise _TooDeep
    if isinstance(value, ARRAYS):
        return ("l", tuple(_canonical(item, depth + 1) for item in value))
    if isinstance(value, Mapping):
        return ("d", frozenset((k, _canonical(v, depth + 1)) for k, v in value.items()))
    return ("o", id(value))


def _check_json(value: Any, path: str, depth: int = 0) -> None:
    if depth > MAX_VALUE_DEPTH:
        raise InvalidAt(path, "value nested too deeply")
    if value is None or isinstance(value, str | bool):
        return
    if is_number(value):
        if not _finite(value):
            raise InvalidAt(path, "numbers must be finite")
        return
    if isinstance(value, ARRAYS):
        for i, item in enumerate(value):
            _check_json(item, f"{path}[{i}]", depth + 1)
        return
    if isinstance(value, Mapping):
        for k, item in value.items():
            if not isinstance(k, str):
                raise InvalidAt(path, "object keys must be strings")
            _check_json(item, f"{path}.{k}", depth + 1)
        return
    raise InvalidAt(path, f"not a JSON value: {type(value).__name__}")


# ------------------------------------------------------------------------------------- dates

_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))",
    re.ASCII,
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


MAX_DATE_LENGTH = 64
"""The longest timestamp string ``before``/``after`` read (an RFC 3339 time with nanoseconds
and an offset is 35 characters): a longer attribute is no match, a longer clause value refused."""


def parse_rfc3339_ms(text: str) -> float | None:
    """Epoch milliseconds of an RFC 3339 timestamp, or ``None`` if it is not one (or is longer
    than ``MAX_DATE_LENGTH``)."""
    if len(text) > MAX_DATE_LENGTH:
        return None
    m = _RFC3339.fullmatch(text)
    if m is None:
        return None
    year, month, day, hour, minute, second, frac, zulu, sign, off_h, off_m = m.groups()
    try:
        offset = timedelta(0)
        if not zulu:
            offset = timedelta(hours=int(off_h), minutes=int(off_m))
            if sign == "-":
                offset = -offset
        moment = datetime(
            int(year),
            int(month),
            int(day),
            int(hour),
            int(minute),
            int(second),
            tzinfo=timezone(offset),
        )
    except (ValueError, OverflowError):
        return None
    delta = moment - _EPOCH
    ms = (delta.days * 86_400 + delta.seconds) * 1000
    return ms + float("0." + frac) * 1000 if frac else float(ms)


def date_ms(value: Any) -> float | None:
    """A date attribute or clause value as epoch milliseconds, or ``None``."""
    if isinstance(value, str):
        return parse_rfc3339_ms(value)
    if is_number(value):
        try:
            ms = float(value)
        except OverflowError:
            return None
        return ms if math.isfinite(ms) else None
    return None


# ------------------------------------------------------------------------------------- semver

_IDENT = r"(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
_SEMVER = re.compile(
    r"(0|[1-9][0-9]*)(?:\.(0|[1-9][0-9]*))?(?:\.(0|[1-9][0-9]*))?"
    rf"(?:-({_IDENT}(?:\.{_IDENT})*))?"
    r"(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?",
    re.ASCII,
)


MAX_VERSION_LENGTH = 256
"""The longest version string the ``semVer*`` operators read (npm's semver has the same bound):
past it an attribute is no match and a clause value is refused. Found from outside: a 500 KB
attribute took seconds a request, one of 200,000 digits exceeded Python's integer conversion
limit and answered 500."""


def parse_semver(value: Any) -> SemVer | None:
    """A sortable key for a version string (build metadata dropped), or ``None`` (also for one
    longer than ``MAX_VERSION_LENGTH``)."""
    if not isinstance(value, str) or len(value) > MAX_VERSION_LENGTH:
        return None
    m = _SEMVER.fullmatch(value)
    if m is None:
        return None
    major, minor, patch, pre = m.groups()
    if pre is None:
        return (int(major), int(minor or 0), int(patch or 0), 1, ())
    ids = tuple((0, int(p)) if p.isdigit() else (1, p) for p in pre.split("."))
    return (int(major), int(minor or 0), int(patch or 0), 0, ids)


# ----------------------------------------------------------------------------------- compiling


def _strings(op: str, values: Sequence[Any], path: str) -> list[str]:
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise InvalidAt(f"{path}[{i}]", f"{op} needs string values")
    return [str(v) for v in values]


def _numbers(op: str, values: Sequence[Any], path: str) -> list[float]:
    out = []
    for i, v in enumerate(values):
        if not is_number(v) or not _finite(v):
            raise InvalidAt(f"{path}[{i}]", f"{op} needs finite numbers")
        out.append(v)
    return out


def _in(values: Sequence[Any], path: str) -> tuple[Predicate, frozenset[str]]:
    others = []
    for i, v in enumerate(values):
        if v.__class__ is not str:
            _check_json(v, f"{path}[{i}]")
            others.append(v)
    strings = frozenset(str(v) for v in values if isinstance(v, str))
    # Strings are compared through ``strings``; ``keys`` holds the canonical forms of the rest.
    keys = frozenset(_canonical(v) for v in others if not isinstance(v, str))
    composite = any(isinstance(v, COMPOSITES) for v in others)

    def match_in(value: Any) -> bool:
        if isinstance(value, str):
            return str(value) in strings
        if not keys or (not composite and isinstance(value, COMPOSITES)):
            return False
        try:
            return _canonical(value) in keys
        except _TooDeep:
            return False

    return match_in, strings


def _string_op(op: str, values: Sequence[Any], path: str) -> Predicate:
    texts = _strings(op, values, path)
    cap = MAX_MATCHED_LENGTH
    if op == "startsWith":
        prefixes = tuple(texts)
        return lambda value: (
            isinstance(value, str) and len(value) <= cap and value.startswith(prefixes)
        )
    if op == "endsWith":
        suffixes = tuple(texts)
        return lambda value: (
            isinstance(value, str) and len(value) <= cap and value.endswith(suffixes)
        )
    if op == "contains":
        crossing = over_budget([1] * len(texts), MAX_CLAUSE_PROGRAM_SIZE)
        if crossing is not None:
            raise InvalidAt(
                f"{path}[{crossing}]",
                too_large(len(texts), MAX_CLAUSE_PROGRAM_SIZE, "this clause's values together"),
            )
        parts = tuple(dict.fromkeys(texts))  # each distinct substring is one pass over the value

        def contains_any(value: Any) -> bool:
            return isinstance(value, str) and len(value) <= cap and any(p in value for p in parts)

        return contains_any
    compiled = [_regex(text, f"{path}[{i}]") for i, text in enumerate(texts)]
    sizes = [int(regex.programsize) for regex in compiled]
    crossing = over_budget(sizes, MAX_CLAUSE_PROGRAM_SIZE)
    if crossing is not None:
        raise InvalidAt(
            f"{path}[{crossing}]",
            too_large(sum(sizes), MAX_CLAUSE_PROGRAM_SIZE, "this clause's patterns together"),
        )
    searches = tuple(regex.search for regex in compiled)

    def search_any(value: Any) -> bool:
        if not isinstance(value, str) or len(value) > cap:
            return False
        # RE2 reads UTF-8: encoded once here, not once per pattern by the binding, and with
        # "surrogatepass" so a lone surrogate (a surrogate-escaped file name) is one character,
        # as for Python's re, rather than a UnicodeEncodeError
        text = value.encode("utf-8", "surrogatepass")
        return any(search(text) is not None for search in searches)

    return search_any


MAX_MATCHED_LENGTH = 16 * 1024
"""The most characters one string-operator clause (``startsWith``, ``endsWith``, ``contains``,
``matches``) reads for one context: a longer attribute, or an array whose strings add up to more
(each element counting one more), is no match, and a negated clause on it is then true, as for
every "no match" (no email, path, user agent or version string comes near it)."""

# The search budget. RE2 runs a pattern as a DFA built lazily in at most ``REGEX_MAX_MEM`` bytes;
# a pattern whose DFA cannot fit (``[ab]*a[ab]{400}c`` has 2^400 states) falls back to RE2's NFA,
# whose time is the searched length times the program's size. The binding does not say when that
# happens, so the budget counts every pattern at that worst case, one unit an RE2 instruction;
# a ``contains`` value is one pass over the attribute and counts one unit (measured at worst
# ~5 ns a character, an NFA instruction ~11 ns). The work of one evaluation is at most
# MAX_MATCHED_LENGTH characters times the units of the clauses a flag (or a segment) runs;
# ``startsWith``/``endsWith`` compare at most their values' lengths and cost no unit. The same
# constants refuse a rule when it is saved.
MAX_PROGRAM_SIZE = 256
"""The largest pattern ``matches`` runs, in RE2 instructions. Real targeting patterns (an email
domain, a path prefix, a version family) are tens of instructions; a counted repeat such as
``.{1000}`` or ``\\pL{2,50}`` multiplies the pattern, and ``[ab]*a[ab]{400}c`` (407) took
~0.2 s on a 16 KiB attribute."""
MAX_CLAUSE_PROGRAM_SIZE = 512
"""The units of one clause: its patterns' RE2 instructions together (fifty 47-instruction
patterns in one clause made one request take seconds), or its ``contains`` values (10,000 of
them against a 16 KiB attribute took ~0.8 s)."""
MAX_RULES_PROGRAM_SIZE = 1024
"""The units of all the clauses of one flag's rules, or of one segment's rules."""
INLINE_SEARCH_UNITS = 32
"""The units above which a relay evaluates an environment on its worker thread rather than on its
event loop (``relay.routes.evaluation``): 32 units of 16 KiB are a few milliseconds at worst."""
REGEX_MAX_MEM = 256 * 1024
"""The memory RE2 may use for one pattern (program and DFA cache); past it the DFA gives way to
the NFA (bounded by the budget above) instead of growing: RE2's default is 8 MiB a pattern."""


def read_length(value: Any) -> int:
    """What a string operator reads of an attribute, against ``MAX_MATCHED_LENGTH``: a string's
    characters; an array's strings' characters plus one an element."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, ARRAYS):
        return len(value) + sum(len(item) for item in value if isinstance(item, str))
    return 0


def regex_options() -> Any:
    """The RE2 options every ``matches`` pattern is compiled with."""
    import re2

    options = re2.Options()
    options.log_errors = False  # the reason comes back in the exception; nothing on stderr
    options.never_capture = True  # whether it matches, never where: no submatch pass
    options.max_mem = REGEX_MAX_MEM
    return options


def program_size(text: str) -> int:
    """The RE2 instructions of a pattern ``matches`` accepts (``InvalidAt`` for one it does
    not): what the regular-expression budget counts."""
    return int(_regex(text, "").programsize)


@functools.lru_cache(maxsize=4096)
def _compile_re2(text: str) -> Any:
    """The binding is imported on first use: a relay whose rules have no ``matches`` never loads
    it (~2.6 MiB). Cached: the budget of a flag reads the sizes of patterns compiled already."""
    import re2

    return re2.compile(text, regex_options())


def _regex(text: str, path: str) -> Any:
    """``text`` compiled by RE2, or ``InvalidAt`` saying why RE2 cannot run it or why it is over
    ``MAX_PROGRAM_SIZE``."""
    import re2

    try:
        compiled = _compile_re2(text)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        if "too large" in str(reason) or "too big" in str(reason):
            raise InvalidAt(path, too_large("far more", MAX_PROGRAM_SIZE, "the pattern")) from None
        raise InvalidAt(
            path,
            f"not a regular expression RE2 can run ({reason}); RE2 has no backreferences "
            "or lookaround, so that matching always takes time linear in the input",
        ) from None
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidAt(path, f"invalid regular expression: {exc}") from None
    if compiled.programsize > MAX_PROGRAM_SIZE:
        raise InvalidAt(path, too_large(compiled.programsize, MAX_PROGRAM_SIZE, "the pattern"))
    return compiled


def too_large(size: int | str, limit: int, what: str) -> str:
    return (
        f"too large to run in a few milliseconds: {what} takes {size} RE2 instructions "
        f"(a contains value counts as one), at most {limit} (a counted repeat such as .{{1000}} or \\pL{{2,50}} multiplies the "
        "pattern; each instruction is work on every character searched)"
    )


def over_budget(sizes: Sequence[int], limit: int) -> int | None:
    """The index of the size that takes the running total of ``sizes`` past ``limit``."""
    total = 0
    for i, size in enumerate(sizes):
        total += size
        if total > limit:
            return i
    return None


def _number_op(op: str, values: Sequence[Any], path: str) -> Predicate:
    numbers = _numbers(op, values, path)
    if not numbers:
        return _never
    hi, lo = max(numbers), min(numbers)
    if op == "lessThan":
        return lambda v: is_number(v) and v < hi
    if op == "lessThanOrEqual":
        return lambda v: is_number(v) and v <= hi
    if op == "greaterThan":
        return lambda v: is_number(v) and v > lo
    return lambda v: is_number(v) and v >= lo


def _date_op(op: str, values: Sequence[Any], path: str) -> Predicate:
    instants = []
    for i, v in enumerate(values):
        ms = date_ms(v)
        if ms is None:
            raise InvalidAt(
                f"{path}[{i}]",
                f"{op} needs an RFC 3339 timestamp (at most {MAX_DATE_LENGTH} characters) "
                "or epoch milliseconds",
            )
        instants.append(ms)
    if not instants:
        return _never
    if op == "before":
        latest = max(instants)

        def before(value: Any) -> bool:
            ms = date_ms(value)
            return ms is not None and ms < latest

        return before
    earliest = min(instants)

    def after(value: Any) -> bool:
        ms = date_ms(value)
        return ms is not None and ms > earliest

    return after


def _semver_op(op: str, values: Sequence[Any], path: str) -> Predicate:
    versions = []
    for i, v in enumerate(values):
        parsed = parse_semver(v)
        if parsed is None:
            raise InvalidAt(
                f"{path}[{i}]",
                f"{op} needs a semantic version string of at most {MAX_VERSION_LENGTH} characters",
            )
        versions.append(parsed)
    if not versions:
        return _never
    if op == "semVerEqual":
        exact = frozenset(versions)

        def equal(value: Any) -> bool:
            return parse_semver(value) in exact

        return equal
    if op == "semVerLessThan":
        highest = max(versions)

        def less(value: Any) -> bool:
            parsed = parse_semver(value)
            return parsed is not None and parsed < highest

        return less
    lowest = min(versions)

    def greater(value: Any) -> bool:
        parsed = parse_semver(value)
        return parsed is not None and parsed > lowest

    return greater


def compile_predicate(
    op: str, values: Sequence[Any], path: str
) -> tuple[Predicate, frozenset[str] | None]:
    """Compile a clause's values for ``op``.

    Returns the predicate and, for ``in``, the set of its string values (the clause uses it for a
    fast path on string attributes). ``path`` locates ``values``; problems raise ``InvalidAt``.
    """
    if op == "in":
        return _in(values, path)
    if op in STRING_OPS:
        return _string_op(op, values, path), None
    if op in NUMBER_OPS:
        return _number_op(op, values, path), None
    if op in DATE_OPS:
        return _date_op(op, values, path), None
    if op in SEMVER_OPS:
        return _semver_op(op, values, path), None
    raise InvalidAt("", f"unknown operator {op!r}")
