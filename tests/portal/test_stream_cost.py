"""What the live stream costs per cycle does not grow with the queue's length.

Generation sends a notification of bounded size however many workloads changed, and a
subscriber of one window of a long queue reads and receives O(window) rows when every
position in the queue shifts. Sizes are counted in bytes and rows, never timed.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from django.db import connection
from django.db.models import Case, F, Value, When
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.delivery import Stream, Subscription
from portal.event_schema import NOTIFICATIONS, SERVER_MESSAGES
from portal.stream_queries import deliver_now
from queueing import admission, events
from queueing.choices import WAITING_PHASES
from queueing.models import Workload
from tests.builders import submit

LONG = 5000
WINDOW = 100


def size(message: dict[str, Any]) -> int:
    return len(json.dumps(message, separators=(",", ":")))


@pytest.fixture
def sent(monkeypatch) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    monkeypatch.setattr(events, "send", lambda tenant_id, payload: out.append(payload))
    return out


def fill(site, n: int) -> list[int]:
    """``n`` waiting workloads of the site's queue at positions 1..n; their ids in order."""
    now = timezone.now()
    Workload.objects.bulk_create(
        Workload(
            tenant=site.tenant,
            quota=site.quota,
            queue=site.queue,
            name=f"job-{i:05d}",
            namespace="team-a",
            pod_sets=[{"name": "main", "count": 1, "requests": {"cpu": 1000}}],
            total_request={"cpu": 1000},
            queue_order_at=now,
            position=i + 1,
            global_position=i + 1,
            reason="Waiting for quota: the queue's runtime quota is short.",
        )
        for i in range(n)
    )
    return list(
        Workload.objects.filter(queue=site.queue).order_by("position").values_list("id", flat=True)
    )


def shift_everyone(site, ids: list[int], django_capture_on_commit_callbacks) -> None:
    """One cycle: the head goes to the back and every other workload moves up by one."""
    with django_capture_on_commit_callbacks(execute=True):
        Workload.objects.filter(queue=site.queue, phase__in=WAITING_PHASES).update(
            position=Case(When(position=1, then=Value(len(ids))), default=F("position") - 1)
        )
        events.notify_changes(((site.tenant.pk, site.queue.pk, i) for i in ids), cycle_id=None)


@pytest.mark.parametrize("changed", [1, events.MAX_IDS, events.MAX_IDS + 1, LONG])
def test_a_notification_stays_small_however_many_workloads_changed(
    site, sent, django_capture_on_commit_callbacks, changed
):
    with django_capture_on_commit_callbacks(execute=True):
        events.notify_changes(
            (site.tenant.pk, site.queue.pk, 1_000_000 + i) for i in range(changed)
        )
    [message] = sent
    jsonschema.validate(message, NOTIFICATIONS["changed"])
    assert message["count"] == changed
    assert size(message) <= 300 + 8 * events.MAX_IDS  # ids of up to 7 digits, listed
    if changed > events.MAX_IDS:
        assert message["workloads"] is None
        assert size(message) <= 300


def test_a_real_cycle_over_a_long_queue_sends_one_small_notification(
    site, sent, django_capture_on_commit_callbacks
):
    fill(site, 600)
    Workload.objects.update(position=None, global_position=None)  # not ranked yet
    with django_capture_on_commit_callbacks(execute=True):
        admission.tick(cluster=site.world.cluster)
    changed = [m for m in sent if m["type"] == "changed"]
    assert len(changed) == 1, "one notification per tenant per commit"
    [message] = changed
    jsonschema.validate(message, NOTIFICATIONS["changed"])
    assert message["queues"] == [site.queue.pk]
    assert message["count"] == 600  # every one was ranked (or admitted)
    assert size(message) <= 300
    for quotas in (m for m in sent if m["type"] == "quotas"):
        jsonschema.validate(quotas, NOTIFICATIONS["quotas"])


