"""The queue form's aging bound, and what moved a workload's ETA on its page and in the API."""

from __future__ import annotations

from queueing import nodeview, state
from queueing.choices import Phase
from queueing.engine import run_cycle
from queueing.models import Queue, Workload
from tests.builders import submit

BASE = {
    "policy": "Block", "priority": "3", "priority_threshold": "0", "max_depth": "0",
    "preempt_within_quota": "LowerPriority", "reclaim": "Any", "admission_timeout_s": "",
    "backoff_base_s": "10", "backoff_max_s": "600", "backoff_jitter": "0.1",
}  # fmt: skip


def test_the_queue_form_sets_turns_off_and_refuses_the_aging_bound(site):
    ada = site.client("ada")
    new = f"/tenants/{site.tenant.name}/queues/new/"
    assert ada.post(new, BASE | {"name": "aged", "aging_bound_s": "120"}).status_code == 302
    assert Queue.objects.get(name="aged").aging_bound_s == 120.0
    page = ada.get(f"/tenants/{site.tenant.name}/queues/aged/").content.decode()
    assert 'aging bound <span data-setting="aging_bound_s">120</span> s' in page
    url = f"/tenants/{site.tenant.name}/queues/aged/edit/"
    refused = ada.post(url, BASE | {"version": "1", "aging_bound_s": "-5"})
    assert refused.status_code == 400
    assert "greater than or equal to 0" in refused.content.decode()
    assert Queue.objects.get(name="aged").version == 1
    assert ada.post(url, BASE | {"version": "1", "aging_bound_s": ""}).status_code == 302
    queue = Queue.objects.get(name="aged")
    assert (queue.aging_bound_s, queue.version) == (None, 2)
    page = ada.get(f"/tenants/{site.tenant.name}/queues/aged/").content.decode()
    assert "aging off" in page


def _cycle(site) -> None:
    world = site.world
    snapshot, index = state.build_snapshot(
        world.root.name, nodes=nodeview.read(), now=world.clock.advance(2)
    )
    state.apply(run_cycle(snapshot, forecast=True), snapshot, index, None, world.cluster)


def test_the_page_and_the_api_say_what_moved_the_eta(site):
    # 16-cpu max: four 4-cpu jobs run, the fifth waits for one of them.
    for i in range(5):
        submit(site.world, f"w{i}", cpu="4", runtime=600)
    _cycle(site)
    waiting = Workload.objects.get(phase=Phase.PENDING)
    assert waiting.eta["moved"] == "first"
    ada = site.client("ada")
    page_url = f"/tenants/{site.tenant.name}/workloads/{waiting.pk}/"
    assert "First forecast." in ada.get(page_url).content.decode()
    _cycle(site)
    body = ada.get(f"/api/v1/workloads/{waiting.pk}/").json()
    assert body["eta"]["moved"] == "kept"
    assert body["eta_note"] == (
        "First forecast; kept since (newer forecasts were within the tolerance)."
    )
    # A workload without an ETA says precisely why.
    Workload.objects.filter(pk=waiting.pk).update(
        eta_p50=None,
        eta_p90=None,
        eta={"p50": None, "p90": None, "reason": "not admitted within the forecast horizon (24 h)",
             "moved": "", "last_move": None},
    )  # fmt: skip
    page = ada.get(page_url).content.decode()
    assert "not admitted within the forecast horizon (24 h)" in page
    note = ada.get(f"/api/v1/workloads/{waiting.pk}/").json()["eta_note"]
    assert note == f"No ETA: not admitted within the forecast horizon (24 h). {waiting.reason}"
