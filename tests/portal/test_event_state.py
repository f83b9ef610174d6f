"""Zulip's check: events applied to a fetched state equal a fresh fetch.

The queue page starts from ``QueueWindow.state()`` and applies ``workloads`` frames as
static/js/queue.js does (``apply`` below is that logic in Python). After every step of a
scenario -- submissions, a cycle ranking them, admissions, a cancellation, a re-rank --
the state built from events must match what the page would fetch now. Like the script,
the model refetches (resyncs) only when its window has a gap it cannot fill from diffs:
a row that enters the window as a stub, or fewer rows than the queue has for it.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from portal import queries
from portal.delivery import Subscription, merge
from portal.event_schema import SERVER_MESSAGES
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
        self.pending = {r["id"]: r for r in state["pending_rows"]}
        self.holding = {r["id"]: r for r in state["holding_rows"]}
        self.pending_ids = set(state["pending_ids"])
        self.holding_ids = set(state["holding_ids"])
        self.gap = False

    def in_window(self, row: dict[str, Any]) -> bool:
        if row["position"] is None:
            return len(self.pending_ids) <= self.last
        return self.first <= row["position"] <= self.last

    def apply(self, frame: dict[str, Any]) -> None:
        jsonschema.validate(frame, SERVER_MESSAGES[frame["type"]])
        for row in frame["changes"]:
            if row["queue_id"] != self.queue:
                continue
            if row["phase"] in WAITING:
                self.holding_ids.discard(row["id"])
                self.holding.pop(row["id"], None)
                self.pending_ids.add(row["id"])
                if self.in_window(row):
                    if "name" in row:
                        self.pending[row["id"]] = row
                    elif row["id"] not in self.pending:
                        self.gap = True  # entered the window as a stub
                else:
                    self.pending.pop(row["id"], None)
            elif row["phase"] in HOLDING:
                self.pending_ids.discard(row["id"])
                self.pending.pop(row["id"], None)
                self.holding_ids.add(row["id"])
                self.holding[row["id"]] = row
            else:
                for bucket in (self.pending_ids, self.holding_ids):
                    bucket.discard(row["id"])
                self.pending.pop(row["id"], None)
                self.holding.pop(row["id"], None)
        for workload_id in frame["removed"]:
            self.pending_ids.discard(workload_id)
            self.holding_ids.discard(workload_id)
            self.pending.pop(workload_id, None)
            self.holding.pop(workload_id, None)

    def needs_resync(self) -> bool:
        expected = max(0, min(self.last - self.first + 1, len(self.pending_ids) - self.first + 1))
        return self.gap or len(self.pending) < expected

    def view(self) -> dict[str, Any]:
        def order(row: dict[str, Any]) -> tuple:
            pos = row["position"]
            return (pos is None, pos or 0, row["queue_order_at"], row["id"])

        rows = sorted(self.pending.values(), key=order)[: self.last - self.first + 1]
        return {
            "pending_rows": rows,
            "pending_ids": sorted(self.pending_ids),
            "holding_ids": sorted(self.holding_ids),
            "holding": sorted(self.holding.values(), key=lambda r: r["id"]),
        }


def fetch(queue, page_size: int) -> dict[str, Any]:
    state = queries.queue_window(queue, page_size=page_size).state()
    return {
        "pending_rows": state["pending_rows"],
        "pending_ids": sorted(state["pending_ids"]),
        "holding_ids": sorted(state["holding_ids"]),
        "holding": sorted(state["holding_rows"], key=lambda r: r["id"]),
    }


@pytest.mark.parametrize("page_size", [100, 3])
def test_events_applied_to_a_fetched_state_match_a_fresh_fetch(
    site, monkeypatch, django_capture_on_commit_callbacks, page_size
):
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(events, "send", lambda tenant_id, payload: sent.append(payload))
    page = Page(queries.queue_window(site.queue, page_size=page_size).state())
    subscription = Subscription.parse(
        {"queues": [{"id": site.queue.pk, "from": page.first, "to": page.last}]}
    )
    ids: list[int] = []
    resyncs = 0

    def step(action) -> None:
        nonlocal page, resyncs
        sent.clear()
        with django_capture_on_commit_callbacks(execute=True):
            action()
        for frame in merge(sent, subscription):
            page.apply(frame)
        if page.needs_resync():
            resyncs += 1
            page = Page(queries.queue_window(site.queue, page_size=page_size).state())
        assert page.view() == fetch(site.queue, page_size)

    step(lambda: ids.extend(submit(site.world, f"w{i}").pk for i in range(6)))
    step(lambda: live.rank(ids))
    step(lambda: live.rank([ids[4], ids[1], ids[0], ids[2], ids[3], ids[5]]))
    step(lambda: live.admit([ids[4]]))
    step(lambda: actions.cancel_workload(SYSTEM, site.world.quota.workloads.get(pk=ids[1])))
    step(lambda: live.rank([ids[5], ids[0], ids[2], ids[3]]))
    step(lambda: ids.append(submit(site.world, "late").pk))
    step(lambda: live.rank([ids[6], ids[5], ids[0], ids[2], ids[3]]))
    if page_size >= 7:
        assert resyncs == 0, "when the queue fits its window, diffs alone keep it exact"
