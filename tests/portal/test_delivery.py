"""portal.delivery: merging notifications over the debounce, deciding what to read, and
diffing what was read against what was sent (no I/O)."""

from __future__ import annotations

import pytest

from portal.delivery import (
    MAX_PULL_IDS,
    Buffer,
    ListsResult,
    QueueLists,
    RowsById,
    RowsResult,
    Stream,
    Subscription,
    SubscriptionError,
    WindowRows,
)


def row(id: int, queue: int = 1, phase: str = "Pending", position: int | None = None, **kw):
    base = {
        "id": id, "name": f"w{id}", "namespace": "ns", "queue_id": queue, "queue": f"q{queue}",
        "quota_id": 1, "quota": "q", "phase": phase, "priority": 0, "position": position,
        "global_position": position, "eta_p50": None, "eta_p90": None, "reason": "",
        "queue_order_at": "2026-01-05T09:00:00+00:00", "admitted_at": None,
        "started_at": None, "finished_at": None,
    }  # fmt: skip
    return base | kw


def changed(queues, ids, key="k1", cycle=None, tenant=7, count=None):
    return {
        "type": "changed",
        "tenant": tenant,
        "cycle": cycle,
        "at": "2026-01-05T09:00:00+00:00",
        "key": key,
        "queues": list(queues),
        "workloads": None if ids is None else list(ids),
        "count": count if count is not None else len(ids or ()),
    }


def notice_of(*payloads):
    buffer = Buffer()
    for payload in payloads:
        buffer.add(payload)
    passthrough, notices = buffer.drain()
    assert not buffer
    return passthrough, notices


def window_results(queue, lo, hi, rows, pending=None, holding=(), finished=()):
    return {
        QueueLists(queue): ListsResult(
            pending=len(rows) if pending is None else pending,
            holding=len(holding),
            holding_rows=tuple(holding),
            finished_rows=tuple(finished),
        ),
        WindowRows(queue, lo, hi): RowsResult(rows=tuple(rows)),
    }


def test_notifications_merge_per_tenant_and_the_latest_key_names_the_reads():
    _, notices = notice_of(
        changed([1], [10, 11], key="a", cycle=4),
        changed([2], [12], key="b"),
        changed([1], [13], key="c", tenant=8),
    )
    seven, eight = notices[7], notices[8]
    assert (seven.queues, seven.ids, seven.key, seven.cycle) == ({1, 2}, {10, 11, 12}, "b", 4)
    assert (seven.many, seven.workload_count) == (False, 3)
    assert (eight.queues, eight.ids, eight.key) == ({1}, {13}, "c")


def test_a_count_only_notification_makes_the_notice_too_many_to_read_by_id():
    _, notices = notice_of(changed([1], [10]), changed([1], None, count=5000))
    assert notices[7].many
    assert notices[7].too_many
    assert notices[7].workload_count == 5001


def test_a_window_reads_its_queue_only_when_the_queue_changed():
    stream = Stream(Subscription.parse({"queues": [{"id": 1, "from": 1, "to": 100}, 2]}))
    _, notices = notice_of(changed([3], [10]))
    assert stream.needs(notices[7]) == []
    _, notices = notice_of(changed([1, 3], [10]))
    assert stream.needs(notices[7]) == [QueueLists(1), WindowRows(1, 1, 100)]


def test_a_window_gets_whole_rows_then_only_what_changed_and_stubs_for_rows_that_left():
    stream = Stream(Subscription.parse({"queues": [{"id": 1, "from": 1, "to": 2}]}))
    _, notices = notice_of(changed([1], None, count=3))
    notice = notices[7]
    first = window_results(1, 1, 2, [row(1, position=1), row(2, position=2)], pending=3)
    assert stream.left(notice, first) is None
    [frame] = stream.frames(7, notice, first)
    assert [r["id"] for r in frame["changes"]] == [1, 2]
    assert frame["windows"] == [
        {"queue": 1, "from": 1, "to": 2, "pending": 3, "holding": 0, "ids": [1, 2]}
    ]
    assert stream.frames(7, notice, first) == [], "nothing changed, nothing sent"

    # Workload 3 jumps to the head: 1 moves to 2, 2 leaves the window (to position 3).
    second = window_results(1, 1, 2, [row(3, position=1), row(1, position=2)], pending=3)
    left = stream.left(notice, second)
    assert left == RowsById((2,))
    second[left] = RowsResult(rows=(row(2, position=3),))
    [frame] = stream.frames(7, notice, second)
    by_id = {r["id"]: r for r in frame["changes"]}
    assert set(by_id) == {1, 2, 3}
    assert by_id[2] == {"id": 2, "queue_id": 1, "phase": "Pending", "position": 3}
    assert frame["windows"][0]["ids"] == [3, 1]
    assert frame["removed"] == []


def test_admitted_and_finished_rows_move_to_their_lists_and_finished_ones_are_removed():
    stream = Stream(Subscription.parse({"queues": [{"id": 1, "from": 1, "to": 10}]}))
    _, notices = notice_of(changed([1], [1, 2]))
    notice = notices[7]
    stream.frames(7, notice, window_results(1, 1, 10, [row(1, position=1), row(2, position=2)]))
    admitted = row(1, phase="Admitted")
    done = row(2, phase="Succeeded", finished_at="2026-01-05T09:01:00+00:00")
    results = window_results(1, 1, 10, [], holding=[admitted], finished=[done])
    assert stream.left(notice, results) is None  # both are in lists that were read
    [frame] = stream.frames(7, notice, results)
    assert {r["id"]: r["phase"] for r in frame["changes"]} == {1: "Admitted", 2: "Succeeded"}
    assert frame["removed"] == [2]
    assert frame["windows"][0] | {"ids": None} == {
        "queue": 1, "from": 1, "to": 10, "pending": 0, "holding": 1, "ids": None,
    }  # fmt: skip


