"""The configuration objects watched live (issue 12 item 2): ElasticQuotas, koord-queue's
ElasticQuotaTrees, kube-queue's Queues, ResourceQuotas (kube-queue's ResourceQuota plugin)
and Namespaces (koord-queue's available-quota annotations), one informer each.

``on_change(reason)`` fires when what an object *says* changed (``kubeobjects.said``):
added, deleted, or its spec, labels or annotations edited. The queue's own writes never
fire it: the runtime/request annotations that ``quotawriteback`` writes are not part of
what an object says, and the ElasticQuotas the queue writes for quotas managed here carry
its owner label and are skipped. So write-back cannot start a loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from queueing import kubeobjects
from queueing.cluster.kubernetes.client import Obj, Rest, dedicated_api
from queueing.cluster.kubernetes.informers import Handler, Informer, WatchSource
from queueing.cluster.kubernetes.kinds import resource_path


class ConfigWatcher:
    """Informers on the configuration collections; see the module docstring."""

    def __init__(
        self,
        cluster: WatchSource,
        on_change: Callable[[str], None],
        *,
        watch_timeout_s: int = 300,
    ) -> None:
        self.on_change = on_change
        self.stop_event = threading.Event()
        self.informers: list[Informer] = []
        self._threads: list[threading.Thread] = []
        plans: list[tuple[kubeobjects.Collection, str | None]] = []
        for collection in kubeobjects.CONFIG_COLLECTIONS:
            scopes = [None] if collection.cluster_wide else cluster.scopes()
            plans.extend((collection, scope) for scope in scopes)
        self.api = dedicated_api(cluster.rest.api, pool_size=len(plans) + 2, purpose="config")
        rest: Rest = cluster.rest
        for collection, scope in plans:
            self.informers.append(
                Informer(
                    rest.with_api(self.api),
                    resource_path(collection.group, collection.version, collection.plural, scope),
                    on_event=self._handler(collection.kind),
                    watch_timeout_s=watch_timeout_s,
                    name=f"{collection.kind}@{scope or '*'}",
                    optional=collection.optional,
                )
            )

    def _handler(self, kind: str) -> Handler:
        def handle(type_: str, obj: Obj, old: Obj | None) -> None:
            if kubeobjects.is_ours(obj) and (old is None or kubeobjects.is_ours(old)):
                return  # the queue's own ElasticQuota for a quota managed here
            if (
                type_ == "MODIFIED"
                and old is not None
                and kubeobjects.said(obj) == kubeobjects.said(old)
            ):
                return  # status, resourceVersion or our own write-back only
            name = (obj.get("metadata") or {}).get("name")
            self.on_change(f"{kind} {name} {type_.lower()}")

        return handle

    def start(self) -> None:
        self.stop_event.clear()
        for informer in self.informers:
            thread = threading.Thread(
                target=informer.run,
                args=(self.stop_event,),
                daemon=True,
                name=f"config-{informer.name}",
            )
            thread.start()
            self._threads.append(thread)

    def wait_synced(self, timeout_s: float) -> bool:
        return all(i.synced.wait(timeout_s) for i in self.informers)

    def stop(self, timeout_s: float = 5.0) -> None:
        self.stop_event.set()
        for informer in self.informers:
            informer.close()
        for thread in self._threads:
            thread.join(timeout_s)
        self._threads.clear()
        self.api.close()
