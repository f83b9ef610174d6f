"""Shared API tests in the style of NetBox's ``APIViewTestCases``.

An endpoint's test class names its route (``basename``), the object personas act on, the
data to send, and the expected status per persona; the mixins then test every method for
every persona (anonymous, another tenant's admin, viewer, member, tenant admin, cluster
admin, a read-only token). Each call runs in a savepoint that is rolled back, so all
personas act on the same world. Lists also get a query-count test: adding objects must
not add queries. Every write is then checked as NetBox checks it: the object is read
back afresh and holds what was sent, and exactly one audit event of the write names
the object, the caller and the API as the door.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from queueing.choices import Source
from queueing.models import AuditEvent
from tests.portal.api.conftest import PERSONAS, ApiWorld

_USER_OF = {"read_only": "cluster_admin"}  # the read-only token is the cluster admin's


def holds(got: Any, sent: Any) -> bool:
    """What was read back holds what was sent; defaults the server filled in may be extra."""
    if isinstance(sent, dict):
        return isinstance(got, dict) and all(k in got and holds(got[k], v) for k, v in sent.items())
    if isinstance(sent, list):
        return (
            isinstance(got, list)
            and len(got) == len(sent)
            and all(holds(g, v) for g, v in zip(got, sent, strict=True))
        )
    return bool(got == sent)


def last_audit_id() -> int:
    return AuditEvent.objects.order_by("-pk").values_list("pk", flat=True).first() or 0


READERS = ("viewer", "member", "tenant_admin", "cluster_admin", "read_only")
MEMBERS = ("member", "tenant_admin", "cluster_admin")
ADMINS = ("tenant_admin", "cluster_admin")
CLUSTER_ADMIN = ("cluster_admin",)
SIGNED_IN = ("outsider", *READERS)


def matrix(
    ok: int, allowed: Iterable[str], *, hidden: Iterable[str] = (), **special: int
) -> dict[str, int]:
    """Expected status per persona: ``ok`` for the allowed, 404 for those who cannot see
    the object, 401 for the anonymous, 403 for everyone else; ``special`` overrides."""
    allowed, hidden = set(allowed), set(hidden)
    expected = {}
    for persona in PERSONAS:
        if persona == "anonymous":
            expected[persona] = 401
        elif persona in hidden:
            expected[persona] = 404
        elif persona in allowed:
            expected[persona] = ok
        else:
            expected[persona] = 403
    expected.update(special)
    return expected


def outcomes(api: ApiWorld, method: str, url: str, data: Any = None, **extra: Any) -> dict:
    return {p: api.attempt(p, method, url, data, **extra).status_code for p in PERSONAS}


def count_queries(call: Callable[[], Any]) -> int:
    with CaptureQueriesContext(connection) as context:
        response = call()
    assert response.status_code == 200, response.content
    return len(context.captured_queries)


class APITest:
    basename: ClassVar[str]
    audit_object: ClassVar[str] = ""  # the audit actions' prefix; the basename if empty
    audit_verbs: ClassVar[dict[str, str]] = {}  # e.g. {"create": "submit"}

    def audit_action(self, verb: str) -> str:
        return f"{self.audit_object or self.basename}.{self.audit_verbs.get(verb, verb)}"

    def assert_audited(
        self, api: ApiWorld, verb: str, object_id: Any, persona: str, since: int
    ) -> AuditEvent:
        """Exactly one audit event of this write: its action, object, caller, door."""
        found = list(AuditEvent.objects.filter(pk__gt=since, object_id=str(object_id)))
        assert [e.action for e in found] == [self.audit_action(verb)], found
        event = found[0]
        assert event.actor_name == api.users[_USER_OF.get(persona, persona)].get_username()
        assert event.source == Source.API
        if verb == "update":
            assert event.before is not None
            assert event.after is not None
            assert event.before != event.after, "an update that changed nothing"
        return event

    def list_url(self) -> str:
        return reverse(f"api:{self.basename}-list")

    def detail_url(self, obj: Any) -> str:
        return reverse(f"api:{self.basename}-detail", kwargs={"pk": obj.pk})

    def target(self, api: ApiWorld) -> Any:
        """A team-a object the personas read and change."""
        raise NotImplementedError


class ListObjects(APITest):
    list_expect: ClassVar[dict[str, int]] = matrix(200, SIGNED_IN)
    max_list_queries: ClassVar[int] = 8

    def hidden_from_team_a(self, api: ApiWorld) -> Any:
        """An object team-a's personas must not see in the list (None: nothing to hide)."""
        return None

    def add_more(self, api: ApiWorld) -> None:
        """Add objects of this kind (with their relations) for the query-count test."""
        raise NotImplementedError

    def list_params(self, api: ApiWorld) -> dict[str, Any]:
        return {}

    def test_list_permissions(self, api: ApiWorld) -> None:
        assert outcomes(api, "get", self.list_url()) == self.list_expect

    def test_list_leaves_out_other_tenants_objects(self, api: ApiWorld) -> None:
        self.list_params(api)  # what the list needs to have rows
        hidden = self.hidden_from_team_a(api)
        if hidden is None:  # nothing of this kind is a tenant's: every reader sees it all
            seen = {p: sorted(row["id"] for row in self.rows(api, p)) for p in READERS}
            assert seen["viewer"], "the list is empty: the test would prove nothing"
            assert all(ids == seen["viewer"] for ids in seen.values()), seen
            return
        for persona in ("viewer", "member", "tenant_admin"):
            ids = {row["id"] for row in self.rows(api, persona)}
            assert hidden.pk not in ids, persona
        assert hidden.pk in {row["id"] for row in self.rows(api, "cluster_admin")}

    def rows(self, api: ApiWorld, persona: str) -> list[dict[str, Any]]:
        data = api.call(persona, "get", self.list_url(), {"limit": 1000}).json()
        return data["results"] if isinstance(data, dict) else data

    def test_list_query_count_does_not_grow(self, api: ApiWorld) -> None:
        params = {**self.list_params(api), "limit": 1000}
        personas = ("cluster_admin", "member")
        clients = {p: api.client(p) for p in personas}
        for client in clients.values():  # warm up: a token's first use records last_used_at
            client.get(self.list_url(), params)

        def measure() -> tuple[dict[str, int], int]:
            counts = {p: count_queries(lambda c=c: c.get(self.list_url(), params))
                      for p, c in clients.items()}  # fmt: skip
            body = clients["cluster_admin"].get(self.list_url(), params).json()
            return counts, len(body["results"] if isinstance(body, dict) else body)

        before, rows_before = measure()
        self.add_more(api)
        after, rows_after = measure()
        assert rows_after > rows_before + 1, "add_more should add at least two visible objects"
        assert after == before, "a query per row: N+1"
        assert max(after.values()) <= self.max_list_queries, after


