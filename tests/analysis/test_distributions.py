"""scipy is loaded by the first result computed, not by a control plane's start (it and numpy
were a quarter of a start's CPU)."""

from __future__ import annotations

import subprocess
import sys


def _loaded(code: str) -> set[str]:
    listed = "; print(' '.join(sorted({name.split('.')[0] for name in sys.modules})))"
    return set(
        subprocess.run(
            [sys.executable, "-P", "-c", f"import sys; {code}{listed}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    )


def test_a_control_plane_starts_without_scipy_and_loads_it_for_a_result() -> None:
    started = _loaded("import vane.cli, control_plane.entry.cli, control_plane.app")
    assert "control_plane" in started
    assert not started & {"scipy", "numpy"}
    computed = _loaded(
        "from control_plane.analysis import Moments, analyse; "
        "print(analyse(Moments(100, 10.0, 20.0), {'b': Moments(100, 12.0, 25.0)}), file=sys.stderr)"
    )
    assert {"scipy", "numpy"} <= computed
