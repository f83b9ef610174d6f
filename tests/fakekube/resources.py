"""The kinds the fake serves: builtin ones and the custom resources Koord-Queue touches."""

from __future__ import annotations

from dataclasses import dataclass

_COMMON_FIELDS = ("metadata.name", "metadata.namespace")


@dataclass(frozen=True)
class ResourceType:
    """One served resource: `/api[s]/<group>/<version>/[namespaces/<ns>/]<plural>`."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    has_status: bool = True  # a /status subresource exists and main writes ignore status
    builtin: bool = True  # builtin kinds accept strategic merge patch; custom ones answer 415
    field_labels: tuple[str, ...] = ()  # field selectors beyond metadata.name/namespace
    suspend_path: tuple[str, ...] = ()  # where the kind keeps its `suspend` flag, if any

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.group, self.version, self.plural)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """`jobs.batch`, `pods`: the name Kubernetes uses in error messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def selectable_fields(self) -> tuple[str, ...]:
        return _COMMON_FIELDS + self.field_labels

    def singular(self) -> str:
        return self.kind.lower()


BUILTIN: tuple[ResourceType, ...] = (
    ResourceType("", "v1", "namespaces", "Namespace", False, field_labels=("status.phase",)),
    ResourceType("", "v1", "nodes", "Node", False, field_labels=("spec.unschedulable",)),
    ResourceType(
        "",
        "v1",
        "pods",
        "Pod",
        True,
        field_labels=(
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ),
    ),
    ResourceType(
        "",
        "v1",
        "events",
        "Event",
        True,
        has_status=False,
        field_labels=(
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "reason",
            "type",
        ),
    ),
    ResourceType("", "v1", "configmaps", "ConfigMap", True, has_status=False),
    ResourceType("", "v1", "resourcequotas", "ResourceQuota", True),
    ResourceType("", "v1", "secrets", "Secret", True, has_status=False),
    ResourceType(
        "batch",
        "v1",
        "jobs",
        "Job",
        True,
        field_labels=("status.successful",),
        suspend_path=("spec", "suspend"),
    ),
    ResourceType("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, False),
    ResourceType(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        False,
        has_status=False,
    ),
)


def _custom(api_version: str, plural: str, kind: str, suspend: str = "") -> ResourceType:
    """A namespaced custom resource; `suspend` is the dotted path of its suspend flag."""
    group, version = api_version.split("/")
    path = tuple(suspend.split(".")) if suspend else ()
    return ResourceType(group, version, plural, kind, True, builtin=False, suspend_path=path)


CUSTOM: tuple[ResourceType, ...] = (
    _custom("jobset.x-k8s.io/v1alpha2", "jobsets", "JobSet", "spec.suspend"),
    _custom("ray.io/v1", "rayjobs", "RayJob", "spec.suspend"),
    _custom("kubeflow.org/v1", "pytorchjobs", "PyTorchJob", "spec.runPolicy.suspend"),
    _custom("kubeflow.org/v1", "tfjobs", "TFJob", "spec.runPolicy.suspend"),
    _custom("kubeflow.org/v2beta1", "mpijobs", "MPIJob", "spec.runPolicy.suspend"),
    _custom("trainer.kubeflow.org/v1alpha1", "trainjobs", "TrainJob", "spec.suspend"),
    _custom("scheduling.x-k8s.io/v1alpha1", "queues", "Queue"),
    _custom("scheduling.x-k8s.io/v1alpha1", "queueunits", "QueueUnit"),
    _custom("scheduling.sigs.k8s.io/v1alpha1", "elasticquotas", "ElasticQuota"),
    # koord-queue's and ACK's whole-tree form (kube-system, usually one object).
    _custom("scheduling.sigs.k8s.io/v1beta1", "elasticquotatrees", "ElasticQuotaTree"),
)


class Registry:
    """Resource types by (group, version, plural), and by name ("jobs", "jobs.batch")."""

    def __init__(self, types: tuple[ResourceType, ...] = BUILTIN + CUSTOM) -> None:
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        self._names: dict[str, ResourceType] = {}
        for rtype in types:
            self.register(rtype)

    def register(self, rtype: ResourceType) -> ResourceType:
        self._types[rtype.key] = rtype
        for name in (rtype.plural, rtype.qualified, f"{rtype.api_version}/{rtype.plural}"):
            self._names.setdefault(name, rtype)
        return rtype

    def all(self) -> list[ResourceType]:
        return list(self._types.values())

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._types.get((group, version, plural))

    def resolve(self, name: str | ResourceType) -> ResourceType:
        """`"jobs"`, `"jobs.batch"`, `"batch/v1/jobs"` or a ResourceType."""
        if isinstance(name, ResourceType):
            return name
        try:
            return self._names[name]
        except KeyError:
            raise KeyError(f"unknown resource {name!r}") from None

    def groups(self) -> dict[str, list[str]]:
        """Group name -> its versions, in registration order ("" is the core group)."""
        out: dict[str, list[str]] = {}
        for rtype in self._types.values():
            versions = out.setdefault(rtype.group, [])
            if rtype.version not in versions:
                versions.append(rtype.version)
        return out
