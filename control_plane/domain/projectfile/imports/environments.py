"""Which of a file's environments an import sets, and as which of Vane's environments.

A file of several environments (an Unleash export, LaunchDarkly's REST list of flags) is
imported environment by environment: ``--env NAME`` takes the file's ``NAME`` into the Vane
environment of the same key (lowercased, as keys are), ``--env THEIRS=OURS`` the file's
``THEIRS`` into Vane's ``OURS``, ``--all-environments`` each of the file's into the Vane
environment of the same key (``THEIRS=OURS`` naming the exceptions). A file of one environment
(LaunchDarkly's relay or SDK data file, flagd) goes to each ``--env`` given: the same settings
in each. Whether the Vane environments exist is the caller's to check (the converters are pure
functions of the file and ``Wanted``)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from control_plane.domain.projectfile.imports import KEY_PATTERN, Refused

DEFAULT = "production"
Target = tuple[str | None, str]
"""The file's environment (``None`` for a file of one environment) and the Vane environment its
settings go to."""


@dataclass(frozen=True)
class Wanted:
    """``--env`` as given (each ``NAME`` or ``THEIRS=OURS``; none: ``production``) and
    ``--all-environments``."""

    given: tuple[str, ...] = ()
    every: bool = False


def malformed(value: str) -> bool:
    """Whether ``value`` is neither ``NAME`` nor ``THEIRS=OURS``."""
    theirs, mapped, ours = value.partition("=")
    return not theirs or (bool(mapped) and (not ours or "=" in ours))


def vane_key(name: str, *, mapped_hint: bool) -> str:
    """An environment's name as a Vane key: lowercased, refused if even then it is not one."""
    if KEY_PATTERN.match(name.lower()):
        return name.lower()
    hint = f": map it with --env {name!r}=OURS" if mapped_hint else ""
    raise Refused(
        f"environment {name!r}",
        f"not a Vane key (a-z, 0-9, '_', '.', '-', up to 128){hint}",
    )


def targets(
    found: Collection[str] | None, wanted: Wanted | str, what: str = "the file"
) -> list[Target]:
    """The environments to import, each once, in order: ``found`` is the file's environments,
    or ``None`` for a file of one environment (``what``, as a refusal names it)."""
    if isinstance(wanted, str):
        wanted = Wanted((wanted,))
    given = wanted.given or (() if wanted.every else (DEFAULT,))
    for value in given:
        if malformed(value):
            raise Refused(f"--env {value}", "neither ENV nor THEIRS=OURS")
    if found is None:
        one = f"{what} holds one environment's flags"
        if wanted.every:
            raise Refused("--all-environments", f"{one}: name where they go with --env")
        for value in given:
            if "=" in value:
                raise Refused(f"--env {value}", f"{one}: give --env OURS (repeat it for several)")
        chosen: list[Target] = [(None, vane_key(v, mapped_hint=False)) for v in given]
    else:
        chosen = []
        for value in given:
            theirs, mapped, ours = value.partition("=")
            chosen.append((theirs, ours if mapped else vane_key(theirs, mapped_hint=True)))
        if wanted.every:
            named = {theirs for theirs, _ in chosen}
            chosen += [(e, vane_key(e, mapped_hint=True)) for e in sorted(found) if e not in named]
        for named_as, _ in chosen:
            if named_as not in found:
                has = ", ".join(sorted(found)) or "none"
                raise Refused(
                    f"environment {named_as!r}", f"not in the file (its environments: {has})"
                )
    unique = sorted(set(chosen), key=lambda t: (t[0] or "", t[1]))
    _once_each(unique)
    return unique


def _once_each(chosen: list[Target]) -> None:
    """Two of the file's environments into one of Vane's would write one over the other."""
    into: dict[str, str | None] = {}
    for theirs, ours in chosen:
        if ours in into:
            raise Refused(
                f"environment {ours!r}",
                f"both the file's {into[ours]!r} and {theirs!r} would go to it: map one "
                "elsewhere with --env THEIRS=OURS",
            )
        into[ours] = theirs
