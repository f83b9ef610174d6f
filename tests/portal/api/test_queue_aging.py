"""A queue's aging bound through the API: read, set, turned off, refused when bad."""

from __future__ import annotations

import pytest

from queueing.models import Queue
from tests.portal.api.test_validation import assert_error

pytestmark = pytest.mark.django_db


def test_the_aging_bound_is_read_set_and_turned_off(api) -> None:
    url = f"/api/v1/queues/{api.queue.pk}/"
    assert api.call("tenant_admin", "get", url).json()["aging_bound_s"] == 300.0
    got = api.call("tenant_admin", "patch", url, {"aging_bound_s": 90, "version": 1})
    assert got.status_code == 200, got.json()
    assert got.json()["aging_bound_s"] == 90.0
    assert Queue.objects.get(pk=api.queue.pk).aging_bound_s == 90.0
    off = api.call("tenant_admin", "patch", url, {"aging_bound_s": None, "version": 2})
    assert off.status_code == 200, off.json()
    assert off.json()["aging_bound_s"] is None
    assert Queue.objects.get(pk=api.queue.pk).aging_bound_s is None


@pytest.mark.parametrize("bad", [-1, "nan", "inf", 10**9, "soon"])
def test_a_bad_aging_bound_is_a_clear_400_and_saves_nothing(api, bad) -> None:
    url = f"/api/v1/queues/{api.queue.pk}/"
    body = assert_error(
        api.call("tenant_admin", "patch", url, {"aging_bound_s": bad}),
        400,
        "invalid",
        "aging_bound_s",
    )
    assert body["fields"]["aging_bound_s"][0]
    queue = Queue.objects.get(pk=api.queue.pk)
    assert (queue.aging_bound_s, queue.version) == (300.0, 1)
