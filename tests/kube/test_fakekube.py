"""The fake API server, driven through the official Kubernetes client."""

from __future__ import annotations

import itertools
import json
import urllib.error
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client import ApiClient, ApiException

from tests.fakekube import (
    FAIL_ANNOTATION,
    RUNTIME_ANNOTATION,
    FakeKube,
    FakeKubeProcess,
    FaultSpec,
    ManualClock,
    RemoteFakeKube,
    ResourceType,
    admitted_timeline,
    api_client,
    by_label,
    overruns,
    peak_usage,
    running_at,
    unsuspend_counts,
    usage_timeline,
    write_kubeconfig,
)
from tests.polling import wait_until

QUEUE_LABEL = "koord-queue/queue-name"


# --- builders and helpers -------------------------------------------------------------------


def job(
    name: str | None = None,
    *,
    suspend: bool = True,
    parallelism: int = 1,
    cpu: str = "1",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
    tolerations: list[dict[str, Any]] | None = None,
    runtime: float | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"labels": labels or {}, "annotations": dict(annotations or {})}
    meta.update({"name": name} if name else {"generateName": "job-"})
    if runtime is not None:
        meta["annotations"][RUNTIME_ANNOTATION] = str(runtime)
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [
            {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}
        ],
    }
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    if tolerations:
        pod_spec["tolerations"] = tolerations
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "suspend": suspend,
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {"spec": pod_spec},
        },
    }


