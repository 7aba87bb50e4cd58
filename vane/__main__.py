"""``python -P -m vane …``: the same as the ``vane`` command."""

from __future__ import annotations

import sys

from vane.cli import main

if __name__ == "__main__":
    sys.exit(main())
