"""Between the database and the engine: the cycle's database side, in steps.

- ``snapshot``: ORM -> Snapshot, a fixed number of queries whatever the workloads;
- ``apply``: the decisions in one transaction of numbered steps (fence, shared nodes,
  phases, nominations, annotations, quotas, record, publish), then the cluster calls;
  phases move and changes are announced through ``actions.transitions``, as the sync's;
- ``placement``: node capacity is one truth across trees (docs/realtime.md);
- ``annotate``: position, ETA and reason of the waiting, and the full-cycle budget;
- ``quotas``: ledgers, usage samples, runtime quota and usage;
- ``calls``: the one loop for cluster calls after a commit (the sync's too).
"""

from queueing.state.annotate import (
    ANNOTATE_FRONT,
    FULL_CYCLE_CHEAP_S,
    FULL_CYCLE_SHARE,
    HEAD_ROWS,
    _full_cycles,
    forecast_done,
    forecast_due,
    full_cycle_done,
    full_cycle_due,
)
from queueing.state.apply import ApplyReport, apply, finish_calls
from queueing.state.calls import Call, run_calls
from queueing.state.snapshot import (
    PassReads,
    SnapshotIndex,
    build_snapshot,
    engine_config,
    epoch,
    from_epoch,
    read_quotas,
    roots,
    subtree,
    tree_quota_ids,
)

__all__ = [
    "ANNOTATE_FRONT",
    "FULL_CYCLE_CHEAP_S",
    "FULL_CYCLE_SHARE",
    "HEAD_ROWS",
    "ApplyReport",
    "Call",
    "PassReads",
    "SnapshotIndex",
    "_full_cycles",
    "apply",
    "build_snapshot",
    "engine_config",
    "epoch",
    "finish_calls",
    "forecast_done",
    "forecast_due",
    "from_epoch",
    "full_cycle_done",
    "full_cycle_due",
    "read_quotas",
    "roots",
    "run_calls",
    "subtree",
    "tree_quota_ids",
]
