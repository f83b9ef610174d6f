"""Resources semantics, backoff and the usage ledger."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queueing.engine import backoff, ledger
from queueing.engine.resources import EMPTY, Resources


def test_resources_drop_zeros_and_compare_like_mappings() -> None:
    r = Resources({"cpu": 1000, "memory": 0})
    assert dict(r) == {"cpu": 1000}
    assert r == {"cpu": 1000, "gpu": 0}
    assert r["cpu"] == 1000
    assert r.get("memory") == 0  # absent means zero
    assert hash(r) == hash(Resources(cpu=1000))
    assert not EMPTY
    assert Resources.from_dict({"cpu": "250"}) == Resources(cpu=250)
    assert r.to_dict() == {"cpu": 1000}
    with pytest.raises(TypeError):
        Resources({"cpu": 1.5})  # type: ignore[dict-item]


def test_resources_arithmetic() -> None:
    a = Resources(cpu=4, memory=8)
    b = Resources(cpu=1, gpu=2)
    assert a + b == Resources(cpu=5, memory=8, gpu=2)
    assert a - b == Resources(cpu=3, memory=8, gpu=-2)
    assert (a - b).negatives() == Resources(gpu=2)
    assert (a - b).clamp() == Resources(cpu=3, memory=8)
    assert a * 3 == 3 * a == Resources(cpu=12, memory=24)
    assert a * 0 == EMPTY
    assert Resources(cpu=3).scale(0.5) == Resources(cpu=2)  # rounds up
    assert a.union_max(b) == Resources(cpu=4, memory=8, gpu=2)
    assert a.union_min(b) == Resources(cpu=1)
    assert Resources.total([a, b, b]) == Resources(cpu=6, memory=8, gpu=4)


def test_fit_semantics_are_explicit() -> None:
    pod = Resources(cpu=2, gpu=1)
    assert not pod.fits({"cpu": 4})  # absent limit = zero: a node without GPUs
    assert pod.fits({"cpu": 4, "gpu": 1})
    assert pod.fits_ceiling({"cpu": 4})  # absent ceiling = unbounded: a quota max
    assert not pod.fits_ceiling({"gpu": 0})
    assert not pod.fits_ceiling(Resources(cpu=1))  # Resources ceilings too
    assert pod.shortfall({"cpu": 1}) == Resources(cpu=1, gpu=1)


def test_dominant_share_is_zero_safe() -> None:
    assert EMPTY.dominant_share({}) == 0.0
    assert Resources(cpu=2, gpu=1).dominant_share({"cpu": 8, "gpu": 2}) == 0.5
    assert Resources(cpu=2).dominant_share({"cpu": 8}, weight=2.0) == 0.125
    assert math.isinf(Resources(gpu=1).dominant_share({"cpu": 8}))
    assert math.isinf(Resources(cpu=1).dominant_share({"cpu": 8}, weight=0))


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["cpu", "memory", "gpu"]), st.integers(-10, 10)),
    st.dictionaries(st.sampled_from(["cpu", "memory", "gpu"]), st.integers(-10, 10)),
)
def test_add_then_subtract_round_trips(a: dict[str, int], b: dict[str, int]) -> None:
    ra, rb = Resources(a), Resources(b)
    assert ra + rb - rb == ra
    assert ra + rb == rb + ra
    assert all(v != 0 for v in (ra + rb).values())


def test_backoff_is_exponential_capped_and_deterministic() -> None:
    assert backoff.requeue_at(100.0, 1, 10, 600, 0) == 110.0
    assert backoff.requeue_at(100.0, 3, 10, 600, 0) == 140.0
    assert backoff.requeue_at(100.0, 30, 10, 600, 0) == 700.0
    assert backoff.requeue_at(100.0, 0, 10, 600, 0) == 100.0
    a = backoff.requeue_at(0.0, 4, 10, 600, 0.1, seed=42)
    assert a == backoff.requeue_at(0.0, 4, 10, 600, 0.1, seed=42)
    assert 72.0 <= a < 88.0
    assert {backoff.delay(4, 10, 600, 0.1, seed=s) for s in range(20)} != {80.0}
    # Jitter never pushes past the cap.
    assert all(backoff.delay(50, 10, 600, 0.5, seed=s) <= 600 for s in range(50))


def test_ledger_decays_by_half_life() -> None:
    assert ledger.decay({"cpu": 100.0}, 3600, 3600) == {"cpu": 50.0}
    assert ledger.decay({"cpu": 100.0}, 0, 3600) == {"cpu": 100.0}


def test_ledger_charge_integrates_usage_and_converges() -> None:
    tau = ledger.mean_life(3600)
    one_step = ledger.charge({}, {"cpu": 10}, 3600, 3600)
    assert one_step["cpu"] == pytest.approx(10 * tau * 0.5)
    # Many steps equal one long step, and the ledger converges to usage * tau.
    stepwise: dict[str, float] = {}
    for _ in range(100):
        stepwise = ledger.charge(stepwise, {"cpu": 10}, 360, 3600)
    assert stepwise["cpu"] == pytest.approx(ledger.charge({}, {"cpu": 10}, 36000, 3600)["cpu"])
    assert ledger.steady_state({"cpu": 10}, 3600)["cpu"] == pytest.approx(10 * tau)
    # No half-life: the plain integral.
    assert ledger.charge({"cpu": 5.0}, {"cpu": 2}, 10, 0) == {"cpu": 20.0}


def test_entry_penalty_accounts_a_burst_at_once() -> None:
    charged = ledger.charge({}, {}, 0, 3600, admitted={"cpu": 4}, entry_penalty_s=600)
    assert charged == {"cpu": 2400.0}
    assert ledger.entry_penalty({"cpu": 1.0}, {"cpu": 2}, 0) == {"cpu": 1.0}
