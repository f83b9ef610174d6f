"""The live stream end to end through the ASGI app: session cookie auth, tenant scoping,
after-commit delivery, debounce, subscriptions, and every frame checked against its schema."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.db import transaction
from django.test import Client

from portal.asgi import application
from portal.event_schema import SERVER_MESSAGES
from queueing import actions, events
from queueing.actions import Actor
from queueing.models import Quota
from tests import live
from tests.builders import submit


@pytest.fixture(autouse=True)
def _fast_debounce(settings):
    settings.KQ_WS_DEBOUNCE_MS = 20


#: How long a frame that must come is waited for: it returns as soon as the frame does,
#: and 2 s timed out on a loaded host (CI's SQLite pass beside the PostgreSQL one).
FRAME_S = 10


@pytest.fixture(autouse=True)
def _keep_the_test_transaction(monkeypatch):
    """channels' database_sync_to_async closes connections it finds in a transaction --
    here, the test's own (on PostgreSQL or a file SQLite). Keep it open."""
    monkeypatch.setattr("channels.db.close_old_connections", lambda: None)


def check(message: dict[str, Any]) -> dict[str, Any]:
    jsonschema.validate(message, SERVER_MESSAGES[message["type"]])
    return message


def cookie_for(user: Any) -> bytes:
    client = Client()
    client.force_login(user)
    return f"{django_settings.SESSION_COOKIE_NAME}={client.cookies[django_settings.SESSION_COOKIE_NAME].value}".encode()


def communicator(path: str, cookie: bytes | None = None) -> WebsocketCommunicator:
    headers = [(b"origin", b"http://testserver"), (b"host", b"testserver")]
    if cookie is not None:
        headers.append((b"cookie", cookie))
    return WebsocketCommunicator(application, path, headers=headers)


@pytest.fixture
def cookies(site) -> dict[str, bytes]:
    """Session cookies made before any async code runs (the test client is sync)."""
    return {who: cookie_for(user) for who, user in site.users.items()}


def run(scenario: Callable[[], Any]) -> Any:
    """Run an async scenario; its sync_to_async calls share this thread's DB connection."""
    return async_to_sync(scenario)()


def test_anonymous_and_other_tenants_are_refused(site, cookies):
    async def scenario():
        for path, user in [
            (f"/ws/tenants/{site.tenant.pk}/", None),
            (f"/ws/tenants/{site.tenant.pk}/", cookies["bob"]),
            ("/ws/tenants/999999/", cookies["ada"]),
            ("/ws/all/", cookies["ada"]),
        ]:
            comm = communicator(path, user)
            connected, code = await comm.connect()
            assert (connected, code) == (False, 4403), path

    run(scenario)


def test_a_member_gets_hello_pong_and_a_subscription_receipt(site, cookies):
    async def scenario():
        comm = communicator(f"/ws/tenants/{site.tenant.pk}/", cookies["vic"])
        connected, _ = await comm.connect()
        assert connected
        hello = check(await comm.receive_json_from())
        assert hello == {
            "type": "hello",
            "tenant": site.tenant.pk,
            "protocol": 2,
            "debounce_ms": 20,
        }
        await comm.send_json_to({"type": "ping"})
        assert check(await comm.receive_json_from()) == {"type": "pong"}
        await comm.send_json_to({"type": "subscribe", "queues": [{"id": 3, "from": 1, "to": 9}]})
        receipt = check(await comm.receive_json_from())
        assert receipt["queues"] == [{"id": 3, "from": 1, "to": 9}]
        await comm.send_json_to({"type": "subscribe", "queues": "all of them"})
        assert check(await comm.receive_json_from())["type"] == "error"
        await comm.send_json_to({"type": "dance"})
        assert check(await comm.receive_json_from())["type"] == "error"
        await comm.disconnect()

    run(scenario)


