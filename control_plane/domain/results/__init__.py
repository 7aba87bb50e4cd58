"""Results: what an experiment's or a flag's exposures and events say, and how sure it is.

A base of the domains, shared by experiments and flag metrics (neither imports the other):

- ``aggregates.py``: the per-arm sufficient statistics, in SQL over exposures and events;
- ``timeseries.py``: the same, cumulative per UTC day, in one pass;
- ``cache.py``: both kept by the events they read (the ingest generation);
- ``subject.py``: ``analyse_subject``, the results block of a subject (the engines of
  ``control_plane.analysis`` on those statistics, the decision, the power block).
"""
