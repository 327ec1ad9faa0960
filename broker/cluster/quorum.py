"""The metadata quorum as a broker reports it (DescribeQuorum, `raftka cluster status`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class QuorumView:
    """The metadata quorum as this broker sees it (log end offsets: what the controller
    knows of each replica; -1 unknown)."""

    leader_id: int
    epoch: int
    high_watermark: int
    voters: frozenset[int]
    observers: frozenset[int]
    log_end_offsets: Mapping[int, int]
    # Replica -> (last answer, last time it held the leader's whole log), wall-clock ms;
    # known on the controller only (Kafka's last fetch and last caught-up timestamps).
    contact_ms: Mapping[int, tuple[int, int]] = field(default_factory=dict)

    def to_wire(self) -> bytes:
        """The view as the controller sends it to a broker that forwarded a DescribeQuorum."""
        return json.dumps(
            {
                "leader_id": self.leader_id,
                "epoch": self.epoch,
                "high_watermark": self.high_watermark,
                "voters": sorted(self.voters),
                "observers": sorted(self.observers),
                "log_end_offsets": sorted(self.log_end_offsets.items()),
                "contact_ms": sorted((n, *times) for n, times in self.contact_ms.items()),
            }
        ).encode()

    @classmethod
    def from_wire(cls, raw: bytes) -> QuorumView:
        """The view `to_wire` encoded; ValueError (or KeyError, TypeError) if it is not one."""
        doc = json.loads(raw)
        return cls(
            int(doc["leader_id"]),
            int(doc["epoch"]),
            int(doc["high_watermark"]),
            frozenset(int(n) for n in doc["voters"]),
            frozenset(int(n) for n in doc["observers"]),
            {int(n): int(end) for n, end in doc["log_end_offsets"]},
            {int(n): (int(fetch), int(caught_up)) for n, fetch, caught_up in doc["contact_ms"]},
        )
