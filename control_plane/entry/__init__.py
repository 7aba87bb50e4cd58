"""Where the control plane starts: every way in, in one place.

- ``cli.py``: ``vane`` on the control plane's side (serve, migrate, keys, code references);
  ``python -m control_plane.entry.cli``, which ``vane/cli.py`` runs.
- ``up.py``: ``vane up``, the whole system on one machine (a control plane and a relay).
- ``flags_as_code.py``: ``vane export``, ``vane plan``, ``vane apply`` and ``vane import``, a client of the
  API's ``/export``, ``/plan`` and ``/apply`` (issue #36).
- ``oneshot.py``: one unit of work as the CLI actor, for the commands that write.
- ``bootstrap.py``: the first start of a database (the default project, its environments and
  first keys), run by the app (``control_plane/app.py``) and by the CLI.
"""
