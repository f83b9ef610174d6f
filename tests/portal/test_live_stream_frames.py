"""Client frames on the live stream are bounded: malformed, binary, oversized or too many
frames get an ``error`` frame and the connection stays usable; a flood is closed (1008)."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from asgiref.sync import async_to_sync
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from portal import consumers
from portal.event_schema import SERVER_MESSAGES
from portal.routing import websocket_urlpatterns
from queueing.choices import Role
from tests import builders

pytestmark = pytest.mark.django_db(transaction=True)

app = URLRouter(websocket_urlpatterns)


async def _open(path: str, user: Any) -> WebsocketCommunicator:
    comm = WebsocketCommunicator(app, path)
    comm.scope["user"] = user
    connected, _ = await comm.connect()
    assert connected
    assert (await comm.receive_json_from(timeout=5))["type"] == "hello"
    return comm


async def _still_usable(comm: WebsocketCommunicator) -> None:
    await comm.send_json_to({"type": "ping"})
    assert await comm.receive_json_from(timeout=5) == {"type": "pong"}


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ({"text_data": "not json"}, "invalid"),
        ({"text_data": "{"}, "invalid"),
        ({"text_data": "[" * 100_000 + "]" * 100_000}, "too_large"),
        ({"text_data": "[" * 30_000 + "]" * 30_000}, "invalid"),  # deeper than json allows
        ({"bytes_data": b"\x00\xff"}, "invalid"),
        ({"text_data": '"a string"'}, "invalid"),
        ({"text_data": '{"type": "subscribe", "queues": 7}'}, "invalid"),
        ({"text_data": '{"type": "ping", "pad": "' + "x" * 70_000 + '"}'}, "too_large"),
    ],
)
def test_a_bad_frame_gets_an_error_frame_and_the_connection_stays_usable(
    world: Any, frame: dict[str, Any], code: str
) -> None:
    viewer = builders.user("vic", tenant=world.tenant, role=Role.VIEWER)

    async def scenario() -> dict[str, Any]:
        comm = await _open(f"/ws/tenants/{world.tenant.pk}/", viewer)
        await comm.send_to(**frame)
        answer = await comm.receive_json_from(timeout=5)
        await _still_usable(comm)
        await comm.disconnect()
        return answer

    answer = async_to_sync(scenario)()
    assert answer["type"] == "error"
    assert answer["code"] == code
    assert answer["message"]
    jsonschema.validate(answer, SERVER_MESSAGES["error"])


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_frames_beyond_the_rate_get_one_error_and_are_dropped(
    world: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.KQ_WS_FRAME_RATE = 1.0  # one a second, bursts of 2
    fake = FakeClock()
    monkeypatch.setattr(consumers, "clock", fake)
    viewer = builders.user("vic", tenant=world.tenant, role=Role.VIEWER)

    async def scenario() -> list[dict[str, Any]]:
        comm = await _open(f"/ws/tenants/{world.tenant.pk}/", viewer)
        for _ in range(3):
            await comm.send_json_to({"type": "ping"})
        # Two pongs (the burst), then the rate error instead of the third pong.
        answers = [await comm.receive_json_from(timeout=5) for _ in range(3)]
        fake.now += 1.0  # room for one more frame
        await comm.send_json_to({"type": "subscribe", "queues": "*"})
        answers.append(await comm.receive_json_from(timeout=5))
        await comm.disconnect()
        return answers

    answers = async_to_sync(scenario)()
    assert answers[:2] == [{"type": "pong"}, {"type": "pong"}]
    assert answers[2]["type"] == "error"
    assert answers[2]["code"] == "rate"
    assert answers[3]["type"] == "subscribed"


def test_a_client_that_keeps_flooding_is_closed_with_policy_violation(
    world: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.KQ_WS_FRAME_RATE = 1.0  # burst 2: closed after 20 refused frames
    monkeypatch.setattr(consumers, "clock", FakeClock())  # no refill while flooding
    viewer = builders.user("vic", tenant=world.tenant, role=Role.VIEWER)

    async def scenario() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        comm = await _open(f"/ws/tenants/{world.tenant.pk}/", viewer)
        for _ in range(40):
            await comm.send_json_to({"type": "ping"})
        frames = []
        while True:
            output = await comm.receive_output(timeout=5)
            if output["type"] == "websocket.close":
                return frames, output
            frames.append(output)

    frames, closed = async_to_sync(scenario)()
    assert closed["code"] == 1008
    assert len(frames) == 3  # two pongs and one rate error before the close
