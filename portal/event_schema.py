"""JSON Schemas of every live-stream message, as plain data (docs/events.md explains them).

``SERVER_MESSAGES`` and ``CLIENT_MESSAGES`` are the WebSocket protocol; ``NOTIFICATIONS``
are what generation (queueing.events) sends through the channel layer to the consumers.
Tests validate real messages against these; nothing imports a validator at run time.
"""

from __future__ import annotations

from typing import Any

_ID = {"type": "integer", "minimum": 1}
_TIME = {"type": ["string", "null"], "format": "date-time"}
_POSITION = {"type": ["integer", "null"], "minimum": 1}
_PHASE = {
    "enum": [
        "Pending",
        "Backoff",
        "Admitted",
        "Running",
        "Preempted",
        "Succeeded",
        "Failed",
        "Cancelled",
    ]
}
_RESOURCES = {"type": "object", "additionalProperties": {"type": "integer"}}

WORKLOAD_ROW: dict[str, Any] = {
    "type": "object",
    "required": [
        "id", "name", "namespace", "queue_id", "queue", "quota_id", "quota", "phase",
        "priority", "position", "global_position", "eta_p50", "eta_p90", "reason",
        "eta_note", "eta_why", "eta_by_age", "starts_by",
        "queue_order_at", "admitted_at", "started_at", "finished_at",
    ],
    "additionalProperties": False,
    "properties": {
        "id": _ID,
        "name": {"type": "string"},
        "namespace": {"type": "string"},
        "queue_id": _ID,
        "queue": {"type": "string"},
        "quota_id": _ID,
        "quota": {"type": "string"},
        "phase": _PHASE,
        "priority": {"type": "integer"},
        "position": _POSITION,
        "global_position": _POSITION,
        "eta_p50": _TIME,
        "eta_p90": _TIME,
        "reason": {"type": "string"},
        "eta_note": {"type": "string"},
        "eta_why": {"type": "string"},
        "eta_by_age": {"type": "boolean"},
        "starts_by": _TIME,
        "queue_order_at": _TIME,
        "admitted_at": _TIME,
        "started_at": _TIME,
        "finished_at": _TIME,
    },
}  # fmt: skip

WORKLOAD_STUB: dict[str, Any] = {
    "type": "object",
    "required": ["id", "queue_id", "phase", "position"],
    "additionalProperties": False,
    "properties": {"id": _ID, "queue_id": _ID, "phase": _PHASE, "position": _POSITION},
}

WINDOW: dict[str, Any] = {
    "type": "object",
    "required": ["queue", "from", "to", "pending", "holding", "ids"],
    "additionalProperties": False,
    "properties": {
        "queue": _ID,
        "from": _ID,
        "to": _ID,
        "pending": {"type": "integer", "minimum": 0},
        "holding": {"type": "integer", "minimum": 0},
        "ids": {"type": "array", "items": _ID},
    },
}

_TENANT = {"type": ["integer", "null"]}
_CYCLE = {"type": ["integer", "null"]}
_NAME = {"type": "string", "minLength": 1}
_VERSION = {"type": "integer", "minimum": 1}

# Rows of the configuration messages (queueing.events.config_message). The cycle's
# ``quotas`` rows carry only id, name, runtime, used, min and max; an action's the whole
# row. A client merges a row by key into what it fetched.
QUOTA_ROW: dict[str, Any] = {
    "type": "object",
    "required": ["id", "name", "runtime", "used", "min", "max"],
    "additionalProperties": False,
    "properties": {
        "id": _ID,
        "name": _NAME,
        "parent_id": {"type": ["integer", "null"]},
        "runtime": _RESOURCES,
        "used": _RESOURCES,
        "min": _RESOURCES,
        "max": _RESOURCES,
        "shared_weight": _RESOURCES,
        "fair_weight": {"type": "number", "exclusiveMinimum": 0},
        "allow_lent": {"type": "boolean"},
        "namespaces": {"type": "array", "items": {"type": "string"}},
        "default_queue_id": {"type": ["integer", "null"]},
        "version": _VERSION,
    },
}
QUEUE_ROW: dict[str, Any] = {
    "type": "object",
    "required": ["id", "name", "policy", "priority", "version"],
    "additionalProperties": False,
    "properties": {
        "id": _ID,
        "name": _NAME,
        "policy": {"type": "string"},
        "priority": {"type": "integer"},
        "priority_threshold": {"type": "integer"},
        "max_depth": {"type": "integer", "minimum": 0},
        "preempt_within_quota": {"type": "string"},
        "reclaim": {"type": "string"},
        "admission_timeout_s": {"type": ["integer", "null"]},
        "backoff_base_s": {"type": "number"},
        "backoff_max_s": {"type": "number"},
        "backoff_jitter": {"type": "number"},
        "aging_bound_s": {"type": ["number", "null"]},
        "max_execution_s": {"type": ["integer", "null"], "minimum": 1},
        "version": _VERSION,
    },
}
MEMBER_ROW: dict[str, Any] = {
    "type": "object",
    "required": ["user", "username", "role"],
    "additionalProperties": False,
    "properties": {
        "user": _ID,
        "username": _NAME,
        "role": {"enum": ["viewer", "member", "admin"]},
    },
}
TENANT_ROW: dict[str, Any] = {
    "type": "object",
    "required": ["id", "name", "display_name", "description"],
    "additionalProperties": False,
    "properties": {
        "id": _ID,
        "name": _NAME,
        "display_name": {"type": "string"},
        "description": {"type": "string"},
    },
}
NODE_ROW: dict[str, Any] = {
    "type": "object",
    "required": ["name", "allocatable", "reserved", "labels", "taints", "unschedulable"],
    "additionalProperties": False,
    "properties": {
        "name": _NAME,
        "allocatable": _RESOURCES,
        "reserved": _RESOURCES,
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "taints": {"type": "array", "items": {"type": "object"}},
        "unschedulable": {"type": "boolean"},
    },
}