def test_changes_arrive_after_commit_and_never_after_a_rollback(
    site, cookies, django_capture_on_commit_callbacks
):
    def submit_then_fail() -> None:
        with transaction.atomic():
            submit(site.world, "ghost")
            raise RuntimeError("abort")

    def rolled_back() -> None:
        with pytest.raises(RuntimeError):
            submit_then_fail()

    def committed() -> int:
        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            workload = submit(site.world, "real")
        assert callbacks, "publishing waits for the commit"
        return workload.pk

    async def scenario():
        comm = communicator(f"/ws/tenants/{site.tenant.pk}/", cookies["vic"])
        await comm.connect()
        await comm.receive_json_from()
        await sync_to_async(rolled_back)()
        assert await comm.receive_nothing(timeout=0.2)
        workload_id = await sync_to_async(committed)()
        frame = check(await comm.receive_json_from(timeout=FRAME_S))
        assert frame["type"] == "workloads"
        assert frame["tenant"] == site.tenant.pk
        assert [row["id"] for row in frame["changes"]] == [workload_id]
        assert frame["changes"][0]["name"] == "real"
        assert frame["changes"][0]["phase"] == "Pending"
        await comm.disconnect()

    run(scenario)


def test_events_within_the_debounce_arrive_as_one_merged_frame(
    site, cookies, settings, django_capture_on_commit_callbacks
):
    settings.KQ_WS_DEBOUNCE_MS = 200

    def burst() -> list[int]:
        with django_capture_on_commit_callbacks(execute=True):
            ids = [submit(site.world, f"w{i}").pk for i in range(3)]
        with django_capture_on_commit_callbacks(execute=True):
            live.rank(ids)
        with django_capture_on_commit_callbacks(execute=True):
            live.rank(list(reversed(ids)))
        return ids

    def marker() -> int:
        with django_capture_on_commit_callbacks(execute=True):
            return submit(site.world, "marker").pk

    async def scenario():
        comm = communicator(f"/ws/tenants/{site.tenant.pk}/", cookies["vic"])
        await comm.connect()
        await comm.receive_json_from()
        ids = await sync_to_async(burst)()
        frame = check(await comm.receive_json_from(timeout=FRAME_S))
        positions = {row["id"]: row["position"] for row in frame["changes"]}
        assert positions == {ids[2]: 1, ids[1]: 2, ids[0]: 3}
        assert await comm.receive_nothing(timeout=0.3)
        # Positive control: the next frame is the marker's alone, so no late second frame
        # of the burst was on its way when the wait above ended.
        marker_id = await sync_to_async(marker)()
        frame = check(await comm.receive_json_from(timeout=FRAME_S))
        assert [row["id"] for row in frame["changes"]] == [marker_id]
        await comm.disconnect()

    run(scenario)


def test_a_windowed_subscriber_gets_its_window_and_stubs_for_rows_that_leave_it(
    site, cookies, django_capture_on_commit_callbacks
):
    def setup() -> list[int]:
        with django_capture_on_commit_callbacks(execute=True):
            ids = [submit(site.world, f"w{i}").pk for i in range(4)]
        return ids

    def cycle(order: list[int]) -> None:
        with django_capture_on_commit_callbacks(execute=True):
            live.rank(order)

    async def scenario():
        ids = await sync_to_async(setup)()
        comm = communicator(f"/ws/tenants/{site.tenant.pk}/", cookies["vic"])
        await comm.connect()
        await comm.receive_json_from()
        await comm.send_json_to(
            {"type": "subscribe", "queues": [{"id": site.queue.pk, "from": 1, "to": 2}]}
        )
        await comm.receive_json_from()
        await sync_to_async(cycle)(ids)
        frame = check(await comm.receive_json_from(timeout=FRAME_S))
        assert {row["id"]: ("name" in row) for row in frame["changes"]} == {
            ids[0]: True,
            ids[1]: True,
        }, "rows outside the window are not sent at all"
        [window] = frame["windows"]
        assert window == {
            "queue": site.queue.pk, "from": 1, "to": 2, "pending": 4, "holding": 0,
            "ids": [ids[0], ids[1]],
        }  # fmt: skip

        await sync_to_async(cycle)(list(reversed(ids)))
        frame = check(await comm.receive_json_from(timeout=FRAME_S))
        shapes = {row["id"]: ("name" in row, row["position"]) for row in frame["changes"]}
        assert shapes == {
            ids[3]: (True, 1),
            ids[2]: (True, 2),
            ids[1]: (False, 3),
            ids[0]: (False, 4),
        }
        assert frame["windows"][0]["ids"] == [ids[3], ids[2]]
        await comm.disconnect()

    run(scenario)


