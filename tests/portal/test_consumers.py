"""The first consumer: a member receives their tenant's phase changes after the commit."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from portal.routing import websocket_urlpatterns
from queueing import actions
from queueing.choices import Phase, Role
from tests import builders
from tests.builders import submit

pytestmark = pytest.mark.django_db(transaction=True)

app = URLRouter(websocket_urlpatterns)


def communicator(path: str, user) -> WebsocketCommunicator:
    comm = WebsocketCommunicator(app, path)
    comm.scope["user"] = user
    return comm


def test_a_member_receives_a_phase_change(world):
    member = builders.user("mia", tenant=world.tenant, role=Role.VIEWER)
    workload = submit(world, "watched")

    async def scenario() -> dict:
        comm = communicator(f"/ws/tenants/{world.tenant.pk}/", member)
        connected, _ = await comm.connect()
        assert connected
        assert (await comm.receive_json_from(timeout=5))["type"] == "hello"
        await sync_to_async(actions.transition)(
            workload, Phase.ADMITTED, reason="Admitted", expect=(Phase.PENDING,)
        )
        message = await comm.receive_json_from(timeout=5)
        await comm.send_json_to({"type": "ping"})
        assert (await comm.receive_json_from(timeout=5)) == {"type": "pong"}
        await comm.disconnect()
        return message

    message = async_to_sync(scenario)()
    assert message["type"] == "workloads"
    assert message["tenant"] == world.tenant.pk
    [change] = message["changes"]
    assert change["id"] == workload.pk
    assert change["phase"] == "Admitted"
    assert change["queue"] == world.queue.name


def test_someone_outside_the_tenant_is_refused(world):
    other = actions.create_tenant(builders.SYSTEM, name="other")
    outsider = builders.user("olga", tenant=other, role=Role.ADMIN)

    async def scenario() -> tuple[bool, int | None]:
        comm = communicator(f"/ws/tenants/{world.tenant.pk}/", outsider)
        connected, code = await comm.connect()
        return connected, code

    assert async_to_sync(scenario)() == (False, 4403)


def test_only_cluster_admins_watch_everything(world):
    member = builders.user("mia", tenant=world.tenant, role=Role.ADMIN)
    admin = builders.user("root", superuser=True)

    async def connect(user) -> bool:
        comm = communicator("/ws/all/", user)
        connected, _ = await comm.connect()
        if connected:
            await comm.disconnect()
        return connected

    assert async_to_sync(connect)(member) is False
    assert async_to_sync(connect)(admin) is True
