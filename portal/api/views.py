"""Viewsets of the REST API. Each reads through a visibility-filtered queryset (another
tenant's object is a 404), checks the caller's role with queueing.access, and writes by
calling one action through its serializer."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db.models import Count, F, Max, Prefetch, Q, QuerySet, Subquery, Value
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import exceptions, mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.filters import OrderingFilter
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer
from rest_framework.views import APIView

from portal.api import filtersets
from portal.api import serializers as s
from portal.api.errors import PreconditionFailed
from portal.api.pagination import Pagination
from portal.api.permissions import TokenScope
from portal.models import APIToken
from portal.tokens import revoke_token
from queueing import access, actions, nodeview, whatif
from queueing.actions import Actor, ConflictError
from queueing.choices import HOLDING_PHASES, WAITING_PHASES, Phase, Source
from queueing.models import (
    AuditEvent,
    CycleRun,
    Membership,
    Queue,
    Quota,
    SimNode,
    Tenant,
    UsageSample,
    Workload,
)
from queueing.quantities import format_resources


def actor(request: Request) -> Actor:
    return Actor.of(request.user, Source.API)


class StableOrderingFilter(OrderingFilter):
    """``?ordering=-priority,name``; ties always break on id so pages never overlap."""

    def get_ordering(self, request: Request, queryset: QuerySet, view: Any) -> Sequence[str]:
        ordering = list(super().get_ordering(request, queryset, view) or ["id"])
        if not any(field.lstrip("-") in ("id", "pk") for field in ordering):
            ordering.append("-id" if ordering[0].startswith("-") else "id")
        return ordering


class BaseViewSet(viewsets.GenericViewSet):
    """Shared behaviour; subclasses say who may create, change and delete."""

    permission_classes = [IsAuthenticated, TokenScope]
    pagination_class = Pagination
    filter_backends = [DjangoFilterBackend, StableOrderingFilter]
    ordering_fields: Sequence[str] = ("id",)
    ordering: Sequence[str] = ("id",)
    named = False  # objects with a unique ``name`` may be addressed by it
    lookup_value_regex = "[0-9]+"

    # --- permissions (override) -------------------------------------------------------------
    def may_create(self, serializer: BaseSerializer) -> bool:
        return False

    def may_change(self, obj: Any) -> bool:
        return False

    def may_delete(self, obj: Any) -> bool:
        return self.may_change(obj)

    # --- lookups ----------------------------------------------------------------------------
    def get_object(self) -> Any:
        value = str(self.kwargs[self.lookup_url_kwarg or self.lookup_field])
        found: dict[str, Any]
        if value.isdigit():
            found = {"pk": int(value)}
        elif self.named and "\x00" not in value:
            found = {"name": value}
        else:
            raise exceptions.NotFound()
        obj = self.get_queryset().filter(**found).first()
        if obj is None:
            raise exceptions.NotFound()
        self.check_object_permissions(self.request, obj)
        return obj

    def check_object_permissions(self, request: Request, obj: Any) -> None:
        super().check_object_permissions(request, obj)
        if request.method == "DELETE":
            allowed = self.may_delete(obj)
        elif request.method in ("PUT", "PATCH") or (
            request.method == "POST" and self.detail_write(self.action)
        ):
            allowed = self.may_change(obj)
        else:
            allowed = True
        if not allowed:
            raise exceptions.PermissionDenied("Your role does not allow this.")

    def detail_write(self, action_name: str | None) -> bool:
        """POST actions on an object that change it (cancel); override to list them."""
        return False

    # --- lists ------------------------------------------------------------------------------
    def decorate(self, objects: Sequence[Any]) -> None:
        """Attach what the serializer needs for a page of objects (one query, not N)."""

    def paginate_queryset(self, queryset: Any) -> list[Any] | None:
        page = super().paginate_queryset(queryset)
        if page is not None and self.action == "list":
            self.decorate(page)
        return page

    # --- writes -----------------------------------------------------------------------------
    def perform_create(self, serializer: BaseSerializer) -> None:
        if not self.may_create(serializer):
            raise exceptions.PermissionDenied("Your role does not allow this.")
        serializer.save()

    def perform_destroy(self, instance: Any) -> None:
        raise NotImplementedError


# Mixins see the viewset's attributes when type-checked, and stay plain mixins at runtime.
if TYPE_CHECKING:
    _ViewSet = BaseViewSet
else:
    _ViewSet = object


class VersionedMixin(_ViewSet):
    """Optimistic concurrency for objects with a ``version``.

    Send the version you read either in the body (``"version": 3``; stale -> 409) or as
    ``If-Match: "3"`` (the ETag of the GET; stale -> 412). Nothing changes on a refusal.
    """

    versioned = True

    def if_match(self) -> int | None:
        header = self.request.headers.get("If-Match")
        if header is None or header.strip() == "*":
            return None
        value = header.split(",")[0].strip()
        value = value.removeprefix("W/").strip('"')
        if not value.isdigit():
            raise PreconditionFailed(f"If-Match {header!r} is not a version this API issued.")
        return int(value)

    def get_serializer_context(self) -> dict[str, Any]:
        context = super().get_serializer_context()
        if self.request is not None and self.request.method in ("PUT", "PATCH"):
            expected = self.if_match()
            if expected is not None:
                body = (
                    self.request.data.get("version")
                    if isinstance(self.request.data, dict)
                    else None
                )
                if body is not None and body != expected:
                    raise exceptions.ValidationError(
                        {"version": [f"version {body} and If-Match {expected} disagree."]}
                    )
                context["expected_version"] = expected
        return context

    def perform_update(self, serializer: BaseSerializer) -> None:
        try:
            serializer.save()
        except ConflictError as exc:
            if self.request.headers.get("If-Match") not in (None, "*"):
                raise PreconditionFailed(str(exc)) from exc
            raise

    def finalize_response(self, request: Request, response: Response, *args: Any, **kwargs: Any):
        response = super().finalize_response(request, response, *args, **kwargs)
        data = getattr(response, "data", None)
        if (
            getattr(self, "detail", False)
            and response.status_code < 300
            and isinstance(data, dict)
            and "version" in data
        ):
            response["ETag"] = f'"{data["version"]}"'
        return response

    def expected_for_delete(self) -> int | None:
        return self.if_match()

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        try:
            return super().destroy(request, *args, **kwargs)  # type: ignore[misc]
        except ConflictError as exc:
            raise PreconditionFailed(str(exc)) from exc


# --- tenants and memberships ----------------------------------------------------------------


class TenantViewSet(
    BaseViewSet,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
):
    """Tenants you belong to (all of them for cluster admins)."""

    serializer_class = s.TenantSerializer
    named = True
    lookup_value_regex = "[^/]+"
    ordering_fields = ("id", "name", "created_at")
    ordering = ("name",)

    def get_queryset(self) -> QuerySet[Tenant]:
        return access.visible_tenants(self.request.user)

    def get_serializer_context(self) -> dict[str, Any]:
        context = super().get_serializer_context()
        if self.request is not None and self.request.user.is_authenticated:
            context["roles"] = access.roles_by_tenant(self.request.user)
        return context

    def may_create(self, serializer: BaseSerializer) -> bool:
        return access.can_edit_tenant(self.request.user)

    def may_change(self, obj: Tenant) -> bool:
        return access.can_edit_tenant(self.request.user, obj)

    def perform_destroy(self, instance: Tenant) -> None:
        actions.delete_tenant(actor(self.request), instance)


class MembershipViewSet(
    BaseViewSet,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
):
    """Who belongs to your tenants, and as what. Tenant admins manage them."""

    serializer_class = s.MembershipSerializer
    filterset_class = filtersets.MembershipFilterSet
    ordering_fields = ("id", "created_at")
    ordering = ("tenant__name", "user__username")

    def get_queryset(self) -> QuerySet[Membership]:
        return access.visible(
            Membership.objects.select_related("tenant", "user"), self.request.user
        )

    def may_create(self, serializer: BaseSerializer) -> bool:
        return access.can_manage_members(self.request.user, serializer.validated_data["tenant"].pk)

    def may_change(self, obj: Membership) -> bool:
        return access.can_manage_members(self.request.user, obj.tenant_id)

    def perform_destroy(self, instance: Membership) -> None:
        actions.remove_membership(actor(self.request), instance)


# --- quotas -----------------------------------------------------------------------------------


@extend_schema_view(
    update=extend_schema(parameters=[OpenApiParameter("If-Match", str, "header")]),
    partial_update=extend_schema(parameters=[OpenApiParameter("If-Match", str, "header")]),
    destroy=extend_schema(parameters=[OpenApiParameter("If-Match", str, "header")]),
)
class QuotaViewSet(
    VersionedMixin,
    BaseViewSet,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
):
    """The elastic-quota tree: your tenants' quotas and the cluster-owned nodes above them."""

    serializer_class = s.QuotaSerializer
    filterset_class = filtersets.QuotaFilterSet
    named = True
    lookup_value_regex = "[^/]+"
    ordering_fields = ("id", "name", "created_at", "updated_at")
    ordering = ("name",)

    def get_queryset(self) -> QuerySet[Quota]:
        return (
            access.visible_quotas(self.request.user)
            .select_related("tenant", "parent", "default_queue")
            .prefetch_related(
                Prefetch("children", queryset=Quota.objects.only("id", "name", "parent_id"))
            )
        )

    def may_create(self, serializer: BaseSerializer) -> bool:
        data = serializer.validated_data
        return may_create_quota(self.request.user, data.get("parent"), data)

    def may_change(self, obj: Quota) -> bool:
        return access.can_edit_quota(self.request.user, obj)

    def perform_update(self, serializer: BaseSerializer) -> None:
        data = serializer.validated_data
        moved = "parent" in data and data["parent"] != serializer.instance.parent  # type: ignore[union-attr]
        if moved and not access.can_create_quota_under(self.request.user, data["parent"]):
            raise exceptions.PermissionDenied("You may not move a quota under that parent.")
        super().perform_update(serializer)

    def perform_destroy(self, instance: Quota) -> None:
        actions.delete_quota(
            actor(self.request), instance, expected_version=self.expected_for_delete()
        )

    @extend_schema(responses=s.QuotaTreeSerializer(many=True), filters=False)
    @action(detail=False, pagination_class=None, filter_backends=[])
    def tree(self, request: Request) -> Response:
        """The quota forest you can see, nested from each root."""
        rows = list(
            access.visible_quotas(request.user)
            .select_related("tenant", "default_queue")
            .order_by("name", "id")
        )
        nodes: dict[int, dict[str, Any]] = {}
        for quota in rows:
            nodes[quota.pk] = {
                "id": quota.pk,
                "name": quota.name,
                "tenant": quota.tenant.name if quota.tenant else None,
                "min": format_resources(quota.min),
                "max": format_resources(quota.max),
                "shared_weight": format_resources(quota.shared_weight),
                "allow_lent": quota.allow_lent,
                "default_queue": quota.default_queue.name if quota.default_queue else None,
                "version": quota.version,
                "children": [],
            }
        forest: list[dict[str, Any]] = []
        for quota in rows:
            parent = nodes.get(quota.parent_id) if quota.parent_id else None
            (parent["children"] if parent else forest).append(nodes[quota.pk])
        return Response(forest)