def _config(kind: str, row: dict[str, Any], key: dict[str, Any], tenant: dict[str, Any]) -> dict:
    """``{"type": kind, "tenant", "cycle", "at", kind: [row...], "removed": [key...]}``."""
    return {
        "type": "object",
        "required": ["type", "tenant", "cycle", "at", kind],
        "additionalProperties": False,
        "properties": {
            "type": {"const": kind},
            "tenant": tenant,
            "cycle": _CYCLE,
            "at": _TIME,
            kind: {"type": "array", "items": row},
            "removed": {"type": "array", "items": key},
        },
    }


CONFIG_MESSAGES: dict[str, dict[str, Any]] = {
    "quotas": _config("quotas", QUOTA_ROW, _ID, _TENANT),  # null: a cluster quota
    "queues": _config("queues", QUEUE_ROW, _ID, _ID),
    "members": _config("members", MEMBER_ROW, _ID, _ID),
    "tenants": _config("tenants", TENANT_ROW, _ID, _ID),
    "nodes": _config("nodes", NODE_ROW, _NAME, {"type": "null"}),
}

SERVER_MESSAGES: dict[str, dict[str, Any]] = {
    "hello": {
        "type": "object",
        "required": ["type", "tenant", "protocol", "debounce_ms"],
        "additionalProperties": False,
        "properties": {
            "type": {"const": "hello"},
            "tenant": _TENANT,
            "protocol": {"const": 2},
            "debounce_ms": {"type": "integer", "minimum": 0},
        },
    },
    "workloads": {
        "type": "object",
        "required": ["type", "tenant", "cycle", "at", "changes", "removed"],
        "additionalProperties": False,
        "properties": {
            "type": {"const": "workloads"},
            "tenant": _ID,
            "cycle": _CYCLE,
            "at": _TIME,
            "changes": {"type": "array", "items": {"anyOf": [WORKLOAD_ROW, WORKLOAD_STUB]}},
            "removed": {"type": "array", "items": _ID},
            "windows": {"type": "array", "items": WINDOW},
        },
    },
    "activity": {
        "type": "object",
        "required": ["type", "tenant", "cycle", "at", "queues", "workloads"],
        "additionalProperties": False,
        "properties": {
            "type": {"const": "activity"},
            "tenant": _ID,
            "cycle": _CYCLE,
            "at": _TIME,
            "queues": {"type": "array", "items": _ID},
            "workloads": {"type": "integer", "minimum": 0},
        },
    },
    "resync": {
        "type": "object",
        "required": ["type", "tenant", "cycle", "at", "queues"],
        "additionalProperties": False,
        "properties": {
            "type": {"const": "resync"},
            "tenant": _ID,
            "cycle": _CYCLE,
            "at": _TIME,
            "queues": {"type": "array", "items": _ID},
        },
    },
    "subscribed": {
        "type": "object",
        "required": ["type", "queues", "workloads", "summary"],
        "additionalProperties": False,
        "properties": {
            "type": {"const": "subscribed"},
            "queues": {
                "anyOf": [
                    {"const": "*"},
                    {
                        "type": "array",
                        "items": {
                            "anyOf": [
                                _ID,
                                {
                                    "type": "object",
                                    "required": ["id", "from", "to"],
                                    "properties": {"id": _ID, "from": _ID, "to": _ID},
                                },
                            ]
                        },
                    },
                ]
            },
            "workloads": {"type": "array", "items": _ID},
            "summary": {"type": "boolean"},
        },
    },
    "pong": {
        "type": "object",
        "required": ["type"],
        "additionalProperties": False,
        "properties": {"type": {"const": "pong"}},
    },
    "error": {
        "type": "object",
        "required": ["type", "code", "message"],
        "additionalProperties": False,
        "properties": {
            "type": {"const": "error"},
            "code": {"enum": ["invalid", "too_large", "rate"]},
            "message": {"type": "string"},
        },
    },
}

CLIENT_MESSAGES: dict[str, dict[str, Any]] = {
    "ping": {
        "type": "object",
        "required": ["type"],
        "properties": {"type": {"const": "ping"}},
    },
    "subscribe": {
        "type": "object",
        "required": ["type"],
        "properties": {
            "type": {"const": "subscribe"},
            "queues": SERVER_MESSAGES["subscribed"]["properties"]["queues"],
            "workloads": {"type": "array", "items": _ID, "maxItems": 1000},
            "summary": {"type": "boolean"},
        },
    },
}

SERVER_MESSAGES.update(CONFIG_MESSAGES)  # delivery passes them on as they came

NOTIFICATIONS: dict[str, dict[str, Any]] = {
    "changed": {
        "type": "object",
        "required": ["type", "tenant", "cycle", "at", "key", "queues", "workloads", "count"],
        "additionalProperties": False,
        "properties": {
            "type": {"const": "changed"},
            "tenant": _ID,
            "cycle": _CYCLE,
            "at": _TIME,
            "key": {"type": "string", "minLength": 8},
            "queues": {"type": "array", "items": _ID},
            "workloads": {"type": ["array", "null"], "items": _ID, "maxItems": 100},
            "count": {"type": "integer", "minimum": 1},
        },
    },
    **CONFIG_MESSAGES,
}
