"""Install-time writes, made with the installer's credentials (not the service account's):
the webhook's TLS Secret and the caBundle of its MutatingWebhookConfiguration."""

from __future__ import annotations

from typing import Any

from queueing.cluster.base import ClusterError
from queueing.cluster.kubernetes.client import ApiCallError, Obj, Rest

WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


def put_secret(rest: Rest, secret: Obj) -> str:
    """Create the Secret, or replace the one of that name; "created" or "replaced"."""
    meta: Any = secret["metadata"]
    base = f"/api/v1/namespaces/{meta['namespace']}/secrets"
    try:  # once: a 409 means it exists (replaced below), not "try again"
        rest.once("POST", base, body=secret)
        return "created"
    except ApiCallError as err:
        if err.status != 409:
            raise err.to_cluster_error(f"creating Secret {meta['name']}") from err
    try:
        rest.call("update", "PUT", f"{base}/{meta['name']}", body=secret)
    except ApiCallError as err:
        raise err.to_cluster_error(f"replacing Secret {meta['name']}") from err
    return "replaced"


def set_ca_bundle(rest: Rest, configuration: str, ca_bundle: str) -> int:
    """Set ``caBundle`` on every webhook of the configuration (read, change, write back
    under its resourceVersion); returns how many webhooks it has."""
    path = f"{WEBHOOKS}/{configuration}"
    for _ in range(5):
        try:
            current = rest.call("get", "GET", path)
        except ApiCallError as err:
            if err.status == 404:
                raise ClusterError(
                    f"MutatingWebhookConfiguration {configuration} does not exist: apply "
                    "deploy/webhook.yaml first",
                    retryable=False,
                ) from err
            raise err.to_cluster_error(f"reading {configuration}") from err
        hooks = current.get("webhooks") or []
        for hook in hooks:
            hook.setdefault("clientConfig", {})["caBundle"] = ca_bundle
        try:
            rest.once("PUT", path, body=current)
            return len(hooks)
        except ApiCallError as err:
            if err.status != 409:  # a conflict: someone wrote meanwhile; read again
                raise err.to_cluster_error(f"writing {configuration}") from err
    raise ClusterError(f"{configuration} kept changing; try again", retryable=True)
