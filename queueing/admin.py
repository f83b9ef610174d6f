"""Django admin: a read-mostly window for cluster admins. Edits go through the product's
forms and API (which validate the tree and write audit events); the admin shows state."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from queueing import models


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(models.Tenant)
class TenantAdmin(ReadOnlyAdmin):
    list_display = ("name", "display_name", "created_at")
    search_fields = ("name", "display_name")


@admin.register(models.Membership)
class MembershipAdmin(ReadOnlyAdmin):
    list_display = ("user", "tenant", "role")
    list_filter = ("role", "tenant")


@admin.register(models.Quota)
class QuotaAdmin(ReadOnlyAdmin):
    list_display = ("name", "tenant", "parent", "min", "max", "allow_lent", "version")
    list_filter = ("tenant",)
    search_fields = ("name",)


@admin.register(models.Queue)
class QueueAdmin(ReadOnlyAdmin):
    list_display = ("name", "tenant", "policy", "priority", "max_depth", "version")
    list_filter = ("policy", "tenant")


@admin.register(models.Workload)
class WorkloadAdmin(ReadOnlyAdmin):
    list_display = (
        "name",
        "namespace",
        "tenant",
        "queue",
        "phase",
        "priority",
        "position",
        "created_at",
    )
    list_filter = ("phase", "tenant", "queue")
    search_fields = ("name", "namespace", "object_uid")
    list_select_related = ("tenant", "queue")


@admin.register(models.WorkloadEvent)
class WorkloadEventAdmin(ReadOnlyAdmin):
    list_display = ("workload", "at", "from_phase", "to_phase", "reason")


@admin.register(models.AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ("at", "actor_name", "source", "action", "object_repr", "tenant")
    list_filter = ("source", "action")


@admin.register(models.CycleRun)
class CycleRunAdmin(ReadOnlyAdmin):
    list_display = (
        "started_at",
        "root",
        "duration_ms",
        "admitted",
        "preempted",
        "pending",
        "conflicts",
    )


@admin.register(models.UsageLedger)
class UsageLedgerAdmin(ReadOnlyAdmin):
    list_display = ("quota", "updated_at")


@admin.register(models.SimNode)
class SimNodeAdmin(ReadOnlyAdmin):
    list_display = ("name", "allocatable", "unschedulable")


@admin.register(models.SimJob)
class SimJobAdmin(ReadOnlyAdmin):
    list_display = (
        "namespace",
        "name",
        "state",
        "suspended",
        "admissions",
        "started_at",
        "finished_at",
    )
    list_filter = ("state",)
