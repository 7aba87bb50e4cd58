"""The relay's routes, one module per API; ``compose.py`` registers them all.

What every browser endpoint shares lives beside them, one concern a module: ``admission.py`` (the
gate), ``callers.py`` (who is calling), ``ratelimit.py``, ``contexts.py`` (the request's context)
and ``views.py`` (cached encodings of one snapshot).
"""
