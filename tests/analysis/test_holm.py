"""Holm's step-down adjustment on a hand-computed example."""

from __future__ import annotations

import pytest

from control_plane.analysis import holm, holm_by_key


def test_holm_hand_computed() -> None:
    # sorted: 0.005·4 = 0.02; 0.01·3 = 0.03; 0.03·2 = 0.06; 0.04·1 = 0.04 → max(0.06, 0.04) = 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_holm_caps_at_one_and_keeps_a_single_p_value() -> None:
    assert holm([0.4, 0.9]) == pytest.approx([0.8, 0.9])
    assert holm([0.6, 0.7, 0.8]) == pytest.approx([1.0, 1.0, 1.0])
    assert holm([0.0123]) == [0.0123]
    assert holm([]) == []


def test_holm_by_key_skips_missing_p_values() -> None:
    adjusted = holm_by_key({"a": 0.01, "b": None, "c": 0.04})
    assert adjusted == {"a": pytest.approx(0.02), "b": None, "c": pytest.approx(0.04)}
