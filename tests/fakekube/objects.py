"""Pure helpers on Kubernetes objects as dicts: errors, selectors, patches, quantities."""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson

Obj = dict[str, Any]


class ApiError(Exception):
    """An error the API answers with a Kubernetes `Status` body."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self) -> Obj:
        return status_body(self.code, self.reason, self.message, self.details)


def status_body(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> Obj:
    body: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "code": code,
    }
    if message:
        body["message"] = message
    if reason:
        body["reason"] = reason
    if details:
        body["details"] = details
    return body


def dumps(obj: Any) -> bytes:
    """JSON bytes, compact, with orjson (a twentieth of ``json.dumps``' time on an
    object). What orjson refuses (an integer past 64 bits) goes through ``json``."""
    try:
        return orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return json.dumps(obj, separators=(",", ":")).encode()


def loads(data: bytes | str) -> Any:
    """Parse JSON (orjson; ``json`` for what orjson refuses: NaN, integers past 64 bits)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def copy(obj: Any) -> Any:
    """Deep copy of JSON data; faster than copy.deepcopy for plain dicts and lists."""
    return loads(dumps(obj))


_stamp: tuple[int, str] = (0, "1970-01-01T00:00:00Z")


def rfc3339(ts: float) -> str:
    """Seconds since the epoch as RFC 3339 (whole seconds, as Kubernetes writes them);
    formatted once per second, not per call."""
    global _stamp
    second = math.floor(ts)
    cached = _stamp  # one read: another thread may replace the pair meanwhile
    if cached[0] == second:
        return cached[1]
    text = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    _stamp = (second, text)
    return text


def dig(obj: Any, *path: str) -> Any:
    for part in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def meta(obj: Obj) -> Obj:
    return obj.setdefault("metadata", {})


# --- quantities -----------------------------------------------------------------------------

_SUFFIX = {
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "": 1.0,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def parse_quantity(value: str | float | int) -> float:
    """`"500m"` -> 0.5, `"1Gi"` -> 1073741824.0; plain numbers pass through."""
    if isinstance(value, int | float):
        return float(value)
    return _parse_text(str(value))


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> float:
    # Every pod change re-reads its requests (the runner, the audit log): a handful of
    # distinct strings parsed tens of thousands of times a run.
    match = _QUANTITY.match(text.strip())
    if not match or match.group(2) not in _SUFFIX:
        raise ValueError(f"invalid quantity {text!r}")
    return float(match.group(1)) * _SUFFIX[match.group(2)]


def pod_requests(pod_spec: Obj | None) -> dict[str, float]:
    """Effective requests of a pod: sum over containers (limits stand in for missing
    requests, as the API server defaults them), at least the largest init container."""

    def of(container: Obj) -> dict[str, float]:
        resources = container.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        return {name: parse_quantity(q) for name, q in merged.items()}

    total: dict[str, float] = {}
    for container in (pod_spec or {}).get("containers") or []:
        for name, q in of(container).items():
            total[name] = total.get(name, 0.0) + q
    for container in (pod_spec or {}).get("initContainers") or []:
        for name, q in of(container).items():
            total[name] = max(total.get(name, 0.0), q)
    return total


# --- selectors ------------------------------------------------------------------------------

Predicate = Callable[[Obj], bool]
_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_VALUE = r"[-A-Za-z0-9_.]*"
_SET_REQ = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s*\(([^()]*)\)\s*$")
_OP_REQ = re.compile(rf"^\s*({_KEY})\s*(==|=|!=|>|<)\s*({_VALUE})\s*$")
_EXISTS_REQ = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")


def _bad_selector(kind: str, text: str) -> ApiError:
    return ApiError(400, "BadRequest", f"unable to parse requirement: invalid {kind}: {text!r}")


def label_selector(text: str | None) -> Predicate:
    """Kubernetes label selector syntax: `=`, `==`, `!=`, `in`, `notin`, `key`, `!key`, `>`, `<`."""
    if not text or not text.strip():
        return lambda obj: True
    checks = [_requirement(part) for part in re.split(r",(?![^()]*\))", text)]

    def match(obj: Obj) -> bool:
        labels = dig(obj, "metadata", "labels") or {}
        return all(check(labels) for check in checks)

    return match


LabelCheck = Callable[[dict[str, str]], bool]


def _requirement(part: str) -> LabelCheck:
    if m := _SET_REQ.match(part):
        key, op = m.group(1), m.group(2)
        values = frozenset(v.strip() for v in m.group(3).split(",") if v.strip())
        return lambda labels: (labels.get(key) in values) == (op == "in")
    if m := _OP_REQ.match(part):
        key, op, value = m.groups()
        if op in ("=", "=="):
            return lambda labels: labels.get(key) == value
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return _numeric_check(key, op, value, part)
    if m := _EXISTS_REQ.match(part):
        negate, key = m.group(1) == "!", m.group(2)
        return lambda labels: (key in labels) != negate
    raise _bad_selector("label selector", part)


def _numeric_check(key: str, op: str, value: str, part: str) -> LabelCheck:
    try:
        bound = int(value)
    except ValueError:
        raise _bad_selector("label selector", part) from None

    def check(labels: dict[str, str]) -> bool:
        try:
            have = int(labels[key])
        except (KeyError, ValueError):
            return False
        return have > bound if op == ">" else have < bound

    return check


# Field values Kubernetes reports for an absent field (e.g. Node.spec.unschedulable).
_FIELD_DEFAULTS = {"spec.unschedulable": "false", "status.successful": "0"}


def field_value(obj: Obj, path: str) -> str:
    value = dig(obj, *path.split("."))
    if value is None:
        return _FIELD_DEFAULTS.get(path, "")
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def field_selector(text: str | None, allowed: tuple[str, ...]) -> Predicate:
    """`a.b=v`, `a.b==v`, `a.b!=v`, comma-separated; only the kind's selectable fields."""
    if not text or not text.strip():
        return lambda obj: True
    checks: list[tuple[str, bool, str]] = []
    for part in text.split(","):
        m = re.match(r"^\s*([A-Za-z.]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if not m:
            raise _bad_selector("field selector", part)
        path, op, value = m.groups()
        if path not in allowed:
            raise ApiError(400, "BadRequest", f'field label not supported: "{path}"')
        checks.append((path, op == "!=", value))
    return lambda obj: all((field_value(obj, p) == v) != neg for p, neg, v in checks)


# --- patches --------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch; returns a new value and leaves `target` alone."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# patchMergeKey of the list fields Kubernetes merges by key in a strategic merge patch.
_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "conditions": "type",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "resourceClaims": "name",
    "topologySpreadConstraints": "topologyKey",
}
_SET_LISTS = {"finalizers"}  # primitive lists merged as sets


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """The part of strategic merge patch that matters for builtin kinds: a merge patch whose
    keyed lists (containers by name, conditions by type, ...) merge item by item, honouring
    `$patch: replace|delete` and ignoring other `$` directives."""
    if not isinstance(patch, dict):
        return patch
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: v for k, v in patch.items() if not k.startswith("$")}
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        current = result.get(key)
        if value is None:
            result.pop(key, None)
        elif key in _MERGE_KEYS and isinstance(value, list) and isinstance(current, list):
            result[key] = _merge_keyed_list(current, value, _MERGE_KEYS[key])
        elif key in _SET_LISTS and isinstance(value, list) and isinstance(current, list):
            result[key] = current + [v for v in value if v not in current]
        elif isinstance(value, dict) and value.get("$patch") == "delete":
            result.pop(key, None)
        else:
            result[key] = strategic_merge_patch(current, value)
    return result


