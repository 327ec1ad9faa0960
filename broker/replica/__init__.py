"""The replica manager (Kafka's ReplicaManager): appends, reads, DeleteRecords and
transaction markers of the partitions this broker hosts, for handlers and coordinators
alike. `manager.py` composes `append.py` (a producer's batches: validation, producer state,
verification, write queues), `restore.py` (restore mode) and `types.py` (what callers pass
and get back); record checks that need only bytes are in `log/validation.py`."""

from raftka.broker.replica.manager import (
    OffsetNotAvailable,
    PendingAppends,
    ReplicaManager,
    leads,
    replica_partition,
    wait_for_appends,
)
from raftka.broker.replica.restore import in_restore_mode
from raftka.broker.replica.types import (
    AppendOrigin,
    AppendResult,
    PartitionRead,
    TransactionVerifier,
)

__all__ = [
    "AppendOrigin",
    "AppendResult",
    "OffsetNotAvailable",
    "PartitionRead",
    "PendingAppends",
    "ReplicaManager",
    "TransactionVerifier",
    "in_restore_mode",
    "leads",
    "replica_partition",
    "wait_for_appends",
]
