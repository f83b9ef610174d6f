"""The OpenAPI schema: valid, warning-free, and true to a live server (schemathesis)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
import yaml
from django.core.management import call_command
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from pytest_django.live_server_helper import LiveServer
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from queueing.cluster import set_cluster
from tests.portal.api.conftest import ApiWorld, build_api_world

# Bounded for CI; KQ_SCHEMATHESIS_EXAMPLES=50 makes a deeper run (about two minutes).
EXAMPLES_PER_OPERATION = int(os.environ.get("KQ_SCHEMATHESIS_EXAMPLES", "8"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


def test_the_schema_is_valid_openapi_without_warnings(tmp_path: Path, db: None) -> None:
    target = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(target))
    schema = yaml.safe_load(target.read_text())
    assert schema["openapi"].startswith("3.")
    paths = set(schema["paths"])
    for expected in (
        "/api/v1/workloads/",
        "/api/v1/workloads/{id}/cancel/",
        "/api/v1/queues/{id}/pending/",
        "/api/v1/quotas/tree/",
        "/api/v1/cluster/",
        "/api/v1/preview/",
        "/api/v1/tokens/",
        "/api/v1/sim/nodes/",
    ):
        assert expected in paths
    error = schema["components"]["schemas"]["Error"]
    assert set(error["required"]) == {"status", "code", "detail", "fields"}
    assert "tokenAuth" in schema["components"]["securitySchemes"]


def known_ids(world: ApiWorld) -> dict[str, int]:
    """An existing object per detail route (a cycle is recorded for the purpose)."""
    from django.utils import timezone

    from portal.models import APIToken
    from queueing.models import AuditEvent, CycleRun, Membership, SimNode

    cycle = CycleRun.objects.create(root="cluster", started_at=timezone.now())
    return {
        "/api/v1/audit/": AuditEvent.objects.latest("id").pk,
        "/api/v1/cycles/": cycle.pk,
        "/api/v1/memberships/": Membership.objects.get(user=world.users["viewer"]).pk,
        "/api/v1/queues/": world.queue.pk,
        "/api/v1/quotas/": world.dev.pk,
        "/api/v1/sim/nodes/": SimNode.objects.get(name="node-1").pk,
        "/api/v1/tenants/": world.tenant.pk,
        "/api/v1/tokens/": APIToken.objects.filter(user=world.users["cluster_admin"]).first().pk,  # type: ignore[union-attr]
        "/api/v1/workloads/": world.workload.pk,
    }


@pytest.fixture
def served(transactional_db: None) -> Iterator[tuple[str, ApiWorld]]:
    """The API on a live server bound to a free loopback port, stopped afterwards."""
    world = build_api_world()
    set_cluster(world.w.cluster)
    server = LiveServer("127.0.0.1:0")
    try:
        yield server.url, world
    finally:
        server.stop()
        set_cluster(None)


# Every operation's answers against the schema: what the backend stores does not change
# the answers' shape (the endpoints' own tests run on both), so CI runs this minute-long
# walk in its PostgreSQL pass only (a local make test always runs it).
@pytest.mark.ci_pass_postgres
def test_a_live_server_answers_as_its_schema_says(served: tuple[str, ApiWorld]) -> None:
    """Bounded fuzzing of every operation as a cluster admin: no 5xx, every answer (errors
    included) conforms to the schema: status, content type, headers and body."""
    base_url, world = served
    schema = schemathesis.openapi.from_url(f"{base_url}/api/schema/")
    headers = {"Authorization": f"Token {world.keys['cluster_admin']}"}
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 48  # every route of portal/api/urls.py, each method

    known = known_ids(world)
    runs: list[tuple[Any, dict[str, str]]] = [(operation, {}) for operation in operations]
    # Random ids are mostly 404s; run every detail operation on a real object as well.
    runs += [
        (operation, {"id": str(known[prefix])})
        for operation in operations
        for prefix in known
        if operation.path.startswith(prefix) and "{id}" in operation.path
    ]
    # Positive examples (valid per schema) and negative ones (invalid on purpose: must be
    # refused with a documented 4xx, never a 5xx).
    runs_by_mode = [(op, params, GenerationMode.POSITIVE) for op, params in runs]
    runs_by_mode += [
        (op, params, GenerationMode.NEGATIVE)
        for op, params in runs
        if len(op.body) or len(op.query)
    ]
    for operation, path_parameters, mode in runs_by_mode:

        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy(mode, path_parameters=path_parameters or None))
        def check(case: Any) -> None:
            response = case.call(base_url=base_url, headers=headers, timeout=30)
            case.validate_response(response, checks=CHECKS, headers=headers)

        try:
            check()
        except Unsatisfiable:
            assert mode is GenerationMode.NEGATIVE  # nothing in it can be made invalid
        except Exception as exc:  # collect, so one run reports every operation that fails
            failures.append(f"{operation.label} {path_parameters} {mode}: {exc}"[:3000])
    assert not failures, "\n\n".join(failures)


def test_realistic_answers_conform_too(served: tuple[str, ApiWorld]) -> None:
    """Fuzzing rarely composes a valid submission or preview; these do, and their answers
    are checked against the schema like any other."""
    import requests

    base_url, world = served
    schema = schemathesis.openapi.from_url(f"{base_url}/api/schema/")
    headers = {"Authorization": f"Token {world.keys['tenant_admin']}"}
    calls = [
        ("POST", "/api/v1/workloads/", None, {
            "name": "real-job", "queue": "team-a-train", "priority": 5000,
            "pod_sets": [{"count": 2, "requests": {"cpu": "500m", "memory": "1Gi"}}],
        }),
        ("POST", "/api/v1/preview/", None, {"quota": "team-a-train", "min": {"cpu": "2"}, "max": {"cpu": "2"}}),
        ("PATCH", "/api/v1/quotas/{id}/", world.dev.pk, {"max": {"cpu": "6"}, "version": 1}),
        ("PATCH", "/api/v1/queues/{id}/", world.queue.pk, {"priority": 3}),
        ("POST", "/api/v1/workloads/{id}/cancel/", world.workload.pk, {"reason": "done"}),
        ("GET", "/api/v1/workloads/{id}/events/", world.workload.pk, None),
        ("GET", "/api/v1/queues/{id}/pending/", world.queue.pk, None),
        ("POST", "/api/v1/tokens/", None, {"name": "ci", "read_only": True}),
    ]  # fmt: skip
    for method, path, pk, body in calls:
        url = base_url + path.replace("{id}", str(pk))
        response = requests.request(method, url, json=body, headers=headers, timeout=30)
        assert response.status_code < 300, (path, response.text)
        schema[path][method].validate_response(response)


def _schema() -> dict[str, Any]:
    from drf_spectacular.generators import SchemaGenerator

    return dict(SchemaGenerator().get_schema(request=None, public=True))


def test_every_operation_declares_the_outage_and_every_body_its_limit(db: None) -> None:
    """503 (the database is away, portal.outage) can answer any operation, and 413 (a body
    over KQ_MAX_BODY_BYTES) any that takes a body: both are declared, in the error shape,
    503 and 429 with their Retry-After."""
    schema = _schema()
    operations = [
        (path, method, operation)
        for path, item in schema["paths"].items()
        for method, operation in item.items()
        if method in ("get", "post", "put", "patch", "delete")
    ]
    assert len(operations) > 20
    for path, method, operation in operations:
        responses = operation["responses"]
        where = f"{method.upper()} {path}"
        assert "503" in responses, where
        assert responses["503"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/Error"
        }, where
        assert "Retry-After" in responses["503"]["headers"], where
        if "429" in responses:
            assert "Retry-After" in responses["429"].get("headers", {}), where
        if method in ("post", "put", "patch"):
            assert "413" in responses, where
        else:
            assert "413" not in responses, where


def test_the_413_and_503_answers_are_what_the_schema_declares(
    api: ApiWorld, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    import jsonschema
    from django.db import OperationalError
    from django.test import Client

    from portal.api import views

    schema = _schema()
    error = schema["components"]["schemas"]["Error"]
    operation = schema["paths"]["/api/v1/workloads/"]

    client = Client()
    client.force_login(api.users["member"])
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    big = client.post(
        "/api/v1/workloads/",
        json.dumps({"name": "big", "annotations": {"pad": "x" * 4096}}),
        content_type="application/json",
    )
    assert big.status_code == 413
    assert "413" in operation["post"]["responses"]
    jsonschema.validate(big.json(), error)

    def down(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("connection to server at 127.0.0.1 failed: Connection refused")

    monkeypatch.setattr(views.WorkloadViewSet, "list", down)
    away = client.get("/api/v1/workloads/")
    assert away.status_code == 503
    assert "503" in operation["get"]["responses"]
    jsonschema.validate(away.json(), error)
    assert int(away["Retry-After"]) >= 0
