"""Results: what an experiment's or a flag's exposures and events say, and how sure it is.

A base of the domains, shared by experiments and flag metrics (neither imports the other):

- the per-arm sufficient statistics, in SQL over exposures and events: ``sql.py`` (a metric's
  spec and per-unit values), ``units.py`` (one row per exposed unit, its slice), ``sums.py``
  (the sums per arm, and per slice), ``partitions.py`` (PostgreSQL's unit ranges, run at once),
  ``caps.py`` (percentile caps);
- ``timeseries.py``: the same, cumulative per UTC day, in one pass;
- ``cache.py``: both kept by the events they read (the ingest generation);
- ``subject.py``: ``analyse_subject``, the results block of a subject (the engines of
  ``control_plane.analysis`` on those statistics, the decision, the power block).
"""