def test_every_queue_gets_rows_by_id_and_too_many_gets_a_resync_instead():
    stream = Stream()  # queues: "*"
    _, notices = notice_of(changed([1, 2], [5, 6]))
    assert stream.needs(notices[7]) == [RowsById((5, 6))]
    results = {RowsById((5, 6)): RowsResult(rows=(row(5), row(6, queue=2, phase="Cancelled")))}
    [frame] = stream.frames(7, notices[7], results)
    assert [r["id"] for r in frame["changes"]] == [5, 6]
    assert frame["removed"] == [6]
    assert "windows" not in frame

    _, notices = notice_of(changed([1], list(range(1, MAX_PULL_IDS + 2))))
    assert stream.needs(notices[7]) == []
    [frame] = stream.frames(7, notices[7], {})
    assert frame == {
        "type": "resync",
        "tenant": 7,
        "cycle": None,
        "at": "2026-01-05T09:00:00+00:00",
        "queues": [1],
    }


def test_a_plain_queue_gets_the_named_rows_of_that_queue_only():
    stream = Stream(Subscription.parse({"queues": [1]}))
    _, notices = notice_of(changed([1, 3], [5, 9]))
    results = {RowsById((5, 9)): RowsResult(rows=(row(5), row(9, queue=3)))}
    [frame] = stream.frames(7, notices[7], results)
    assert [r["id"] for r in frame["changes"]] == [5]


def test_a_workload_is_read_when_named_or_when_its_queue_moved_in_a_count_only_notice():
    stream = Stream(Subscription.parse({"queues": [], "workloads": [9]}))
    _, named = notice_of(changed([3], [9, 10]))
    assert stream.needs(named[7]) == [RowsById((9,))]
    versioned = {RowsById((9,)): RowsResult(rows=(row(9, queue=3),), versions={9: "v1"})}
    [frame] = stream.frames(7, named[7], versioned)
    assert [r["id"] for r in frame["changes"]] == [9]
    assert stream.frames(7, named[7], versioned) == [], "same version: nothing to send"

    _, elsewhere = notice_of(changed([4], None, count=900))
    assert stream.needs(elsewhere[7]) == [], "its queue (3) did not change"
    _, here = notice_of(changed([3], None, count=900))
    assert stream.needs(here[7]) == [RowsById((9,))]


def test_a_summary_gets_activity_from_the_notifications_without_reading():
    stream = Stream(Subscription.parse({"summary": True}))
    _, notices = notice_of(changed([1], [1, 2]), changed([4], [2, 8], cycle=5))
    assert stream.needs(notices[7]) == []
    assert stream.frames(7, notices[7], {}) == [
        {
            "type": "activity",
            "tenant": 7,
            "cycle": 5,
            "at": "2026-01-05T09:00:00+00:00",
            "queues": [1, 4],
            "workloads": 3,
        }
    ]


def test_quota_frames_merge_by_quota_and_other_types_pass_through():
    quotas = {"type": "quotas", "tenant": 7, "cycle": 3, "at": None}
    passthrough, notices = notice_of(
        {"type": "notice", "text": "hi"},
        quotas | {"quotas": [{"id": 1, "name": "a", "runtime": {"cpu": 1}}]},
        quotas | {"quotas": [{"id": 1, "name": "a", "runtime": {"cpu": 2}}]},
    )
    assert passthrough == [{"type": "notice", "text": "hi"}]
    assert Stream().needs(notices[7]) == []
    [frame] = Stream().frames(7, notices[7], {})
    assert frame["quotas"] == [{"id": 1, "name": "a", "runtime": {"cpu": 2}}]


def test_a_new_subscription_starts_from_nothing_sent():
    stream = Stream(Subscription.parse({"queues": [{"id": 1, "from": 1, "to": 5}]}))
    _, notices = notice_of(changed([1], [1]))
    results = window_results(1, 1, 5, [row(1, position=1)])
    assert stream.frames(7, notices[7], results)
    assert stream.frames(7, notices[7], results) == []
    stream.subscribe(Subscription.parse({"queues": [{"id": 1, "from": 1, "to": 5}]}))
    assert stream.frames(7, notices[7], results), "after a resubscribe the window comes whole"


@pytest.mark.parametrize(
    "message",
    [
        {"queues": "some"},
        {"queues": [0]},
        {"queues": [{"id": 1, "from": 5, "to": 2}]},
        {"queues": [{"id": 1, "from": 1, "to": 501}]},
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


def test_streams_that_were_sent_the_same_results_share_a_lineage_and_others_do_not():
    sub = {"queues": [{"id": 1, "from": 1, "to": 5}]}
    a, b, late = (Stream(Subscription.parse(sub)) for _ in range(3))
    assert a.lineage == b.lineage == late.lineage, "nothing sent yet: equal"
    _, notices = notice_of(changed([1], [1]))
    outcome = a.diff(7, notices[7], window_results(1, 1, 5, [row(1, position=1)]))
    a.adopt(outcome)
    b.adopt(outcome)  # b was in a's state, so a's outcome is b's too
    assert a.lineage == b.lineage != late.lineage
    following = a.diff(7, notices[7], window_results(1, 1, 5, [row(1, position=2)]))
    with pytest.raises(ValueError, match="another stream"):
        late.adopt(following)  # late never got the first frames: not its outcome
    # The same rows read again are other results: equal content, but not known to be.
    late.frames(7, notices[7], window_results(1, 1, 5, [row(1, position=1)]))
    assert late.view.queues[1].window == a.view.queues[1].window
    assert late.lineage != a.lineage
