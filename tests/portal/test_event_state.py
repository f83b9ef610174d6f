"""Zulip's check: events applied to a fetched state equal a fresh fetch.

The queue page starts from ``QueueWindow.state()`` and applies ``workloads`` frames as
static/js/queue.js does (``Page.apply`` below is that logic in Python). The frames come
from the real path: the writers' ``changed`` notifications, buffered and read for the
page's subscription by portal.delivery and portal.stream_queries. After every step of a
scenario -- submissions, a cycle ranking them, admissions, a cancellation, a re-rank --
the state built from frames must match what the page would fetch now. Like the script,
the model would refetch (resync) only when its window has a gap it cannot fill from the
diffs; since the server reads the window itself, it never has to.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from portal import queries
from portal.delivery import Stream, Subscription
from portal.event_schema import NOTIFICATIONS, SERVER_MESSAGES
from portal.stream_queries import deliver_now
from queueing import actions, events
from queueing.choices import HOLDING_PHASES, WAITING_PHASES
from tests import live
from tests.builders import SYSTEM, submit

WAITING = set(WAITING_PHASES)
HOLDING = set(HOLDING_PHASES)


class Page:
    """The queue page's model of its window, fed only by frames."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.first, self.last, self.queue = state["first"], state["last"], state["queue"]
        self.page_size = state["page_size"]
        self.pending = {r["id"]: r for r in state["pending_rows"]}
        self.holding = {r["id"]: r for r in state["holding_rows"]}
        self.finished = {r["id"]: r for r in state["finished_rows"]}
        self.pending_total = state["pending_total"]
        self.holding_total = state["holding_total"]
        self.gap = False

    def apply(self, frame: dict[str, Any]) -> None:
        jsonschema.validate(frame, SERVER_MESSAGES[frame["type"]])
        if frame["type"] == "resync":
            self.gap = True
        if frame["type"] != "workloads":
            return
        window = next((w for w in frame.get("windows", []) if w["queue"] == self.queue), None)
        for row in frame["changes"]:
            if row["queue_id"] != self.queue:
                self.pending.pop(row["id"], None)
                self.holding.pop(row["id"], None)
                continue
            whole = "name" in row
            if row["phase"] in WAITING:
                self.holding.pop(row["id"], None)
                if not whole:
                    self.pending.pop(row["id"], None)  # a stub: outside the window
                elif window is not None or row["id"] in self.pending:
                    self.pending[row["id"]] = row
            elif row["phase"] in HOLDING:
                self.pending.pop(row["id"], None)
                if whole:
                    self.holding[row["id"]] = row
            else:
                self.pending.pop(row["id"], None)
                self.holding.pop(row["id"], None)
                if whole:
                    self.finished[row["id"]] = row
        for workload_id in frame["removed"]:
            self.pending.pop(workload_id, None)
            self.holding.pop(workload_id, None)
        if window is not None:
            self.pending_total, self.holding_total = window["pending"], window["holding"]
            self.pending = {i: r for i, r in self.pending.items() if i in window["ids"]}
            self.gap |= any(i not in self.pending for i in window["ids"])

    def needs_resync(self) -> bool:
        expected = max(0, min(self.page_size, self.pending_total - self.first + 1))
        return self.gap or len(self.pending) < expected

    def view(self) -> dict[str, Any]:
        def order(row: dict[str, Any]) -> tuple:
            pos = row["position"]
            return (pos is None, pos or 0, row["queue_order_at"], row["id"])

        finished = sorted(self.finished.values(), key=lambda r: (r["finished_at"], r["id"]))
        return {
            "pending_rows": sorted(self.pending.values(), key=order)[: self.page_size],
            "pending_total": self.pending_total,
            "holding_total": self.holding_total,
            "holding": sorted(self.holding.values(), key=lambda r: r["id"]),
            "finished": sorted(finished[-queries.FINISHED_SHOWN :], key=lambda r: r["id"]),
        }


def fetch(queue, page_size: int) -> dict[str, Any]:
    state = queries.queue_window(queue, page_size=page_size).state()
    return {
        "pending_rows": state["pending_rows"],
        "pending_total": state["pending_total"],
        "holding_total": state["holding_total"],
        "holding": sorted(state["holding_rows"], key=lambda r: r["id"]),
        "finished": sorted(state["finished_rows"], key=lambda r: r["id"]),
    }


@pytest.mark.parametrize("page_size", [100, 3])
def test_events_applied_to_a_fetched_state_match_a_fresh_fetch(
    site, monkeypatch, django_capture_on_commit_callbacks, page_size
):
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(events, "send", lambda tenant_id, payload: sent.append(payload))
    page = Page(queries.queue_window(site.queue, page_size=page_size).state())
    stream = Stream(
        Subscription.parse({"queues": [{"id": site.queue.pk, "from": page.first, "to": page.last}]})
    )
    ids: list[int] = []
    resyncs = 0

    def step(action) -> None:
        nonlocal page, resyncs
        sent.clear()
        with django_capture_on_commit_callbacks(execute=True):
            action()
        assert sent, "every step changes workloads, so it notifies"
        for payload in sent:
            jsonschema.validate(payload, NOTIFICATIONS[payload["type"]])
        for frame in deliver_now(stream, sent):
            page.apply(frame)
        if page.needs_resync():  # what the script does: refetch, and subscribe again
            resyncs += 1
            page = Page(queries.queue_window(site.queue, page_size=page_size).state())
            stream.subscribe(stream.subscription)
        assert page.view() == fetch(site.queue, page_size)

    step(lambda: ids.extend(submit(site.world, f"w{i}").pk for i in range(6)))
    step(lambda: live.rank(ids))
    step(lambda: live.rank([ids[4], ids[1], ids[0], ids[2], ids[3], ids[5]]))
    step(lambda: live.admit([ids[4]]))
    step(lambda: actions.cancel_workload(SYSTEM, site.world.quota.workloads.get(pk=ids[1])))
    step(lambda: live.rank([ids[5], ids[0], ids[2], ids[3]]))
    step(lambda: ids.append(submit(site.world, "late").pk))
    step(lambda: live.rank([ids[6], ids[5], ids[0], ids[2], ids[3]]))
    step(lambda: live.admit([ids[6], ids[5]]))
    step(lambda: live.rank([ids[3], ids[2], ids[0]]))
    assert resyncs == 0, "the server reads the window itself: diffs alone keep it exact"