def _merge_keyed_list(current: list[Any], patch: list[Any], key: str) -> list[Any]:
    out = list(current)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            out.append(item)
            continue
        index = next(
            (i for i, old in enumerate(out) if isinstance(old, dict) and old.get(key) == item[key]),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del out[index]
        elif index is None:
            out.append({k: v for k, v in item.items() if not k.startswith("$")})
        else:
            out[index] = strategic_merge_patch(out[index], item)
    return out


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, "Invalid", f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _container(doc: Any, parts: list[str]) -> tuple[Any, str]:
    for part in parts[:-1]:
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc, parts[-1]


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902 JSON patch: add, remove, replace, move, copy, test."""
    if not isinstance(ops, list):
        raise ApiError(400, "BadRequest", "a JSON patch must be a list of operations")
    doc = copy(target)
    for op in ops:
        try:
            doc = _json_patch_op(doc, op)
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise ApiError(422, "Invalid", f"JSON patch {op!r} failed: {exc!r}") from exc
    return doc


def _json_patch_op(doc: Any, op: Obj) -> Any:
    kind, parts = op["op"], _pointer(op["path"])
    if kind == "test":
        have = doc
        if parts:
            parent, last = _container(doc, parts)
            have = parent[int(last)] if isinstance(parent, list) else parent[last]
        if have != op["value"]:
            raise ApiError(422, "Invalid", f"JSON patch test failed at {op['path']}")
        return doc
    if kind in ("move", "copy"):
        src_parent, src_last = _container(doc, _pointer(op["from"]))
        value = src_parent[int(src_last)] if isinstance(src_parent, list) else src_parent[src_last]
        if kind == "move":
            doc = _json_patch_op(doc, {"op": "remove", "path": op["from"]})
        return _json_patch_op(doc, {"op": "add", "path": op["path"], "value": copy(value)})
    if not parts:
        if kind in ("add", "replace"):
            return copy(op["value"])
        raise ValueError("cannot remove the document root")
    parent, last = _container(doc, parts)
    if isinstance(parent, list):
        if kind == "add":
            parent.insert(len(parent) if last == "-" else int(last), copy(op["value"]))
        elif kind == "remove":
            del parent[int(last)]
        elif kind == "replace":
            parent[int(last)] = copy(op["value"])
        else:
            raise ValueError(f"unknown op {kind!r}")
    elif kind in ("add", "replace"):
        if kind == "replace" and last not in parent:
            raise KeyError(last)
        parent[last] = copy(op["value"])
    elif kind == "remove":
        del parent[last]
    else:
        raise ValueError(f"unknown op {kind!r}")
    return doc
