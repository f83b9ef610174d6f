"""Demand a quota cannot use now takes no share of the weights (liveness scan, seed 1293).

Koordinator's water-filling shares a parent's room beyond the mins by weight among
the children with unmet demand. A child whose every waiting workload asks more than
it can get while its siblings keep their mins for their own demand cannot use that
share: it sat idle while a sibling's smaller jobs waited, on an idle cluster, for
ever. Such demand still holds its quota's min, but the weights go to demand that can
use them (``QuotaTree.room``, ``CycleState.unusable_ids``); its explanation says what
holds it, and the forecast sees the same split.
"""

from __future__ import annotations

from queueing.engine import run_cycle
from queueing.engine.invariants import check_cycle
from queueing.engine.types import QueueSpec, Snapshot

from .builders import node, quota, res, running, snapshot, workload

NOW = 1000.0


def gpu(n: int) -> dict[str, int]:
    return {"cpu": 1000, "nvidia.com/gpu": n}


def world(b_asks: int = 2) -> Snapshot:
    # 2 GPUs. a keeps its min of 1 for the job it runs; b's job asks ``b_asks``; c has
    # two 1-GPU jobs. Beyond a's min, 1 GPU is shared by weight between b and c.
    return snapshot(
        quotas=[
            quota("root"),
            quota("a", "root", min=res(gpu=1)),
            quota("b", "root"),
            quota("c", "root"),
        ],
        nodes=[node("n", {"cpu": 16000, "nvidia.com/gpu": 2})],
        workloads=[
            running(1, "a", "n", req=gpu(1), started_at=NOW - 10, expected_runtime_s=300.0),
            workload(2, "b", req=gpu(b_asks), expected_runtime_s=60.0, ts=0.0),
            workload(3, "c", req=gpu(1), expected_runtime_s=60.0, ts=1.0),
            workload(4, "c", req=gpu(1), expected_runtime_s=60.0, ts=2.0),
        ],
        queues=[QueueSpec("a"), QueueSpec("b", aging_bound_s=60.0), QueueSpec("c")],
        now=NOW,
    )


def test_a_share_nobody_in_its_quota_can_use_goes_to_a_sibling_that_can() -> None:
    snap = world()
    result = run_cycle(snap)
    # b's 2-GPU job can get at most 1 while a keeps its min: the free GPU goes to c.
    assert [a.workload_id for a in result.admissions] == [3]
    assert result.runtime_quota["b"].get("nvidia.com/gpu", 0) == 0
    assert result.runtime_quota["c"].get("nvidia.com/gpu", 0) == 1
    assert check_cycle(snap, result) == []
    e = result.explanations[2]
    assert (e.kind, e.limit, e.quota, e.starts_by) == ("quota", "guarantees", "b", None)
    assert e.sentence() == (
        "Waiting for quota: b is short by 1 nvidia.com/gpu and cannot borrow it: it "
        "requests 2 nvidia.com/gpu but b can get at most 1 nvidia.com/gpu while, within "
        "root, a (1 nvidia.com/gpu) keep their guaranteed minimum for their own demand; "
        "it can start when that demand falls, and meanwhile b's share goes to work that "
        "can use it."
    )
    # The forecast splits as the cycle does: c's second job follows its first, then
    # b's starts once a's job has ended and a's min is no longer held for it.
    eta4, eta2 = result.etas[4], result.etas[2]
    assert eta4.p50 is not None
    assert NOW < eta4.p50 <= NOW + 60
    assert eta2.p50 == NOW + 290  # a's job started 10 s ago and runs 300 s


def test_a_share_its_quota_can_use_is_kept() -> None:
    # b's job asks 1 GPU: it can use the share, and the tie goes by name, as before.
    result = run_cycle(world(b_asks=1))
    assert [a.workload_id for a in result.admissions] == [2]
    assert result.explanations[3].limit != "guarantees"
