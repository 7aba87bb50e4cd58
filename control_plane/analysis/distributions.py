"""The distribution functions the analyses use, each scipy's (``scipy.special``).

scipy, with numpy under it, is imported at the first call, not with the control plane: it is a
quarter of a control plane's start (about 0.5 s of CPU of 2), and most processes, and most
requests, compute no result. Every use of ``scipy.special`` goes through here."""

from __future__ import annotations

from functools import cache
from typing import Any


@cache
def _special() -> Any:  # scipy.special is untyped
    from scipy import special

    return special


def ndtr(x: float) -> float:
    """The standard normal CDF at ``x``."""
    return float(_special().ndtr(x))


def ndtri(p: float) -> float:
    """The standard normal quantile of ``p``."""
    return float(_special().ndtri(p))


def stdtr(df: float, t: float) -> float:
    """Student's t CDF with ``df`` degrees of freedom at ``t``."""
    return float(_special().stdtr(df, t))


def stdtrit(df: float, p: float) -> float:
    """Student's t quantile of ``p`` with ``df`` degrees of freedom."""
    return float(_special().stdtrit(df, p))


def chdtrc(df: float, x: float) -> float:
    """The chi-square survival function with ``df`` degrees of freedom at ``x``."""
    return float(_special().chdtrc(df, x))
