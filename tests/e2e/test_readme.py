"""The README's quick start, run as written (its shell blocks through bash and curl) against a
real control plane and relay: staging serves the rule, production (the key ``make up`` prints)
is untouched and says so."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_relays import ControlPlane, Relay, eventually, start_control_plane, start_relay

pytestmark = pytest.mark.e2e

README = Path(__file__).resolve().parents[2] / "README.md"


def quick_start_blocks() -> list[str]:
    text = README.read_text()
    section = text[text.index("## Quick start") : text.index("In a page, one tag runs")]
    return re.findall(r"```sh\n(.*?)```", section, re.S)[1:]  # after `make up` / `make test`


def run(script: str) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[ControlPlane, Relay]]:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    cp = start_control_plane(f"sqlite:///{tmp_path / 'vane.db'}", tmp_path)
    relay = start_relay(cp.url, cp.keys["relay"], tmp_path / "relay")
    try:
        yield cp, relay
    finally:
        relay.process.stop()
        cp.process.stop()


def test_the_quick_start_works_as_written(stack: tuple[ControlPlane, Relay]) -> None:
    cp, relay = stack
    change, read = quick_start_blocks()

    def local(script: str) -> str:
        return script.replace("localhost:8000", cp.url).replace("localhost:8100", relay.url)

    out = run(local(change).replace("KEY=vsk_live_…", f"KEY={cp.keys['management']}"))
    answers = json_values(out)
    assert len(answers) == 4, out
    staging_key = answers[-1]["key"]
    assert answers[-1]["environment"] == "staging"

    script = local(read).replace("STAGING_PK=pk_live_…", f"STAGING_PK={staging_key}")
    script = script.replace("PRODUCTION_PK=pk_live_…", f"PRODUCTION_PK={cp.keys['public']}")
    expected = [(value, reason) for value, reason in re.findall(r'# "([^"]+)", (\w+)', read)]
    assert len(expected) == 3

    def as_written() -> bool:
        served = [(x.get("value"), x.get("reason")) for x in json_values(run(script))]
        return served == expected

    eventually(as_written, timeout=20, what=f"the relay answers as the README says: {expected}")


def json_values(text: str) -> list[dict[str, object]]:
    """The JSON documents curl printed one after another (with or without newlines)."""
    decoder = json.JSONDecoder()
    values, position = [], 0
    text = text.strip()
    while position < len(text):
        value, position = decoder.raw_decode(text, position)
        values.append(value)
        while position < len(text) and text[position].isspace():
            position += 1
    return values


def test_the_ratio_metric_example_works_as_written(stack: tuple[ControlPlane, Relay]) -> None:
    cp, _ = stack
    text = README.read_text()
    section = text[text.index("A **ratio metric** divides") :]
    script = re.findall(r"```sh\n(.*?)```", section, re.S)[0]
    rate = float(re.findall(r'# u1\'s variant: "rate": ([\d.]+)', script)[0])
    env = (
        f"CP={cp.url}\nMGMT='Authorization: Bearer {cp.keys['management']}'\n"
        f"SERVER={cp.keys['server']}\n"
    )
    answers = json_values(run(env + script))
    metric, experiment, _, assigned = answers[:4]
    assert metric["aggregation"] == "ratio"
    assert experiment["cuped"] is True
    results: Any = answers[-1]["results"]
    assert results["metric"]["key"] == metric["key"]
    by_key = {v["key"]: v for v in results["variants"]}
    assert by_key[assigned["variant"]]["exposed"] == 1
    assert by_key[assigned["variant"]]["rate"] == rate


def test_the_layers_and_holdouts_example_works_as_written(
    stack: tuple[ControlPlane, Relay],
) -> None:
    cp, _ = stack
    text = README.read_text()
    section = text[text.index("### Layers and holdouts") : text.index("Every formula")]
    (block,) = re.findall(r"```sh\n(.*?)```", section, re.S)
    script = block.replace("localhost:8000", cp.url)
    out = run(script.replace("KEY=vsk_live_…", f"KEY={cp.keys['management']}"))
    answers: list[Any] = json_values(out)
    assert len(answers) == 8, out
    metric, layer, holdout, one_page, express, listed, assigned, results = answers
    assert (layer["key"], holdout["share"], holdout["status"]) == ("checkout", 0.05, "running")
    assert one_page["range"] == {"start": 0.0, "end": 0.6}
    assert express["range"] == {"start": 0.6, "end": 1.0}
    assert [(r["experiment"], r["start"], r["end"]) for r in listed["running"]] == [
        ("one-page", 0.0, 0.6),
        ("express-pay", 0.6, 1.0),
    ]
    assert listed["free"] == 0
    assert assigned["experiment"] == "one-page"
    assert results["results"]["control"] == "holdout"
    assert metric["key"] == "purchases"


def test_the_results_by_dimension_example_works_as_written(
    stack: tuple[ControlPlane, Relay],
) -> None:
    cp, _ = stack
    text = README.read_text()
    section = text[text.index("### Results by dimension") : text.index("### Layers and holdouts")]
    (block,) = re.findall(r"```sh\n(.*?)```", section, re.S)
    script = block.replace("localhost:8000", cp.url)
    out = run(script.replace("KEY=vsk_live_…", f"KEY={cp.keys['management']}"))
    answers: list[Any] = json_values(out)
    assert len(answers) == 8, out
    _, experiment, _, *assigned, split, series = answers
    assert experiment["dimensions"] == ["country"]
    assert all(a["assigned"] for a in assigned)
    block_ = split["results"]["dimension"]
    assert (block_["name"], block_["correction"]) == ("country", "holm")
    slices = {(s["value"] or s["slice"]): (s["exposed"], s["tested"]) for s in block_["slices"]}
    assert slices == {"DE": (1, False), "FR": (1, False), "none": (1, False)}
    assert series["slice"] == {"dimension": "country", "value": "DE", "slice": "value"}
