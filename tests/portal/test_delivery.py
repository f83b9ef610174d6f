"""portal.delivery: merging over the debounce and shaping by subscription (no I/O)."""

from __future__ import annotations

import pytest

from portal.delivery import Subscription, SubscriptionError, merge


def row(id: int, queue: int = 1, phase: str = "Pending", position: int | None = None, **kw):
    base = {
        "id": id, "name": f"w{id}", "namespace": "ns", "queue_id": queue, "queue": f"q{queue}",
        "quota_id": 1, "quota": "q", "phase": phase, "priority": 0, "position": position,
        "global_position": position, "eta_p50": None, "eta_p90": None, "reason": "",
        "queue_order_at": "2026-01-05T09:00:00+00:00", "admitted_at": None,
        "started_at": None, "finished_at": None,
    }  # fmt: skip
    return base | kw


def frame(changes, removed=(), cycle=None, tenant=7):
    return {
        "type": "workloads",
        "tenant": tenant,
        "cycle": cycle,
        "at": "2026-01-05T09:00:00+00:00",
        "changes": list(changes),
        "removed": list(removed),
    }


def test_the_last_row_of_a_workload_wins_and_removals_accumulate():
    out = merge(
        [
            frame([row(1, position=3), row(2, position=4)], cycle=10),
            frame([row(1, position=1)], cycle=11),
            frame([row(3, phase="Succeeded")], removed=[3]),
        ],
        Subscription(),
    )
    assert len(out) == 1
    assert out[0]["cycle"] == 11
    assert {r["id"]: r["position"] for r in out[0]["changes"]} == {1: 1, 2: 4, 3: None}
    assert out[0]["removed"] == [3]


def test_a_queue_subscription_drops_other_queues_and_windows_long_ones():
    sub = Subscription.parse({"queues": [{"id": 1, "from": 1, "to": 100}, 2], "workloads": [9]})
    out = merge(
        [
            frame(
                [
                    row(1, position=5),
                    row(2, position=150),  # outside the window: a stub
                    row(3, position=None),  # unranked: whole
                    row(4, queue=2, position=999),  # queue 2 has no window
                    row(5, queue=3, position=1),  # not subscribed
                    row(9, queue=3, position=2),  # but this workload is
                    row(6, phase="Admitted"),  # left the waiting list: whole
                ]
            )
        ],
        sub,
    )[0]
    by_id = {r["id"]: r for r in out["changes"]}
    assert set(by_id) == {1, 2, 3, 4, 6, 9}
    assert by_id[2] == {"id": 2, "queue_id": 1, "phase": "Pending", "position": 150}
    assert all("name" in by_id[i] for i in (1, 3, 4))


def test_removals_of_unsubscribed_queues_are_not_sent():
    sub = Subscription.parse({"queues": [1]})
    out = merge([frame([row(5, queue=3, phase="Cancelled")], removed=[5])], sub)
    assert out == []


def test_a_summary_subscription_gets_one_activity_frame():
    out = merge(
        [frame([row(1), row(2, queue=4)]), frame([row(1, position=2)], removed=[8])],
        Subscription.parse({"summary": True}),
    )
    assert out == [
        {
            "type": "activity",
            "tenant": 7,
            "cycle": None,
            "at": "2026-01-05T09:00:00+00:00",
            "queues": [1, 4],
            "workloads": 3,
        }
    ]


def test_quota_frames_merge_by_quota_and_other_types_pass_through():
    quotas = {"type": "quotas", "tenant": 7, "cycle": 3, "at": None}
    out = merge(
        [
            {"type": "notice", "text": "hi"},
            quotas | {"quotas": [{"id": 1, "name": "a", "runtime": {"cpu": 1}}]},
            quotas | {"quotas": [{"id": 1, "name": "a", "runtime": {"cpu": 2}}]},
        ],
        Subscription(),
    )
    assert out[0] == {"type": "notice", "text": "hi"}
    assert out[1]["quotas"] == [{"id": 1, "name": "a", "runtime": {"cpu": 2}}]


@pytest.mark.parametrize(
    "message",
    [
        {"queues": "some"},
        {"queues": [0]},
        {"queues": [{"id": 1, "from": 5, "to": 2}]},
        {"queues": [{"id": True}]},
        {"workloads": "all"},
        {"workloads": [1.5]},
        {"summary": "yes"},
        {"queues": list(range(1, 1002))},
    ],
)
def test_a_bad_subscription_is_refused(message):
    with pytest.raises(SubscriptionError):
        Subscription.parse(message)


def test_a_subscription_describes_itself():
    message = {"queues": [2, {"id": 1, "from": 1, "to": 50}], "workloads": [3], "summary": False}
    assert Subscription.parse(message).describe() == {
        "queues": [{"id": 1, "from": 1, "to": 50}, 2],
        "workloads": [3],
        "summary": False,
    }
