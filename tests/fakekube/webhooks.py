"""Mutating admission webhooks, called on create as a real API server calls them.

For each webhook of each MutatingWebhookConfiguration whose rules match the request
(operation, group, version, resource), whose ``namespaceSelector`` matches the namespace's
labels (with ``kubernetes.io/metadata.name``, which a real server sets on every namespace)
and whose ``objectSelector`` matches the object's labels, the fake POSTs an
AdmissionReview (admission.k8s.io/v1) to ``clientConfig.url`` over HTTPS, trusting only
``clientConfig.caBundle``, within ``timeoutSeconds``. A JSONPatch answer is applied; a
denial refuses the create with the webhook's status; a webhook that cannot be reached or
answers badly refuses the create under ``failurePolicy: Fail`` (the default) and is
skipped under ``Ignore``. ``clientConfig.service`` is not resolvable here: tests use
``url`` (loopback).
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping
from typing import Any

from .objects import ApiError, json_patch
from .resources import ResourceType

Obj = dict[str, Any]

CONFIGS = "mutatingwebhookconfigurations"


def _matches_expression(labels: Mapping[str, str], expr: Mapping[str, Any]) -> bool:
    key, op, values = str(expr.get("key")), expr.get("operator"), expr.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise ApiError(422, "Invalid", f"unknown label selector operator {op!r}")


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector; empty or absent selects everything."""
    if not selector:
        return True
    wanted = selector.get("matchLabels") or {}
    if any(labels.get(k) != v for k, v in wanted.items()):
        return False
    return all(_matches_expression(labels, e) for e in selector.get("matchExpressions") or [])


def _rule_matches(rule: Mapping[str, Any], rtype: ResourceType, operation: str) -> bool:
    def has(field: str, value: str) -> bool:
        listed = rule.get(field) or []
        return "*" in listed or value in listed

    return (
        has("operations", operation)
        and has("apiGroups", rtype.group)
        and has("apiVersions", rtype.version)
        and has("resources", rtype.plural)
    )


def _post(hook: Mapping[str, Any], review: Obj) -> Obj:
    config = hook.get("clientConfig") or {}
    url = str(config.get("url") or "")
    if not url.startswith("https://"):
        raise OSError("the fake calls webhooks by an https clientConfig.url only")
    context = ssl.create_default_context()
    bundle = config.get("caBundle")
    if bundle:
        context = ssl.create_default_context(cadata=base64.b64decode(bundle).decode())
    request = urllib.request.Request(  # noqa: S310 - https only, checked above
        url,
        data=json.dumps(review).encode(),
        headers={"Content-Type": "application/json", "Accept": "application/json"},
        method="POST",
    )
    timeout = float(hook.get("timeoutSeconds") or 10)
    with urllib.request.urlopen(request, timeout=timeout, context=context) as answer:  # noqa: S310
        data: Obj = json.loads(answer.read())
    return data


def mutate(store: Any, rtype: ResourceType, namespace: str | None, body: Obj) -> Obj:
    """``body`` after every matching mutating webhook, in configuration-name order."""
    if rtype.plural == CONFIGS or not store.count(CONFIGS):
        return body  # (every create asks: a count, not a sorted list)
    configs, _rv, _token, _left = store.list(CONFIGS, None, None, None, 0, None)
    if not configs:
        return body
    ns_labels: dict[str, str] = {}
    if namespace:
        ns = store.get("namespaces", None, namespace)
        ns_labels = {
            **(ns["metadata"].get("labels") or {}),
            "kubernetes.io/metadata.name": namespace,
        }
    for config in sorted(configs, key=lambda c: c["metadata"]["name"]):
        for hook in config.get("webhooks") or []:
            if not any(_rule_matches(r, rtype, "CREATE") for r in hook.get("rules") or []):
                continue
            if rtype.namespaced and not selects(hook.get("namespaceSelector"), ns_labels):
                continue
            if not selects(
                hook.get("objectSelector"), body.get("metadata", {}).get("labels") or {}
            ):
                continue
            body = _call(hook, rtype, namespace, body)
    return body


def _call(hook: Mapping[str, Any], rtype: ResourceType, namespace: str | None, body: Obj) -> Obj:
    name = str(hook.get("name"))
    uid = str(uuid.uuid4())
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": rtype.group, "version": rtype.version, "kind": rtype.kind},
            "resource": {"group": rtype.group, "version": rtype.version, "resource": rtype.plural},
            "namespace": namespace or "",
            "name": (body.get("metadata") or {}).get("name", ""),
            "operation": "CREATE",
            "userInfo": {"username": "fakekube"},
            "object": body,
            "oldObject": None,
            "dryRun": False,
        },
    }
    try:
        answer = _post(hook, review)
        response = answer["response"]
        if response.get("uid") != uid:
            raise ValueError(f"the answer is for request {response.get('uid')!r}, not {uid!r}")
    except (OSError, ValueError, KeyError, TypeError, urllib.error.URLError) as exc:
        if hook.get("failurePolicy", "Fail") == "Ignore":
            return body
        raise ApiError(
            500, "InternalError", f'Internal error occurred: failed calling webhook "{name}": {exc}'
        ) from exc
    if not response.get("allowed"):
        status = response.get("status") or {}
        raise ApiError(
            int(status.get("code") or 400),
            str(status.get("reason") or "BadRequest"),
            f'admission webhook "{name}" denied the request: {status.get("message", "")}',
        )
    if response.get("patch"):
        if response.get("patchType") != "JSONPatch":
            raise ApiError(500, "InternalError", f'webhook "{name}" sent an unknown patch type')
        body = json_patch(body, json.loads(base64.b64decode(response["patch"])))
    return body