# --- queues -----------------------------------------------------------------------------------


@extend_schema_view(
    update=extend_schema(parameters=[OpenApiParameter("If-Match", str, "header")]),
    partial_update=extend_schema(parameters=[OpenApiParameter("If-Match", str, "header")]),
    destroy=extend_schema(parameters=[OpenApiParameter("If-Match", str, "header")]),
)
class QueueViewSet(
    VersionedMixin,
    BaseViewSet,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
):
    """Queues of your tenants, with how many workloads wait, hold admission and run."""

    serializer_class = s.QueueSerializer
    filterset_class = filtersets.QueueFilterSet
    named = True
    lookup_value_regex = "[^/]+"
    ordering_fields = ("id", "name", "priority", "created_at")
    ordering = ("-priority", "name")

    def get_queryset(self) -> QuerySet[Queue]:
        queryset = access.visible(Queue.objects.select_related("tenant"), self.request.user)
        if self.action in ("list", "retrieve"):
            queryset = queryset.annotate(
                pending=Count("workloads", filter=Q(workloads__phase__in=WAITING_PHASES)),
                admitted=Count("workloads", filter=Q(workloads__phase=Phase.ADMITTED)),
                running=Count("workloads", filter=Q(workloads__phase=Phase.RUNNING)),
            )
        return queryset

    def decorate(self, objects: Sequence[Queue]) -> None:
        names: dict[int, list[str]] = defaultdict(list)
        for queue_id, name in Quota.objects.filter(default_queue__in=objects).values_list(
            "default_queue_id", "name"
        ):
            names[queue_id].append(name)
        for queue in objects:
            queue.default_for = names.get(queue.pk, [])  # type: ignore[attr-defined]

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        queue = self.get_object()
        self.decorate([queue])
        return Response(self.get_serializer(queue).data)

    def may_create(self, serializer: BaseSerializer) -> bool:
        return access.can_edit_queue(self.request.user, serializer.validated_data["tenant"].pk)

    def may_change(self, obj: Queue) -> bool:
        return access.can_edit_queue(self.request.user, obj.tenant_id)

    def perform_destroy(self, instance: Queue) -> None:
        actions.delete_queue(
            actor(self.request), instance, expected_version=self.expected_for_delete()
        )

    @extend_schema(
        responses=s.PendingWorkloadSerializer(many=True),
        filters=False,
        description="The visibility list: every waiting workload of the queue in the order "
        "the engine would consider it, with its position, ETA (p50, p90) and why it waits.",
    )
    @action(detail=True, filter_backends=[])
    def pending(self, request: Request, pk: str | None = None) -> Response:
        queue = self.get_object()
        workloads = (
            Workload.objects.filter(queue=queue, phase__in=WAITING_PHASES)
            .select_related("quota")
            .only(*s.PendingWorkloadSerializer.Meta.fields, "quota__name", "queue_id")
            .order_by(
                F("position").asc(nulls_last=True),
                F("global_position").asc(nulls_last=True),
                "queue_order_at",
                "id",
            )
        )
        page = self.paginate_queryset(workloads)
        return self.get_paginated_response(
            s.PendingWorkloadSerializer(page, many=True, context=self.get_serializer_context()).data
        )