class GetObject(APITest):
    get_expect: ClassVar[dict[str, int]] = matrix(200, READERS, hidden=("outsider",))

    def test_get_permissions(self, api: ApiWorld) -> None:
        assert outcomes(api, "get", self.detail_url(self.target(api))) == self.get_expect

    def test_get_unknown_is_404(self, api: ApiWorld) -> None:
        target = self.target(api)
        url = self.detail_url(target).replace(f"/{target.pk}/", "/987654/")
        response = api.call("cluster_admin", "get", url)
        assert response.status_code == 404
        assert response.json()["code"] == "not_found"


class CreateObject(APITest):
    create_expect: ClassVar[dict[str, int]]
    write_only: ClassVar[tuple[str, ...]] = ()  # sent, never answered (e.g. a template)
    answered_once: ClassVar[tuple[str, ...]] = ()  # in the creation's answer only (a key)

    def create_data(self, api: ApiWorld) -> dict[str, Any]:
        raise NotImplementedError

    def test_create_permissions(self, api: ApiWorld) -> None:
        assert outcomes(api, "post", self.list_url(), self.create_data(api)) == self.create_expect

    def test_create_answers_the_new_object(self, api: ApiWorld) -> None:
        persona = next(p for p, code in self.create_expect.items() if code == 201)
        data = self.create_data(api)
        since = last_audit_id()
        response = api.call(persona, "post", self.list_url(), data)
        assert response.status_code == 201, response.json()
        created = response.json()
        assert isinstance(created["id"], int)
        self.assert_audited(api, "create", created["id"], persona, since)
        fetched = api.call(persona, "get", self.detail_url(_Pk(created["id"])))
        assert fetched.status_code == 200
        once = {key: None for key in self.answered_once}
        assert fetched.json() == {**created, **once}, "the answer is what a fresh read returns"
        for key, value in data.items():
            if key in self.write_only:
                continue
            assert holds(fetched.json()[key], value), (key, fetched.json()[key], value)

    def test_create_rejects_unknown_fields(self, api: ApiWorld) -> None:
        data = {**self.create_data(api), "no_such_field": 1}
        response = api.call("cluster_admin", "post", self.list_url(), data)
        assert response.status_code == 400
        assert response.json()["fields"]["no_such_field"] == ["Unknown field."]