def test_a_window_of_a_5000_long_queue_reads_and_receives_o_window(
    site, sent, django_capture_on_commit_callbacks
):
    ids = fill(site, LONG)
    stream = Stream(
        Subscription.parse({"queues": [{"id": site.queue.pk, "from": 1, "to": WINDOW}]})
    )
    shift_everyone(site, ids, django_capture_on_commit_callbacks)
    deliver_now(stream, sent)  # the first frame after subscribing: the whole window
    sent.clear()

    shift_everyone(site, ids, django_capture_on_commit_callbacks)
    [notification] = sent
    assert size(notification) <= 300
    with CaptureQueriesContext(connection) as ctx:
        [frame] = deliver_now(stream, sent)
    jsonschema.validate(frame, SERVER_MESSAGES["workloads"])
    whole = [r for r in frame["changes"] if "name" in r]
    stubs = [r for r in frame["changes"] if "name" not in r]
    assert len(whole) == WINDOW, "every row of the window moved up by one"
    assert [(r["id"], r["position"]) for r in stubs] == [(ids[1], LONG)]  # it left
    [window] = frame["windows"]
    assert (window["pending"], window["ids"]) == (LONG, ids[2 : 2 + WINDOW])
    assert len(ctx.captured_queries) <= 5, "counts, window, lists, and where one row went"
    per_row = max(size(r) for r in whole)
    assert size(frame) <= (WINDOW + 1) * per_row + 1000 + 8 * WINDOW

    # A later window of the same queue costs the same.
    later = Stream(
        Subscription.parse({"queues": [{"id": site.queue.pk, "from": 4001, "to": 4100}]})
    )
    deliver_now(later, sent)
    sent.clear()
    shift_everyone(site, ids, django_capture_on_commit_callbacks)
    [frame] = deliver_now(later, sent)
    assert len(frame["changes"]) == WINDOW + 1
    assert len(frame["windows"][0]["ids"]) == WINDOW


def test_a_subscriber_of_every_queue_is_told_to_refetch_instead_of_reading_5000_rows(
    site, sent, django_capture_on_commit_callbacks
):
    ids = fill(site, LONG)
    stream = Stream()  # queues: "*"
    shift_everyone(site, ids, django_capture_on_commit_callbacks)
    with CaptureQueriesContext(connection) as ctx:
        frames = deliver_now(stream, sent)
    assert [f["type"] for f in frames] == ["resync"]
    assert frames[0]["queues"] == [site.queue.pk]
    assert len(ctx.captured_queries) == 0

    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        new = submit(site.world, "one-more")
    [frame] = deliver_now(stream, sent)
    assert [r["id"] for r in frame["changes"]] == [new.pk]


def test_reads_waiting_together_go_to_the_database_in_one_call_and_failures_stay_apart(
    site, monkeypatch
):
    import asyncio

    from asgiref.sync import async_to_sync

    from portal import stream_queries
    from portal.delivery import QueueLists, RowsById, WindowRows

    monkeypatch.setattr("channels.db.close_old_connections", lambda: None)  # test transaction
    calls: list[int] = []
    read_each, read = stream_queries._read_each, stream_queries.read

    def counted(items):
        calls.append(len(items))
        return read_each(items)

    def failing(item, tenant_id):
        if item == RowsById((999_999,)):
            raise RuntimeError("no such luck")
        return read(item, tenant_id)

    monkeypatch.setattr(stream_queries, "_read_each", counted)
    monkeypatch.setattr(stream_queries, "read", failing)
    fill(site, 20)
    reads = stream_queries.Reads()
    tenant, queue = site.tenant.pk, site.queue.pk

    async def scenario():
        return await asyncio.gather(
            reads.get("k", tenant, QueueLists(queue)),
            reads.get("k", tenant, WindowRows(queue, 1, 10)),
            reads.get("k", tenant, RowsById((999_999,))),
            reads.get("k", tenant, WindowRows(queue, 1, 10)),  # the same read: shared
            return_exceptions=True,
        )

    lists, window, failed, again = async_to_sync(scenario)()
    assert calls == [3], "three distinct reads, one call off the event loop"
    assert (lists.pending, len(window.rows), again) == (20, 10, window)
    assert isinstance(failed, RuntimeError)
    assert reads.queries == 3