# --- workloads --------------------------------------------------------------------------------


class WorkloadViewSet(
    BaseViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin
):
    """Workloads of your tenants. Submit with POST; cancel with POST .../cancel/."""

    filterset_class = filtersets.WorkloadFilterSet
    ordering_fields = (
        "id",
        "name",
        "priority",
        "phase",
        "queue_order_at",
        "created_at",
        "position",
        "global_position",
        "eta_p50",
    )
    ordering = ("-id",)

    def get_queryset(self) -> QuerySet[Workload]:
        queryset = Workload.objects.all()
        if self.action != "list":
            queryset = queryset.select_related("tenant", "quota", "queue", "submitted_by")
        return access.visible(queryset, self.request.user)

    @extend_schema(responses=s.WorkloadSerializer(many=True))
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """One statement per page, whatever the table size:

            SELECT <row values>, (SELECT COUNT(*) FROM <matching>) AS total
            FROM workload ... WHERE id IN (SELECT id FROM <matching> ORDER BY ... LIMIT n)
            ORDER BY ...

        The inner select sorts and slices ids only (a late row lookup: sorting 50,000
        full rows costs more than the rest of the request); the page's rows are read as
        values with the names joined in (no model instances); the count rides along as
        an uncorrelated subquery, run once. Each round trip to the database counts when
        the machine is busy.
        """
        matching = self.filter_queryset(self.get_queryset())
        paginator = self.paginator
        assert isinstance(paginator, Pagination)
        limit = paginator.get_limit(request) or paginator.default_limit
        offset = paginator.get_offset(request)
        total = Subquery(
            matching.order_by()
            .annotate(one=Value(1))
            .values("one")
            .annotate(n=Count("*"))  # COUNT(*): an index-only scan can answer it
            .values("n")
        )
        page = list(
            Workload.objects.filter(id__in=matching.values("id")[offset : offset + limit])
            .annotate(total=total)
            .order_by(*matching.query.order_by)
            .values(*s.WORKLOAD_ROW_VALUES, "total")
        )
        # Past the last page no row carries the total: count it then.
        count = page[0]["total"] if page else (matching.count() if offset else 0)
        paginator.request, paginator.limit, paginator.offset, paginator.count = (
            request,
            limit,
            offset,
            count,
        )
        return self.get_paginated_response([s.workload_row(values) for values in page])

    def get_serializer_class(self) -> type[BaseSerializer]:
        if self.action == "create":
            return s.WorkloadSubmitSerializer
        if self.action == "list":
            return s.WorkloadSerializer
        if self.action == "cancel":
            return s.CancelSerializer
        return s.WorkloadDetailSerializer

    def detail_write(self, action_name: str | None) -> bool:
        return action_name == "cancel"

    def may_create(self, serializer: BaseSerializer) -> bool:
        return access.can_submit(self.request.user, serializer.tenant_id())  # type: ignore[attr-defined]

    def may_change(self, obj: Workload) -> bool:
        return access.can_submit(self.request.user, obj.tenant_id)

    @extend_schema(request=s.WorkloadSubmitSerializer, responses={201: s.WorkloadDetailSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        self.perform_create(serializer)
        workload = self.get_queryset().get(pk=serializer.instance.pk)  # type: ignore[union-attr]
        data = s.WorkloadDetailSerializer(workload, context=self.get_serializer_context()).data
        return Response(data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.CancelSerializer, responses=s.WorkloadDetailSerializer)
    @action(detail=True, methods=["post"], filter_backends=[])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Stop a workload: its job is deleted from the cluster and it becomes Cancelled."""
        workload = self.get_object()
        serializer = s.CancelSerializer(
            data=request.data or {}, context=self.get_serializer_context()
        )
        serializer.is_valid(raise_exception=True)
        actions.cancel_workload(
            actor(request), workload, reason=serializer.validated_data.get("reason", "")
        )
        workload = self.get_queryset().get(pk=workload.pk)
        return Response(
            s.WorkloadDetailSerializer(workload, context=self.get_serializer_context()).data
        )

    @extend_schema(responses=s.WorkloadEventSerializer(many=True), filters=False)
    @action(detail=True, pagination_class=None, filter_backends=[])
    def events(self, request: Request, pk: str | None = None) -> Response:
        """The workload's timeline: every phase change, oldest first."""
        workload = self.get_object()
        events = workload.events.order_by("at", "id")[:1000]
        return Response(s.WorkloadEventSerializer(events, many=True).data)


# --- cycles, audit ----------------------------------------------------------------------------


class CycleRunViewSet(BaseViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """Admission cycles, newest first: what each decided and how long it took."""

    serializer_class = s.CycleRunSerializer
    filterset_class = filtersets.CycleRunFilterSet
    ordering_fields = ("id", "started_at", "duration_ms")
    ordering = ("-started_at",)

    def get_queryset(self) -> QuerySet[CycleRun]:
        return CycleRun.objects.all()


class AuditEventViewSet(BaseViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """Who changed what, newest first: your tenants' events (all for cluster admins)."""

    serializer_class = s.AuditEventSerializer
    filterset_class = filtersets.AuditEventFilterSet
    ordering_fields = ("id", "at")
    ordering = ("-at",)

    def get_queryset(self) -> QuerySet[AuditEvent]:
        return access.visible_audit(self.request.user).select_related("tenant")


# --- tokens, simulated nodes ------------------------------------------------------------------


class APITokenViewSet(
    BaseViewSet,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
):
    """Your personal API tokens. The key is in the answer to the create, and never again."""

    serializer_class = s.APITokenSerializer
    ordering_fields = ("id", "created_at", "last_used_at")
    ordering = ("-created_at",)
    queryset = APIToken.objects.none()  # for the schema; requests use get_queryset

    def get_queryset(self) -> QuerySet[APIToken]:
        if not self.request.user.is_authenticated:
            return APIToken.objects.none()
        return APIToken.objects.filter(user=self.request.user)

    def may_create(self, serializer: BaseSerializer) -> bool:
        return True

    def may_change(self, obj: APIToken) -> bool:
        return obj.user_id == self.request.user.pk

    def perform_destroy(self, instance: APIToken) -> None:
        revoke_token(actor(self.request), instance)


class SimNodeViewSet(
    BaseViewSet,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
):
    """Nodes of the simulated cluster (simulated mode only). Cluster admins shape them."""

    serializer_class = s.SimNodeSerializer
    named = True
    lookup_value_regex = "[^/]+"
    ordering_fields = ("id", "name", "created_at")
    ordering = ("name",)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        if settings.KQ_CLUSTER != "simulated":
            raise exceptions.NotFound("There is no simulated cluster in kubernetes mode.")
        super().initial(request, *args, **kwargs)

    def get_queryset(self) -> QuerySet[SimNode]:
        return SimNode.objects.order_by("name", "id")

    def may_create(self, serializer: BaseSerializer) -> bool:
        return access.can_shape_cluster(self.request.user)

    def may_change(self, obj: SimNode) -> bool:
        return access.can_shape_cluster(self.request.user)

    def perform_destroy(self, instance: SimNode) -> None:
        actions.delete_sim_node(actor(self.request), instance)


# --- cluster overview, preview ----------------------------------------------------------------


def _add(total: dict[str, int], amounts: dict[str, Any], times: int = 1) -> None:
    for resource, amount in (amounts or {}).items():
        total[resource] = total.get(resource, 0) + int(amount) * times


class ClusterView(APIView):
    """Capacity, usage and runtime quota per quota (the quotas you can see)."""

    permission_classes = [IsAuthenticated, TokenScope]

    @extend_schema(responses=s.ClusterSerializer)
    def get(self, request: Request) -> Response:
        nodes = nodeview.read()  # the cycle's node view: the API never calls the cluster
        allocatable: dict[str, int] = {}
        reserved: dict[str, int] = {}
        for node in nodes:
            if node.unschedulable:
                continue
            _add(allocatable, dict(node.allocatable))
            _add(reserved, dict(node.reserved))

        quotas = list(
            access.visible_quotas(request.user)
            .select_related("tenant", "parent")
            .order_by("name", "id")
        )
        ids = [q.pk for q in quotas]
        used: dict[int, dict[str, int]] = defaultdict(dict)
        pending: dict[int, dict[str, int]] = defaultdict(dict)
        counts: dict[int, dict[str, int]] = defaultdict(dict)
        # Identical shapes collapse in the GROUP BY, so this reads few rows even when
        # tens of thousands of workloads wait.
        live = (
            Workload.objects.filter(phase__in=(*WAITING_PHASES, *HOLDING_PHASES))
            .values("quota_id", "phase", "total_request")
            .annotate(n=Count("id"))
            .order_by()
        )
        for row in live:
            quota_id, phase, n = row["quota_id"], row["phase"], row["n"]
            target = used if phase in HOLDING_PHASES else pending
            _add(target[quota_id], row["total_request"], n)
            counts[quota_id][phase] = counts[quota_id].get(phase, 0) + n
        cluster_used: dict[str, int] = {}
        for amounts in used.values():
            _add(cluster_used, amounts)
        # A parent holds what its subtree holds.
        parent_of = dict(Quota.objects.values_list("id", "parent_id"))
        rolled_used: dict[int, dict[str, int]] = defaultdict(dict)
        rolled_pending: dict[int, dict[str, int]] = defaultdict(dict)
        rolled_counts: dict[int, dict[str, int]] = defaultdict(dict)
        for quota_id in set(used) | set(pending):
            at: int | None = quota_id
            seen: set[int] = set()
            while at is not None and at not in seen:
                seen.add(at)
                _add(rolled_used[at], used.get(quota_id, {}))
                _add(rolled_pending[at], pending.get(quota_id, {}))
                _add(rolled_counts[at], counts.get(quota_id, {}))
                at = parent_of.get(at)

        latest = dict(
            UsageSample.objects.filter(quota_id__in=ids)
            .values("quota_id")
            .annotate(at=Max("at"))
            .values_list("quota_id", "at")
        )
        runtime: dict[int, tuple[dict[str, int], Any]] = {}
        if latest:
            condition = Q()
            for quota_id, latest_at in latest.items():
                condition |= Q(quota_id=quota_id, at=latest_at)
            for quota_id, sampled_at, values in UsageSample.objects.filter(condition).values_list(
                "quota_id", "at", "runtime"
            ):
                runtime[quota_id] = (values, sampled_at)

        free = {
            resource: max(0, amount - reserved.get(resource, 0) - cluster_used.get(resource, 0))
            for resource, amount in allocatable.items()
        }
        last_cycle = (
            CycleRun.objects.order_by("-started_at").values_list("started_at", flat=True).first()
        )
        return Response(
            s.ClusterSerializer(
                {
                    "mode": settings.KQ_CLUSTER,
                    "capacity": {
                        "nodes": len(nodes),
                        "schedulable_nodes": sum(1 for n in nodes if not n.unschedulable),
                        "allocatable": allocatable,
                        "reserved": reserved,
                        "used": cluster_used,
                        "free": free,
                    },
                    "quotas": [
                        {
                            "id": q.pk,
                            "name": q.name,
                            "tenant": q.tenant.name if q.tenant else None,
                            "parent": q.parent.name if q.parent else None,
                            "min": q.min,
                            "max": q.max,
                            "used": rolled_used.get(q.pk, {}),
                            "pending": rolled_pending.get(q.pk, {}),
                            "runtime": runtime.get(q.pk, ({}, None))[0],
                            "runtime_at": runtime.get(q.pk, ({}, None))[1],
                            "workloads": rolled_counts.get(q.pk, {}),
                        }
                        for q in quotas
                    ],
                    "last_cycle": last_cycle,
                }
            ).data
        )


class MeView(APIView):
    """Who you are to the API: your roles per tenant and the scope of the token you use."""

    permission_classes = [IsAuthenticated, TokenScope]

    @extend_schema(responses=s.MeSerializer)
    def get(self, request: Request) -> Response:
        roles = access.roles_by_tenant(request.user)
        names = dict(Tenant.objects.filter(id__in=roles).values_list("id", "name"))
        token = request.auth if isinstance(request.auth, APIToken) else None
        return Response(
            {
                "username": request.user.get_username(),
                "cluster_admin": access.is_cluster_admin(request.user),
                "roles": {names[tenant_id]: role for tenant_id, role in roles.items()},
                "token": {
                    "prefix": token.prefix,
                    "read_only": token.read_only,
                    "expires_at": token.expires_at.isoformat() if token.expires_at else None,
                }
                if token
                else None,
            }
        )


class PreviewView(APIView):
    """What a quota change would do, before you make it. Nothing is saved.

    POST the quota and the fields you would change (as for PATCH /quotas/{id}/); the
    answer gives each affected quota's runtime quota and each affected workload's
    position and ETA before and after. You need the right to edit the quota.
    """

    permission_classes = [IsAuthenticated, TokenScope]
    saves_nothing = True

    @extend_schema(request=s.PreviewSerializer, responses=s.PreviewResultSerializer)
    def post(self, request: Request) -> Response:
        serializer = s.PreviewSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        new = serializer.validated_data.get("new")
        if new is not None:
            if not may_create_quota(request.user, new["parent"], new):
                raise exceptions.PermissionDenied("You may not create a quota there.")
            preview = whatif.preview_quota_create(**s.new_quota_arguments(new)).as_dict()
            return Response(filter_preview(preview, request.user, new=new["name"]))
        quota = serializer.validated_data["quota"]
        if not access.can_edit_quota(request.user, quota):
            raise exceptions.PermissionDenied("You may not change this quota.")
        preview = whatif.preview_quota_change(quota, serializer.changes()).as_dict()
        return Response(filter_preview(preview, request.user))


def may_create_quota(user: Any, parent: Quota | None, data: Mapping[str, Any]) -> bool:
    """Cluster admins anywhere; tenant admins inside their own subtree, for their tenant."""
    if not access.can_create_quota_under(user, parent):
        return False
    if access.is_cluster_admin(user):
        return True
    return "tenant" not in data or (
        parent is not None and data["tenant"] is not None and data["tenant"].pk == parent.tenant_id
    )


def filter_preview(preview: dict[str, Any], user: Any, *, new: str = "") -> dict[str, Any]:
    """Keep what the caller may see: visible quotas (and the one it proposes to
    create), their own tenants' workloads."""
    if access.is_cluster_admin(user):
        return preview
    quota_names = set(access.visible_quotas(user).values_list("name", flat=True))
    if new:
        quota_names.add(new)
    workload_ids = [w["id"] for w in preview.get("workloads", [])]
    visible_ids = set(
        access.visible(Workload.objects.filter(id__in=workload_ids), user).values_list(
            "id", flat=True
        )
    )
    return {
        **preview,
        "quotas": [q for q in preview.get("quotas", []) if q["name"] in quota_names],
        "workloads": [w for w in preview.get("workloads", []) if w["id"] in visible_ids],
    }