class UpdateObject(APITest):
    update_expect: ClassVar[dict[str, int]] = matrix(200, ADMINS, hidden=("outsider",))

    def update_data(self, api: ApiWorld) -> dict[str, Any]:
        raise NotImplementedError

    def test_patch_permissions(self, api: ApiWorld) -> None:
        url = self.detail_url(self.target(api))
        assert outcomes(api, "patch", url, self.update_data(api)) == self.update_expect

    def test_put_permissions_with_the_representation_sent_back(self, api: ApiWorld) -> None:
        url = self.detail_url(self.target(api))
        current = api.call("cluster_admin", "get", url).json()
        assert outcomes(api, "put", url, {**current, **self.update_data(api)}) == (
            self.update_expect
        )

    def test_update_changes_what_was_asked(self, api: ApiWorld) -> None:
        url = self.detail_url(self.target(api))
        persona = next(p for p, code in self.update_expect.items() if code == 200)
        data = self.update_data(api)
        since = last_audit_id()
        response = api.call(persona, "patch", url, data)
        assert response.status_code == 200, response.json()
        self.assert_audited(api, "update", self.target(api).pk, persona, since)
        fetched = api.call(persona, "get", url).json()
        assert fetched == response.json(), "the answer is what a fresh read returns"
        for key, value in data.items():
            if key != "version":
                assert holds(fetched[key], value), (key, fetched[key], value)

    def test_update_rejects_unknown_fields(self, api: ApiWorld) -> None:
        url = self.detail_url(self.target(api))
        response = api.call("cluster_admin", "patch", url, {"no_such_field": 1})
        assert response.status_code == 400
        assert response.json()["fields"] == {"no_such_field": ["Unknown field."]}


class DeleteObject(APITest):
    delete_expect: ClassVar[dict[str, int]] = matrix(204, ADMINS, hidden=("outsider",))

    def delete_target(self, api: ApiWorld) -> Any:
        return self.target(api)

    def test_delete_permissions(self, api: ApiWorld) -> None:
        obj = self.delete_target(api)
        assert outcomes(api, "delete", self.detail_url(obj)) == self.delete_expect
        assert type(obj).objects.filter(pk=obj.pk).exists()  # every attempt rolled back

    def test_delete_removes_it(self, api: ApiWorld) -> None:
        obj = self.delete_target(api)
        persona = next(p for p, code in self.delete_expect.items() if code == 204)
        since = last_audit_id()
        assert api.call(persona, "delete", self.detail_url(obj)).status_code == 204
        assert not type(obj).objects.filter(pk=obj.pk).exists()
        self.assert_audited(api, "delete", obj.pk, persona, since)
        assert api.call("cluster_admin", "get", self.detail_url(obj)).status_code == 404


class ReadOnlyEndpoint(APITest):
    """Writes are not methods of this endpoint: 405 for anyone signed in."""

    def test_writes_are_not_allowed(self, api: ApiWorld) -> None:
        for method, url in (
            ("post", self.list_url()),
            ("put", self.detail_url(self.target(api))),
            ("patch", self.detail_url(self.target(api))),
            ("delete", self.detail_url(self.target(api))),
        ):
            response = api.attempt("cluster_admin", method, url, {})
            assert response.status_code == 405, (method, url)
            assert response.json()["code"] == "method_not_allowed"
            assert api.attempt("anonymous", method, url, {}).status_code == 401


class _Pk:
    def __init__(self, pk: int) -> None:
        self.pk = pk


class StandardEndpoint(ListObjects, GetObject, CreateObject, UpdateObject, DeleteObject):
    """List, get, create, update, delete."""