def pod(name: str, *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def eventually(check: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    return wait_until(check, timeout=timeout, interval=0.005, what=what)


def condition(obj: client.V1Job, type_: str) -> str | None:
    for c in (obj.status and obj.status.conditions) or []:
        if c.type == type_:
            return c.status
    return None


def active(batch: client.BatchV1Api, name: str) -> int:
    found = batch.read_namespaced_job(name, "default")
    return (found.status and found.status.active) or 0


def wait_for_condition(batch: client.BatchV1Api, name: str, type_: str) -> client.V1Job:
    def check() -> client.V1Job | None:
        found = batch.read_namespaced_job(name, "default")
        return found if condition(found, type_) == "True" else None

    return eventually(check, what=f"{name} to be {type_}")


@pytest.fixture
def core(kube_client: ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(kube_client)


@pytest.fixture
def batch(kube_client: ApiClient) -> client.BatchV1Api:
    return client.BatchV1Api(kube_client)


@pytest.fixture
def custom(kube_client: ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube_client)


# --- basic verbs ----------------------------------------------------------------------------


def test_create_answers_201_with_generated_name_and_server_fields(batch: client.BatchV1Api):
    created, code, _ = batch.create_namespaced_job_with_http_info("default", job())

    assert code == 201
    assert created.metadata.name.startswith("job-")
    assert len(created.metadata.name) == 9
    assert created.metadata.uid
    assert created.metadata.creation_timestamp
    assert int(created.metadata.resource_version) > 0
    assert created.metadata.generation == 1
    assert created.spec.suspend is True
    other = batch.create_namespaced_job("default", job())
    assert int(other.metadata.resource_version) > int(created.metadata.resource_version)


def test_create_rejects_duplicates_missing_namespaces_and_invalid_jobs(
    batch: client.BatchV1Api,
):
    batch.create_namespaced_job("default", job("a"))
    with pytest.raises(ApiException) as exists:
        batch.create_namespaced_job("default", job("a"))
    assert (exists.value.status, json.loads(exists.value.body)["reason"]) == (409, "AlreadyExists")
    with pytest.raises(ApiException) as missing:
        batch.create_namespaced_job("nowhere", job("a"))
    assert missing.value.status == 404
    broken = job("b")
    del broken["spec"]["template"]["spec"]["restartPolicy"]
    with pytest.raises(ApiException) as invalid:
        batch.create_namespaced_job("default", broken)
    assert invalid.value.status == 422


def test_list_filters_by_label_selectors(batch: client.BatchV1Api, core: client.CoreV1Api):
    core.create_namespace({"metadata": {"name": "team-b"}})
    batch.create_namespaced_job("default", job("a", labels={QUEUE_LABEL: "q1", "tier": "1"}))
    batch.create_namespaced_job("default", job("b", labels={QUEUE_LABEL: "q2", "tier": "2"}))
    batch.create_namespaced_job("team-b", job("c", labels={QUEUE_LABEL: "q1"}))

    def names(selector: str) -> list[str]:
        found = batch.list_job_for_all_namespaces(label_selector=selector).items
        return sorted(j.metadata.name for j in found)

    assert names(f"{QUEUE_LABEL}=q1") == ["a", "c"]
    assert names(f"{QUEUE_LABEL}==q2") == ["b"]
    assert names(f"{QUEUE_LABEL}!=q1") == ["b"]
    assert names(f"{QUEUE_LABEL} in (q1, q2),tier") == ["a", "b"]
    assert names("tier notin (1)") == ["b", "c"]
    assert names("!tier") == ["c"]
    assert names("tier>1") == ["b"]
    in_default = batch.list_namespaced_job("default", label_selector=f"{QUEUE_LABEL}=q1")
    assert [j.metadata.name for j in in_default.items] == ["a"]
    with pytest.raises(ApiException) as bad:
        names("tier in (1")
    assert bad.value.status == 400


def test_list_filters_by_field_selectors(fake_kube: FakeKube, core: client.CoreV1Api):
    fake_kube.add_node("n1", {"cpu": "4"})
    fake_kube.add_node("n2", {"cpu": "4"}, unschedulable=True)
    fake_kube.configure(runner_paused=True)
    core.create_namespaced_pod("default", pod("p1"))
    core.create_namespaced_pod(
        "default", {**pod("p2"), "spec": {**pod("p2")["spec"], "nodeName": "n1"}}
    )

    def pods(selector: str) -> list[str]:
        return sorted(
            p.metadata.name for p in core.list_pod_for_all_namespaces(field_selector=selector).items
        )

    assert pods("spec.nodeName=n1") == ["p2"]
    assert pods("spec.nodeName=") == ["p1"]
    assert pods("status.phase=Pending,metadata.name!=p2") == ["p1"]
    assert pods("metadata.namespace=default") == ["p1", "p2"]
    schedulable = core.list_node(field_selector="spec.unschedulable=false").items
    assert [n.metadata.name for n in schedulable] == ["n1"]
    assert [
        n.metadata.name for n in core.list_node(field_selector="spec.unschedulable=true").items
    ] == ["n2"]
    with pytest.raises(ApiException) as unsupported:
        core.list_pod_for_all_namespaces(field_selector="spec.priority=1")
    assert unsupported.value.status == 400


def test_limit_and_continue_page_through_a_list(batch: client.BatchV1Api):
    for i in range(7):
        batch.create_namespaced_job("default", job(f"j{i}"))

    seen, token, pages = [], None, 0
    while True:
        page = batch.list_namespaced_job("default", limit=3, _continue=token)
        seen += [j.metadata.name for j in page.items]
        pages += 1
        token = page.metadata._continue
        if not token:
            break
        assert page.metadata.remaining_item_count == 7 - len(seen)

    assert (seen, pages) == ([f"j{i}" for i in range(7)], 3)


def test_merge_strategic_and_json_patch(batch: client.BatchV1Api):
    body = job("p", labels={"keep": "1", "drop": "1"})
    body["spec"]["template"]["spec"]["containers"].append(
        {"name": "sidecar", "image": "proxy", "resources": {"requests": {"cpu": "100m"}}}
    )
    batch.create_namespaced_job("default", body)

    # The client sends strategic merge patch by default: containers merge by name.
    patched = batch.patch_namespaced_job(
        "p",
        "default",
        {
            "metadata": {"labels": {"drop": None, "new": "1"}},
            "spec": {
                "suspend": False,
                "template": {
                    "spec": {
                        "nodeSelector": {"pool": "a"},
                        "containers": [{"name": "main", "resources": {"requests": {"cpu": "2"}}}],
                    }
                },
            },
        },
    )
    containers = {c.name: c for c in patched.spec.template.spec.containers}
    assert patched.metadata.labels == {"keep": "1", "new": "1"}
    assert patched.spec.suspend is False
    assert patched.spec.template.spec.node_selector == {"pool": "a"}
    assert containers["main"].resources.requests == {"cpu": "2"}
    assert containers["main"].image == "busybox"
    assert containers["sidecar"].image == "proxy"
    assert patched.metadata.generation == 2

    # A JSON merge patch replaces lists wholesale.
    merged = batch.patch_namespaced_job(
        "p", "default", {"spec": {"suspend": True}}, _content_type="application/merge-patch+json"
    )
    assert merged.spec.suspend is True
    ops = [
        {"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}},
        {"op": "test", "path": "/spec/suspend", "value": True},
    ]
    patched = batch.patch_namespaced_job("p", "default", ops)  # a list goes as JSON patch
    assert patched.metadata.annotations == {"a": "b"}


def test_status_subresource_is_kept_apart_from_spec(batch: client.BatchV1Api, fake_kube: FakeKube):
    fake_kube.configure(runner_paused=True)
    created = batch.create_namespaced_job("default", job("s"))

    body = created.to_dict()
    body["status"] = {"active": 5}
    body["spec"]["parallelism"] = 3
    replaced = batch.replace_namespaced_job("s", "default", body)
    assert replaced.spec.parallelism == 3
    assert replaced.status is None

    status_write = batch.patch_namespaced_job_status(
        "s", "default", {"status": {"active": 2}, "spec": {"parallelism": 9}}
    )
    assert status_write.status.active == 2
    assert status_write.spec.parallelism == 3
    assert status_write.metadata.generation == replaced.metadata.generation

    main_write = batch.patch_namespaced_job("s", "default", {"status": {"active": 7}})
    assert main_write.status.active == 2


def test_stale_resource_version_conflicts(batch: client.BatchV1Api):
    created = batch.create_namespaced_job("default", job("c"))
    batch.patch_namespaced_job("c", "default", {"metadata": {"labels": {"x": "1"}}})

    stale = created.to_dict()
    stale["metadata"]["labels"] = {"y": "1"}
    with pytest.raises(ApiException) as conflict:
        batch.replace_namespaced_job("c", "default", stale)
    assert conflict.value.status == 409
    assert json.loads(conflict.value.body)["reason"] == "Conflict"
    precondition = {"metadata": {"resourceVersion": created.metadata.resource_version}}
    with pytest.raises(ApiException) as patch_conflict:
        batch.patch_namespaced_job("c", "default", precondition)
    assert patch_conflict.value.status == 409

    fresh = batch.read_namespaced_job("c", "default").to_dict()
    fresh["metadata"]["labels"] = {"y": "1"}
    assert batch.replace_namespaced_job("c", "default", fresh).metadata.labels == {"y": "1"}


def test_a_uid_in_a_patch_is_a_precondition(batch: client.BatchV1Api):
    first = batch.create_namespaced_job("default", job("u"))
    batch.delete_namespaced_job("u", "default")
    batch.create_namespaced_job("default", job("u"))
    with pytest.raises(ApiException) as conflict:
        batch.patch_namespaced_job("u", "default", {"metadata": {"uid": first.metadata.uid}})
    assert conflict.value.status == 409
    assert "Precondition failed: UID" in json.loads(conflict.value.body)["message"]
    current = batch.read_namespaced_job("u", "default")
    patch = {"metadata": {"uid": current.metadata.uid, "labels": {"ok": "1"}}}
    assert batch.patch_namespaced_job("u", "default", patch).metadata.labels["ok"] == "1"


def test_noop_writes_keep_the_resource_version(batch: client.BatchV1Api, fake_kube: FakeKube):
    fake_kube.configure(runner_paused=True)
    created = batch.create_namespaced_job("default", job("n"))
    again = batch.patch_namespaced_job("n", "default", {"spec": {"suspend": True}})
    assert again.metadata.resource_version == created.metadata.resource_version


def test_delete_answers_with_status_and_then_404(batch: client.BatchV1Api, core: client.CoreV1Api):
    batch.create_namespaced_job("default", job("d"))
    result = batch.delete_namespaced_job("d", "default")
    assert (result["status"], result["details"]["name"]) == ("Success", "d")  # untyped in 37.x
    for call in (batch.read_namespaced_job, batch.delete_namespaced_job):
        with pytest.raises(ApiException) as gone:
            call("d", "default")
        assert gone.value.status == 404
        assert json.loads(gone.value.body)["kind"] == "Status"

    core.create_namespace({"metadata": {"name": "doomed"}})
    batch.create_namespaced_job("doomed", job("x"))
    core.delete_namespace("doomed")
    assert batch.list_job_for_all_namespaces().items == []


# --- watch ----------------------------------------------------------------------------------


def collect(stream: Any, count: int) -> list[tuple[str, str]]:
    events = []
    for event in stream:
        events.append((event["type"], event["raw_object"]["metadata"].get("name")))
        if len(events) == count:
            break
    return events


def configmap(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "data": {"k": "v"}}


def test_watch_resumes_from_a_resource_version(core: client.CoreV1Api):
    a = core.create_namespaced_config_map("default", configmap("a"))
    core.create_namespaced_config_map("default", configmap("b"))
    core.patch_namespaced_config_map("a", "default", {"data": {"k": "w"}})
    core.delete_namespaced_config_map("b", "default")

    w = watch.Watch()
    stream = w.stream(
        core.list_namespaced_config_map,
        "default",
        resource_version=a.metadata.resource_version,
        timeout_seconds=10,
    )
    events = collect(stream, 3)
    w.stop()
    assert events == [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]


def test_watch_without_resource_version_starts_with_current_objects(core: client.CoreV1Api):
    core.create_namespaced_config_map("default", configmap("old"))
    w = watch.Watch()
    stream = w.stream(core.list_config_map_for_all_namespaces, timeout_seconds=10)
    first = collect(stream, 1)
    core.create_namespaced_config_map("default", configmap("new"))
    second = collect(stream, 1)
    w.stop()
    assert first + second == [("ADDED", "old"), ("ADDED", "new")]


def test_watch_honours_selectors_and_reports_objects_leaving_them(core: client.CoreV1Api):
    start = core.list_namespaced_config_map("default").metadata.resource_version
    core.create_namespaced_config_map("default", configmap("in", {"q": "1"}))
    core.create_namespaced_config_map("default", configmap("out", {"q": "2"}))
    core.patch_namespaced_config_map("in", "default", {"metadata": {"labels": {"q": "3"}}})
    core.patch_namespaced_config_map("out", "default", {"metadata": {"labels": {"q": "1"}}})

    w = watch.Watch()
    stream = w.stream(
        core.list_namespaced_config_map,
        "default",
        resource_version=start,
        label_selector="q=1",
        timeout_seconds=10,
    )
    events = collect(stream, 3)
    w.stop()
    assert events == [("ADDED", "in"), ("DELETED", "in"), ("ADDED", "out")]


def test_watch_sends_bookmarks(fake_kube_factory: Callable[..., FakeKube]):
    fake = fake_kube_factory(bookmark_interval=0.05)
    core = client.CoreV1Api(api_client(fake.url))
    rv = core.list_namespace().metadata.resource_version

    w = watch.Watch()
    stream = w.stream(
        core.list_namespace, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=10
    )
    event = next(iter(stream))
    w.stop()
    assert event["type"] == "BOOKMARK"
    assert event["raw_object"]["metadata"]["resourceVersion"] == rv


def test_watch_timeout_seconds_closes_the_stream(core: client.CoreV1Api):
    rv = core.list_namespace().metadata.resource_version
    events = list(watch.Watch().stream(core.list_namespace, resource_version=rv, timeout_seconds=1))
    assert events == []


def test_watch_from_a_compacted_resource_version_gets_410(
    fake_kube_factory: Callable[..., FakeKube],
):
    fake = fake_kube_factory(history_limit=3)
    core = client.CoreV1Api(api_client(fake.url))
    old = core.list_namespace().metadata.resource_version
    for i in range(6):
        core.create_namespace({"metadata": {"name": f"ns{i}"}})

    with pytest.raises(ApiException) as gone:
        list(watch.Watch().stream(core.list_namespace, resource_version=old, timeout_seconds=5))
    assert gone.value.status == 410

    # Without timeout_seconds the client retries once from the same version, then gives up.
    current = core.list_namespace().metadata.resource_version
    core.create_namespace({"metadata": {"name": "later"}})
    fake.compact()
    with pytest.raises(ApiException) as again:
        next(iter(watch.Watch().stream(core.list_namespace, resource_version=current)))
    assert again.value.status == 410


def test_list_continue_token_expires_after_compaction(fake_kube: FakeKube, core: client.CoreV1Api):
    for i in range(3):
        core.create_namespace({"metadata": {"name": f"ns{i}"}})
    page = core.list_namespace(limit=2)
    core.create_namespace({"metadata": {"name": "later"}})
    fake_kube.compact()
    with pytest.raises(ApiException) as gone:
        core.list_namespace(limit=2, _continue=page.metadata._continue)
    assert gone.value.status == 410


# --- discovery, version, custom resources ---------------------------------------------------


def test_version_and_discovery(kube_client: ApiClient):
    assert client.VersionApi(kube_client).get_code().git_version.startswith("v1.")
    groups = {g.name for g in client.ApisApi(kube_client).get_api_versions().groups}
    assert {"batch", "scheduling.k8s.io", "jobset.x-k8s.io", "kubeflow.org"} <= groups
    assert client.CoreApi(kube_client).get_api_versions().versions == ["v1"]
    resources = client.BatchV1Api(kube_client).get_api_resources().resources
    assert {r.name for r in resources} == {"jobs", "jobs/status"}
    assert client.SchedulingV1Api(kube_client).get_api_resources().group_version == (
        "scheduling.k8s.io/v1"
    )


def test_priority_classes_are_cluster_scoped(kube_client: ApiClient):
    scheduling = client.SchedulingV1Api(kube_client)
    scheduling.create_priority_class({"metadata": {"name": "koord-batch"}, "value": 5500})
    assert scheduling.read_priority_class("koord-batch").value == 5500


def test_custom_objects(custom: client.CustomObjectsApi, fake_kube: FakeKube):
    group, version = "scheduling.x-k8s.io", "v1alpha1"
    body = {
        "apiVersion": f"{group}/{version}",
        "kind": "QueueUnit",
        "metadata": {"name": "qu", "labels": {"q": "1"}},
        "spec": {"queue": "a"},
    }
    created = custom.create_namespaced_custom_object(group, version, "default", "queueunits", body)
    assert created["metadata"]["uid"]

    found = custom.list_namespaced_custom_object(
        group, version, "default", "queueunits", label_selector="q=1"
    )
    assert [i["metadata"]["name"] for i in found["items"]] == ["qu"]
    everywhere = custom.list_cluster_custom_object(group, version, "queueunits")
    assert len(everywhere["items"]) == 1

    patched = custom.patch_namespaced_custom_object(
        group, version, "default", "queueunits", "qu", {"spec": {"queue": "b"}}
    )
    assert patched["spec"]["queue"] == "b"
    status = custom.patch_namespaced_custom_object_status(
        group,
        version,
        "default",
        "queueunits",
        "qu",
        {"status": {"phase": "Running"}, "spec": {"queue": "c"}},
    )
    assert (status["status"]["phase"], status["spec"]["queue"]) == ("Running", "b")
    with pytest.raises(ApiException) as unsupported:
        custom.patch_namespaced_custom_object(
            group,
            version,
            "default",
            "queueunits",
            "qu",
            {"spec": {}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert unsupported.value.status == 415

    pytorch = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pt"},
        "spec": {"runPolicy": {"suspend": True}},
    }
    custom.create_namespaced_custom_object("kubeflow.org", "v1", "default", "pytorchjobs", pytorch)
    custom.patch_namespaced_custom_object(
        "kubeflow.org",
        "v1",
        "default",
        "pytorchjobs",
        "pt",
        {"spec": {"runPolicy": {"suspend": False}}},
    )
    flips = [(e["resource"], e["suspend"]) for e in fake_kube.log_entries(types=["suspend"])]
    assert flips == [("pytorchjobs.kubeflow.org", True), ("pytorchjobs.kubeflow.org", False)]


def test_custom_kinds_can_be_registered(fake_kube_factory: Callable[..., FakeKube]):
    widgets = ResourceType(
        "example.com", "v1", "widgets", "Widget", namespaced=False, builtin=False
    )
    fake = fake_kube_factory(resources=[widgets])
    custom = client.CustomObjectsApi(api_client(fake.url))
    custom.create_cluster_custom_object("example.com", "v1", "widgets", {"metadata": {"name": "w"}})
    assert custom.get_cluster_custom_object("example.com", "v1", "widgets", "w")["kind"] == "Widget"


# --- the job runner -------------------------------------------------------------------------


def test_runner_completes_an_unsuspended_job(
    fake_kube: FakeKube, batch: client.BatchV1Api, core: client.CoreV1Api
):
    fake_kube.add_node("n1", {"cpu": "4", "memory": "8Gi"})
    batch.create_namespaced_job("default", job("run", parallelism=2, runtime=5))
    batch.patch_namespaced_job("run", "default", {"spec": {"suspend": False}})

    done = wait_for_condition(batch, "run", "Complete")
    assert done.status.succeeded == 2
    assert done.status.active == 0
    assert done.status.start_time
    assert done.status.completion_time
    pods = core.list_namespaced_pod("default", label_selector="job-name=run").items
    assert [(p.spec.node_name, p.status.phase) for p in pods] == [("n1", "Succeeded")] * 2
    assert {p.metadata.owner_references[0].name for p in pods} == {"run"}
    assert fake_kube.runner.errors == []


def test_resuspending_a_running_job_deletes_its_pods(
    fake_kube: FakeKube, batch: client.BatchV1Api, core: client.CoreV1Api
):
    fake_kube.add_node("n1", {"cpu": "4"})
    batch.create_namespaced_job(
        "default", job("long", suspend=False, parallelism=2, runtime=10_000)
    )
    eventually(lambda: active(batch, "long") == 2, what="pods")
    with pytest.raises(ApiException) as immutable:
        batch.patch_namespaced_job(
            "long", "default", {"spec": {"template": {"spec": {"nodeSelector": {"a": "b"}}}}}
        )
    assert immutable.value.status == 422

    batch.patch_namespaced_job("long", "default", {"spec": {"suspend": True}})
    suspended = wait_for_condition(batch, "long", "Suspended")
    assert suspended.status.active == 0
    assert suspended.status.start_time is None
    assert core.list_namespaced_pod("default").items == []
    # Suspended and not started: the scheduling directives may change again.
    batch.patch_namespaced_job(
        "long", "default", {"spec": {"template": {"spec": {"nodeSelector": {"a": "b"}}}}}
    )


def test_runner_schedules_by_allocatable_selectors_and_taints():
    clock = ManualClock()
    fake = FakeKube(clock=clock, runner=False, seed=1)
    fake.add_node(
        "big",
        {"cpu": "4"},
        labels={"pool": "gpu"},
        taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}],
    )
    fake.add_node("small", {"cpu": "2"}, labels={"pool": "cpu"})
    tolerate = [{"key": "gpu", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}]
    fake.create("jobs", job("fits", suspend=False, parallelism=2, cpu="1"), "default")
    fake.create(
        "jobs",
        job("pinned", suspend=False, cpu="3", node_selector={"pool": "gpu"}, tolerations=tolerate),
        "default",
    )
    fake.create(
        "jobs", job("untolerated", suspend=False, cpu="1", node_selector={"pool": "gpu"}), "default"
    )
    fake.runner.step()

    pods, _, _, _ = fake.store.list("pods")
    placed = {p["metadata"]["labels"]["job-name"]: [] for p in pods}
    for p in pods:
        placed[p["metadata"]["labels"]["job-name"]].append(p["spec"].get("nodeName"))
    assert placed == {"fits": ["small", "small"], "pinned": ["big"], "untolerated": [None]}

    # When capacity frees up, pending pods get a node.
    fake.create("jobs", job("waits", suspend=False, cpu="2", runtime=10), "default")
    fake.runner.step()
    waiting = fake.store.list("pods", label_selector="job-name=waits")[0]
    assert [p["spec"].get("nodeName") for p in waiting] == [None]
    clock.advance(1)  # the default runtime of `fits`
    fake.runner.step()
    fake.runner.step()
    waiting = fake.store.list("pods", label_selector="job-name=waits")[0]
    assert [p["spec"].get("nodeName") for p in waiting] == ["small"]


def test_runner_with_a_manual_clock_completes_after_the_runtime():
    clock = ManualClock()
    fake = FakeKube(clock=clock, runner=False, default_runtime=30)
    fake.add_node("n", {"cpu": "8"})
    fake.create("jobs", job("timed", suspend=False, runtime=10), "default")
    fake.create("jobs", job("default-runtime", suspend=False), "default")
    fake.create(
        "jobs", job("doomed", suspend=False, annotations={FAIL_ANNOTATION: "true"}), "default"
    )
    fake.runner.step()

    def finished() -> dict[str, str]:
        return {e["object"]: e["condition"] for e in fake.log_entries(types=["job_finished"])}

    clock.advance(9.5)
    fake.runner.step()
    assert finished() == {}
    clock.advance(0.5)
    fake.runner.step()
    assert finished() == {"default/timed": "Complete"}
    clock.advance(20)
    fake.runner.step()
    assert finished() == {
        "default/timed": "Complete",
        "default/default-runtime": "Complete",
        "default/doomed": "Failed",
    }


def test_active_deadline_fails_a_job():
    clock = ManualClock()
    fake = FakeKube(clock=clock, runner=False)
    fake.add_node("n", {"cpu": "8"})
    body = job("late", suspend=False, runtime=100)
    body["spec"]["activeDeadlineSeconds"] = 50
    fake.create("jobs", body, "default")
    fake.runner.step()
    clock.advance(50)
    fake.runner.step()
    status = fake.store.get("jobs", "default", "late")["status"]
    assert [c["reason"] for c in status["conditions"] if c["type"] == "Failed"] == [
        "DeadlineExceeded"
    ]
    assert fake.store.list("pods")[0] == []


def test_deleting_a_job_deletes_its_pods(
    fake_kube: FakeKube, batch: client.BatchV1Api, core: client.CoreV1Api
):
    fake_kube.add_node("n1", {"cpu": "4"})
    batch.create_namespaced_job("default", job("gc", suspend=False, runtime=10_000))
    eventually(lambda: core.list_namespaced_pod("default").items, what="a pod")
    batch.delete_namespaced_job("gc", "default")
    eventually(lambda: not core.list_namespaced_pod("default").items, what="the pod to go")


# --- faults ---------------------------------------------------------------------------------


def test_fault_injection_honours_error_rates_per_verb(
    fake_kube: FakeKube, batch: client.BatchV1Api
):
    batch.create_namespaced_job("default", job("f"))
    fake_kube.set_faults(patch=FaultSpec(error_rate=0.5, codes=(500, 503)), seed=7)

    codes = []
    for _ in range(200):
        try:
            batch.patch_namespaced_job("f", "default", {"metadata": {"labels": {"a": "b"}}})
            codes.append(200)
        except ApiException as exc:
            codes.append(exc.status)
    for _ in range(20):
        batch.read_namespaced_job("f", "default")  # other verbs are untouched

    assert set(codes) == {200, 500, 503}
    assert 60 < codes.count(200) < 140
    assert fake_kube.faults.injected == 200 - codes.count(200)
    faulted = [e for e in fake_kube.log_entries(types=["request"]) if e["fault"]]
    assert len(faulted) == fake_kube.faults.injected

    fake_kube.set_faults({"*": {"error_rate": 1.0, "codes": [503]}})
    with pytest.raises(ApiException) as everything:
        batch.read_namespaced_job("f", "default")
    assert everything.value.status == 503
    fake_kube.clear_faults()
    batch.read_namespaced_job("f", "default")


def test_429_carries_retry_after(fake_kube: FakeKube):
    fake_kube.set_faults(list=FaultSpec(error_rate=1.0, codes=(429,), retry_after=2))
    # urllib3 would sleep and retry a 429 with Retry-After by itself; show the raw answer.
    batch = client.BatchV1Api(api_client(fake_kube.url, retries=False))
    with pytest.raises(ApiException) as throttled:
        batch.list_namespaced_job("default")
    assert throttled.value.status == 429
    assert throttled.value.headers["Retry-After"] == "2"
    assert json.loads(throttled.value.body)["details"]["retryAfterSeconds"] == 2


def test_committed_faults_apply_the_write_before_failing(
    fake_kube: FakeKube, batch: client.BatchV1Api
):
    fake_kube.set_faults(create=FaultSpec(error_rate=1.0, codes=(500,), committed_rate=1.0))
    with pytest.raises(ApiException) as failed:
        batch.create_namespaced_job("default", job("ghost"))
    assert failed.value.status == 500
    fake_kube.clear_faults()
    assert batch.read_namespaced_job("ghost", "default").metadata.name == "ghost"


def test_faults_can_be_limited_to_resources_and_add_latency(
    fake_kube: FakeKube, core: client.CoreV1Api, batch: client.BatchV1Api
):
    fake_kube.set_faults(list=FaultSpec(error_rate=1.0, resources=("pods",), latency=0.01))
    core.list_node()
    with pytest.raises(ApiException):
        core.list_namespaced_pod("default")
    requests = fake_kube.log_entries(types=["request"])
    assert [(e["resource"], e["status"]) for e in requests] == [("nodes", 200), ("pods", 500)]
    assert requests[1]["ms"] >= 10  # the pods request waited out the added latency


# --- control endpoints and processes --------------------------------------------------------


def test_control_endpoints(fake_kube: FakeKube, batch: client.BatchV1Api):
    remote = RemoteFakeKube(fake_kube.url)
    batch.create_namespaced_job("default", job("c"))

    state = remote.state()
    assert state["objects"]["batch/v1/jobs"] == 1
    assert state["requests"] == 1
    entries = remote.log_entries(types=["request"])
    assert [(e["verb"], e["status"], e["path"]) for e in entries] == [
        ("create", 201, "/apis/batch/v1/namespaces/default/jobs")
    ]
    assert remote.log_entries(since=entries[-1]["seq"], types=["request"]) == []

    remote.set_faults(get=FaultSpec(error_rate=1.0, codes=(503,)), seed=1)
    assert remote.config()["runner_paused"] is False
    with pytest.raises(ApiException):
        batch.read_namespaced_job("c", "default")
    remote.clear_faults()

    assert remote.configure(default_runtime=3, runner_paused=True)["default_runtime"] == 3.0
    assert fake_kube.runner.paused
    rv = batch.list_namespaced_job("default").metadata.resource_version
    assert remote.compact() == int(rv)
    remote.step()

    after = remote.reset()
    assert after["objects"]["batch/v1/jobs"] == 0
    assert after["objects"]["v1/namespaces"] == 4
    with pytest.raises(urllib.error.HTTPError):
        remote._call("GET", "nothing-here")


@pytest.mark.slow
def test_kubeconfig_and_a_subprocess_server(fake_kube_process: FakeKubeProcess, tmp_path: Path):
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", fake_kube_process.url)
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    core = client.CoreV1Api(client.ApiClient(configuration))
    assert "default" in [n.metadata.name for n in core.list_namespace().items]
    assert fake_kube_process.control.state()["requests"] == 1


# --- the audit log --------------------------------------------------------------------------


def test_audit_log_reconstructs_usage_over_time(fake_kube: FakeKube, batch: client.BatchV1Api):
    fake_kube.add_node("n1", {"cpu": "8"})
    quota = "quota.scheduling.koordinator.sh/name"
    batch.create_namespaced_job(
        "default", job("a", parallelism=2, cpu="2", labels={quota: "q"}, runtime=10_000)
    )
    batch.create_namespaced_job(
        "default", job("b", parallelism=1, cpu="3", labels={quota: "q"}, runtime=10_000)
    )
    batch.patch_namespaced_job("a", "default", {"spec": {"suspend": False}})
    eventually(lambda: active(batch, "a") == 2, what="a's pods")
    batch.patch_namespaced_job("a", "default", {"spec": {"suspend": True}})
    eventually(lambda: active(batch, "a") == 0, what="a stopped")
    batch.patch_namespaced_job("b", "default", {"spec": {"suspend": False}})
    batch.patch_namespaced_job("a", "default", {"spec": {"suspend": False}})
    eventually(
        lambda: len(fake_kube.log_entries(types=["pod_start"])) == 5, what="every pod started"
    )
    entries = fake_kube.log_entries()

    by_quota = by_label(quota)
    assert peak_usage(usage_timeline(entries, by_quota)) == {"q": {"cpu": 7.0}}
    assert overruns(usage_timeline(entries, by_quota), {"q": {"cpu": 6.0}})[0]["usage"] == 7.0
    assert overruns(admitted_timeline(entries, by_quota), {"q": {"cpu": 7.0}}) == []
    uid_a = batch.read_namespaced_job("a", "default").metadata.uid
    assert unsuspend_counts(entries)[uid_a] == 2

    # Who unsuspended, and with which request: the log ties each flip to its request.
    flips = [e for e in entries if e["type"] == "suspend" and e["object"] == "default/a"]
    requests = {e["id"]: e for e in entries if e["type"] == "request"}
    assert [(f["previous"], f["suspend"]) for f in flips] == [
        (None, True),
        (True, False),
        (False, True),
        (True, False),
    ]
    assert {requests[f["request"]]["verb"] for f in flips} == {"create", "patch"}

    first_stop = next(e for e in entries if e["type"] == "pod_stop")
    assert running_at(entries, first_stop["seq"] - 1) == {"default/a": {"cpu": 4.0}}
    assert running_at(entries, entries[-1]["seq"]) == {
        "default/a": {"cpu": 4.0},
        "default/b": {"cpu": 3.0},
    }


# --- smaller guarantees ---------------------------------------------------------------------


def test_delete_collection_with_a_selector(core: client.CoreV1Api):
    for name, team in (("a", "x"), ("b", "x"), ("c", "y")):
        core.create_namespaced_config_map("default", configmap(name, {"team": team}))
    core.delete_collection_namespaced_config_map("default", label_selector="team=x")
    assert [c.metadata.name for c in core.list_namespaced_config_map("default").items] == ["c"]


def test_replace_status_checks_the_resource_version(fake_kube: FakeKube, batch: client.BatchV1Api):
    fake_kube.configure(runner_paused=True)
    created = batch.create_namespaced_job("default", job("r"))
    body = created.to_dict()
    body["status"] = {"active": 1}
    body["spec"]["parallelism"] = 5
    replaced = batch.replace_namespaced_job_status("r", "default", body)
    assert replaced.status.active == 1
    assert replaced.spec.parallelism == 1
    with pytest.raises(ApiException) as conflict:
        batch.replace_namespaced_job_status("r", "default", body)  # its resourceVersion is stale
    assert conflict.value.status == 409


def test_a_deleted_pod_of_a_running_job_is_replaced(fake_kube: FakeKube, core: client.CoreV1Api):
    fake_kube.add_node("n1", {"cpu": "4"})
    fake_kube.create("jobs", job("w", suspend=False, runtime=10_000), "default")
    first = eventually(lambda: core.list_namespaced_pod("default").items, what="a pod")[0]
    core.delete_namespaced_pod(first.metadata.name, "default")

    def replacement() -> list[client.V1Pod]:
        pods = core.list_namespaced_pod("default", field_selector="status.phase=Running").items
        return [p for p in pods if p.metadata.name != first.metadata.name]

    eventually(replacement, what="a new pod")
    stop = next(e for e in fake_kube.log_entries(types=["pod_stop"]))
    request = next(
        e for e in fake_kube.log_entries(types=["request"]) if e["id"] == stop["request"]
    )
    assert (stop["reason"], request["verb"], stop["actor"]) == ("Deleted", "delete", "api")


def test_requests_are_attributed_to_their_user_agent(fake_kube: FakeKube):
    batch = client.BatchV1Api(api_client(fake_kube.url, user_agent="worker-2"))
    batch.create_namespaced_job("default", job("u"))
    batch.patch_namespaced_job("u", "default", {"spec": {"suspend": False}})
    flips = fake_kube.log_entries(types=["suspend"])
    assert [(f["suspend"], f["user_agent"]) for f in flips] == [
        (True, "worker-2"),
        (False, "worker-2"),
    ]


def test_watch_custom_objects(custom: client.CustomObjectsApi):
    args = ("ray.io", "v1", "default", "rayjobs")
    start = custom.list_namespaced_custom_object(*args)["metadata"]["resourceVersion"]
    body = {"metadata": {"name": "ray"}, "spec": {"suspend": True}}
    custom.create_namespaced_custom_object(*args, body)
    custom.patch_namespaced_custom_object(*args, "ray", {"spec": {"suspend": False}})

    w = watch.Watch()
    stream = w.stream(
        custom.list_namespaced_custom_object, *args, resource_version=start, timeout_seconds=10
    )
    events = [(e["type"], e["object"]["spec"]["suspend"]) for e in itertools.islice(stream, 2)]
    w.stop()
    assert events == [("ADDED", True), ("MODIFIED", False)]