def test_another_tenants_queues_and_workloads_in_a_subscribe_are_never_sent(
    site, cookies, django_capture_on_commit_callbacks
):
    """vic (team-a) names team-b's queue and workload; even a notification on team-a's
    group that names team-b's queue (which generation never sends) reads nothing of it."""

    def theirs() -> int:
        with django_capture_on_commit_callbacks(execute=True):
            workload = actions.submit_workload(
                Actor.system(),
                tenant=None,
                quota=Quota.objects.get(name="team-b-q"),
                name="b-secret",
                pod_sets=[{"count": 1, "requests": {"cpu": "1"}}],
            )
        return workload.pk

    def change_theirs(workload_id: int) -> None:
        with django_capture_on_commit_callbacks(execute=True):
            live.rank([workload_id])

    def own_change() -> int:
        with django_capture_on_commit_callbacks(execute=True):
            return submit(site.world, "mine").pk

    def forged() -> None:
        events.send(
            site.tenant.pk,
            events.changed_message(
                site.tenant.pk, [site.other_queue.pk], range(1, 1000), cycle_id=None
            ),
        )

    async def scenario():
        secret = await sync_to_async(theirs)()
        comm = communicator(f"/ws/tenants/{site.tenant.pk}/", cookies["vic"])
        await comm.connect()
        await comm.receive_json_from()
        await comm.send_json_to(
            {
                "type": "subscribe",
                "queues": [{"id": site.other_queue.pk, "from": 1, "to": 100}],
                "workloads": [secret],
            }
        )
        await comm.receive_json_from()
        await sync_to_async(change_theirs)(secret)
        assert await comm.receive_nothing(timeout=0.3), "team-b's changes never reach team-a"
        await sync_to_async(forged)()
        frame = check(await comm.receive_json_from(timeout=FRAME_S))  # it did read, as team-a
        assert (frame["type"], frame["changes"], frame["removed"]) == ("workloads", [], [])
        [window] = frame["windows"]
        assert (window["pending"], window["holding"], window["ids"]) == (0, 0, [])
        assert await comm.receive_nothing(timeout=0.3)
        # Positive control: with its own queue added, a change of team-a's is the very
        # next frame, so nothing of team-b's was still on its way.
        await comm.send_json_to(
            {
                "type": "subscribe",
                "queues": [{"id": site.other_queue.pk, "from": 1, "to": 100}, site.queue.pk],
                "workloads": [secret],
            }
        )
        assert (await comm.receive_json_from())["type"] == "subscribed"
        mine = await sync_to_async(own_change)()
        frame = check(await comm.receive_json_from(timeout=FRAME_S))
        assert [row["id"] for row in frame["changes"]] == [mine]
        await comm.disconnect()

    run(scenario)


