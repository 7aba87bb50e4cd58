"""The ``vane`` command: a thin entry point that imports only the side a command runs."""
