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
    "quotas": {
        "type": "object",
        "required": ["type", "tenant", "cycle", "at", "quotas"],
        "additionalProperties": False,
        "properties": {
            "type": {"const": "quotas"},
            "tenant": _ID,
            "cycle": _CYCLE,
            "at": _TIME,
            "quotas": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["id", "name", "runtime", "used", "min", "max"],
                    "properties": {
                        "id": _ID,
                        "name": {"type": "string"},
                        "runtime": _RESOURCES,
                        "used": _RESOURCES,
                        "min": _RESOURCES,
                        "max": _RESOURCES,
                    },
                },
            },
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
        "required": ["type", "message"],
        "additionalProperties": False,
        "properties": {"type": {"const": "error"}, "message": {"type": "string"}},
    },
    # The cycle's node view changed (cluster admins' stream only); passed on as it is.
    "nodes": {
        "type": "object",
        "required": ["type", "at", "key", "changed", "removed", "count"],
        "additionalProperties": False,
        "properties": {
            "type": {"const": "nodes"},
            "at": _TIME,
            "key": {"type": "string", "minLength": 8},
            "changed": {"type": ["array", "null"], "items": {"type": "string"}, "maxItems": 100},
            "removed": {"type": ["array", "null"], "items": {"type": "string"}, "maxItems": 100},
            "count": {"type": "integer", "minimum": 1},
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
    "quotas": SERVER_MESSAGES["quotas"],
    "nodes": SERVER_MESSAGES["nodes"],
}
