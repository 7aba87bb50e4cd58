"""``python -P -m relay``: the same as ``vane relay`` (``-P`` keeps the working directory off
``sys.path``, so a folder there named ``relay`` is not imported instead of this package)."""

from __future__ import annotations

import sys

from relay.cli import main

if __name__ == "__main__":
    sys.exit(main(["relay", *sys.argv[1:]]))