def test_connections_watching_one_window_share_one_read_per_notification(
    site, cookies, monkeypatch, django_capture_on_commit_callbacks
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from portal import stream_queries

    reads: list[tuple[Any, int]] = []
    real_read = stream_queries.read

    def counting_read(item, tenant_id):
        with CaptureQueriesContext(connection) as ctx:
            result = real_read(item, tenant_id)
        reads.append((item, len(ctx.captured_queries)))
        return result

    monkeypatch.setattr(stream_queries, "read", counting_read)
    viewers = 20

    def setup() -> list[int]:
        with django_capture_on_commit_callbacks(execute=True):
            return [submit(site.world, f"w{i}").pk for i in range(5)]

    def cycle(order: list[int]) -> None:
        with django_capture_on_commit_callbacks(execute=True):
            live.rank(order)

    async def scenario():
        ids = await sync_to_async(setup)()
        window = {"id": site.queue.pk, "from": 1, "to": 100}
        comms = []
        for _ in range(viewers):
            comm = communicator(f"/ws/tenants/{site.tenant.pk}/", cookies["vic"])
            await comm.connect()
            await comm.receive_json_from()
            await comm.send_json_to({"type": "subscribe", "queues": [window]})
            await comm.receive_json_from()
            comms.append(comm)
        for order in (ids, list(reversed(ids))):
            reads.clear()
            diffs = stream_queries.SHARED.diffs
            await sync_to_async(cycle)(order)
            texts = set()
            for comm in comms:
                output = await comm.receive_output(timeout=5)
                texts.add(output["text"])
                frame = check(json.loads(output["text"]))
                assert frame["windows"][0]["ids"] == order
            kinds = sorted(type(item).__name__ for item, _ in reads)
            assert kinds == ["QueueLists", "WindowRows"], "one read of each for 20 viewers"
            assert sum(queries for _, queries in reads) == 4
            assert stream_queries.SHARED.diffs == diffs + 1, "and one diff, sent to all"
            assert len(texts) == 1
        for comm in comms:
            await comm.disconnect()

    run(scenario)


def test_cluster_admins_watch_every_tenant_and_summaries_are_small(
    site, cookies, django_capture_on_commit_callbacks
):
    def publish() -> None:
        with django_capture_on_commit_callbacks(execute=True):
            submit(site.world, "a-1")
            actions.submit_workload(
                Actor.system(),
                tenant=None,
                quota=Quota.objects.get(name="team-b-q"),
                name="b-1",
                pod_sets=[{"count": 1, "requests": {"cpu": "1"}}],
            )

    async def scenario():
        everything = communicator("/ws/all/", cookies["root"])
        assert (await everything.connect())[0]
        assert check(await everything.receive_json_from())["tenant"] is None
        summary = communicator(f"/ws/tenants/{site.tenant.pk}/", cookies["ada"])
        await summary.connect()
        await summary.receive_json_from()
        await summary.send_json_to({"type": "subscribe", "summary": True})
        await summary.receive_json_from()
        await sync_to_async(publish)()
        tenants = set()
        for _ in range(2):
            tenants.add(check(await everything.receive_json_from(timeout=FRAME_S))["tenant"])
        assert tenants == {site.tenant.pk, site.other.pk}
        activity = check(await summary.receive_json_from(timeout=FRAME_S))
        assert activity["type"] == "activity"
        assert activity["queues"] == [site.queue.pk]
        assert activity["workloads"] == 1
        await everything.disconnect()
        await summary.disconnect()

    run(scenario)


def test_docs_describe_every_message_and_field():
    from pathlib import Path

    from portal.event_schema import CLIENT_MESSAGES, WORKLOAD_ROW

    doc = (Path(__file__).resolve().parents[2] / "docs" / "events.md").read_text()
    for kind in [*SERVER_MESSAGES, *CLIENT_MESSAGES]:
        assert f"### `{kind}`" in doc or f"`{kind}`" in doc, kind
    for field in WORKLOAD_ROW["properties"]:
        assert f"`{field}`" in doc, field


def test_a_member_removed_while_connected_stops_receiving(
    site, cookies, monkeypatch, django_capture_on_commit_callbacks
):
    from portal import consumers
    from queueing.models import Membership

    monkeypatch.setattr(consumers, "REAUTHORISE_S", 0.0)

    def remove_and_publish() -> None:
        Membership.objects.filter(user=site.users["vic"]).delete()
        with django_capture_on_commit_callbacks(execute=True):
            submit(site.world, "after-removal")

    async def scenario():
        comm = communicator(f"/ws/tenants/{site.tenant.pk}/", cookies["vic"])
        assert (await comm.connect())[0]
        await comm.receive_json_from()
        await sync_to_async(remove_and_publish)()
        closed = await comm.receive_output(timeout=FRAME_S)
        assert closed == {"type": "websocket.close", "code": 4403}

    run(scenario)
