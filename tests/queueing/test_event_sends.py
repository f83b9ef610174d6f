"""How the live events leave a worker: merged, counted, skipped when nobody listens.

``events.merge_changed`` makes one ``changed`` notification per tenant and cycle of the
events that wait together in the sender loop; ``events.group_sends`` counts the listeners
of every group in one pipelined Redis round trip and sends only to groups that have one;
the sender loop bounds each batch with ``asyncio.timeout``.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from queueing import events
from queueing.events import MAX_IDS, _Outgoing, fan_out, group_sends, merge_changed
from tests.services import redis_url

LAYER = object()


def changed(tenant: int, cycle: int | None, queues: list[int], ids: list[int] | None, **kw: Any):
    payload = {
        "type": "changed",
        "tenant": tenant,
        "cycle": cycle,
        "at": kw.get("at", "2026-12-04T13:00:00Z"),
        "key": kw.get("key", secrets.token_hex(8)),
        "queues": queues,
        "workloads": ids,
        "count": kw.get("count", len(ids or [])),
    }
    return _Outgoing(LAYER, tenant, payload)


def config(tenant: int | None, n: int) -> _Outgoing:
    return _Outgoing(LAYER, tenant, {"type": "quotas", "tenant": tenant, "quotas": [{"id": n}]})


def test_changed_of_one_tenant_and_cycle_merge_at_the_last_place():
    first = changed(7, 12, [1], [10, 11])
    other = changed(8, 12, [5], [50])
    quota = config(7, 1)
    last = changed(7, 12, [2, 1], [11, 12], key="last", at="2026-12-04T13:00:01Z")
    out = merge_changed([first, other, quota, last])
    assert [item.payload["type"] for item in out] == ["changed", "quotas", "changed"]
    assert out[0] is other
    assert out[1] is quota
    merged = out[2].payload
    assert merged["queues"] == [1, 2]
    assert merged["workloads"] == [10, 11, 12]
    assert merged["count"] == 3
    assert (merged["key"], merged["at"], merged["cycle"]) == ("last", "2026-12-04T13:00:01Z", 12)
    assert out[2].tenant_id == 7


def test_changed_of_other_cycles_or_shapes_stay_apart():
    batch = [
        changed(7, 12, [1], [10]),
        changed(7, 13, [1], [11]),
        changed(7, None, [1], [12]),
        _Outgoing(LAYER, 7, {"type": "changed", "n": 1}),  # not a notification's shape
        _Outgoing(LAYER, 7, {"type": "changed", "n": 2}),
    ]
    assert merge_changed(batch) == batch


def test_a_merge_past_max_ids_keeps_only_the_count():
    half = MAX_IDS // 2 + 1
    out = merge_changed(
        [
            changed(7, None, [1], list(range(half))),
            changed(7, None, [1], list(range(half, 2 * half))),
        ]
    )
    (only,) = out
    assert only.payload["workloads"] is None
    assert only.payload["count"] == 2 * half


def test_a_merge_with_a_count_only_notification_sums_the_counts():
    out = merge_changed([changed(7, 3, [1], None, count=500), changed(7, 3, [2], [1, 2])])
    (only,) = out
    assert (only.payload["workloads"], only.payload["count"]) == (None, 502)
    assert only.payload["queues"] == [1, 2]


def test_fan_out_sends_a_tenant_to_its_group_and_the_admins():
    sends = fan_out([changed(7, 1, [1], [1]), config(None, 2)])
    assert [group for group, _ in sends] == ["tenant.7", "tenant.all", "tenant.all"]
    assert all(message["type"] == "kq.event" for _, message in sends)


# --- against Redis -------------------------------------------------------------------


@pytest.fixture
def layer() -> Iterator[Any]:
    import redis
    from channels_redis.core import RedisChannelLayer

    with redis_url() as url:
        # A prefix of its own: the test's keys never meet another's in a shared Redis db.
        prefix = f"kqtest{secrets.token_hex(4)}"
        yield RedisChannelLayer(hosts=[url], prefix=prefix)
        # The layer's pools belong to the loops that used them (closed with them).
        client = redis.Redis.from_url(url)
        keys = list(client.scan_iter(f"{prefix}*"))
        if keys:
            client.delete(*keys)
        client.close()


def test_groups_without_a_listener_are_not_sent_to(layer: Any, monkeypatch: pytest.MonkeyPatch):
    sent: list[str] = []
    original = type(layer).group_send

    async def counted(self: Any, group: str, message: dict) -> None:
        sent.append(group)
        await original(self, group, message)

    monkeypatch.setattr(type(layer), "group_send", counted)

    async def scenario() -> tuple[int, Any, int, Any]:
        nobody = await group_sends(layer, fan_out([changed(7, 1, [1], [1])]))
        channel = await layer.new_channel()
        await layer.group_add("tenant.7", channel)
        # The send that was skipped would have reached nobody: nothing waits for the
        # channel that joined afterwards.
        with pytest.raises(asyncio.TimeoutError):
            async with asyncio.timeout(0.3):
                await layer.receive(channel)
        later = await group_sends(layer, fan_out([changed(7, 2, [1], [2])]))
        message = await layer.receive(channel)
        return nobody, channel, later, message

    nobody, _, later, message = async_to_sync(scenario)()
    assert nobody == 0
    assert later == 1  # tenant.7 has a listener; tenant.all has none
    assert sent == ["tenant.7"]
    assert message["payload"]["cycle"] == 2


def test_the_listeners_are_counted_in_one_round_trip(layer: Any, monkeypatch: pytest.MonkeyPatch):
    import redis.asyncio

    trips: list[int] = []
    execute = redis.asyncio.client.Pipeline.execute

    async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        trips.append(len(self.command_stack))
        return await execute(self, *args, **kwargs)

    monkeypatch.setattr(redis.asyncio.client.Pipeline, "execute", counted)

    async def scenario() -> set[str] | None:
        channel = await layer.new_channel()
        await layer.group_add("tenant.all", channel)
        trips.clear()
        return await events.listened(layer, [f"tenant.{n}" for n in range(20)] + ["tenant.all"])

    assert async_to_sync(scenario)() == {"tenant.all"}
    assert trips == [21]


def test_a_late_browser_joins_and_hears_the_next_change(
    layer: Any, monkeypatch: pytest.MonkeyPatch
):
    """Through the sender loop as a worker sends: nobody listening, then a listener."""
    monkeypatch.setattr(events, "get_channel_layer", lambda: layer)
    monkeypatch.setattr(events, "_sender", events._SenderLoop())
    monkeypatch.setattr(events, "_cross_process", lambda _layer: True)
    events.send(7, changed(7, 1, [1], [1]).payload)
    assert events.flush(10)
    channel: list[str] = []

    async def join() -> None:
        channel.append(await layer.new_channel())
        await layer.group_add("tenant.7", channel[0])

    events._sender.run(join, 10)
    events.send(7, changed(7, 2, [1], [2]).payload)
    assert events.flush(10)
    got: list[Any] = []

    async def receive() -> None:
        got.append(await layer.receive(channel[0]))

    events._sender.run(receive, 10)
    assert [message["payload"]["cycle"] for message in got] == [2]


class StuckLayer:
    """A layer whose first send never answers (a Redis that stopped responding)."""

    def __init__(self) -> None:
        self.sent: list[int] = []

    async def group_send(self, group: str, message: dict) -> None:
        payload = message["payload"]
        if payload["n"] == 0:
            await asyncio.sleep(3600)
        self.sent.append(payload["n"])


def test_a_stuck_send_is_cut_and_the_backlog_goes_on(monkeypatch: pytest.MonkeyPatch):
    layer = StuckLayer()
    monkeypatch.setattr(events, "get_channel_layer", lambda: layer)
    monkeypatch.setattr(events, "_sender", events._SenderLoop())
    monkeypatch.setattr(events, "SEND_TIMEOUT_S", 0.2)
    events.send(None, {"type": "nodes", "n": 0})
    assert events.flush(10)  # the stuck send was cut by the loop's own timeout
    events.send(None, {"type": "nodes", "n": 1})
    assert events.flush(10)
    assert layer.sent == [1]


def test_notification_keys_are_unique_in_a_process_and_across_a_fork() -> None:
    """A ``changed`` message's key names one notification: never repeated by the process
    that made it, nor by a child forked from it (it draws its own prefix)."""
    made = [events.changed_message(1, [2], [3], cycle_id=None)["key"] for _ in range(1000)]
    assert len(set(made)) == len(made)
    assert all(len(key) >= 8 for key in made)  # the event schema's minLength
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next keys, back through the pipe
        try:
            child = [events.changed_message(1, [2], [3], cycle_id=None)["key"] for _ in range(3)]
            os.write(write, json.dumps(child).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child_keys = json.loads(pipe.read())
    os.waitpid(pid, 0)
    after = [events.changed_message(1, [2], [3], cycle_id=None)["key"] for _ in range(3)]
    assert len(child_keys) == 3
    assert not set(child_keys) & {*made, *after}
