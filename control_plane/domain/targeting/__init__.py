"""Targeting: clauses and what a rule serves, as the API takes and shows them, and their checks.

A base of the domains: flags' rules and fallthroughs, segments' rules and schedules' changes are
made of these, and none of them imports another for it. The meaning of each operator is the
engine's (``shared/engine/operators.py``); this package is the API's side of the same model.
"""
