"""What a leader knows about one follower's log, and how fast it may send to it."""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field

from raftka.consensus.errors import RaftInvariantError


class ProgressState(enum.Enum):
    # Unsure where the follower's log diverges: one append in flight, wait for its answer.
    PROBE = "probe"
    # Follower matched: stream appends optimistically, bounded by the in-flight window.
    REPLICATE = "replicate"
    # Follower needs offsets below the leader's log start: a snapshot is in flight; nothing
    # else is sent until it is acknowledged or its retry timeout passes.
    SNAPSHOT = "snapshot"


@dataclass(slots=True)
class Inflights:
    """End offsets of appends sent but not yet acknowledged, oldest first, bounded."""

    capacity: int
    ends: deque[int] = field(default_factory=deque)

    @property
    def full(self) -> bool:
        return len(self.ends) >= self.capacity

    def add(self, end_offset: int) -> None:
        if self.full:
            raise RaftInvariantError(
                f"append ending at {end_offset} sent with {self.capacity} appends in flight:"
                " the caller must check `full` before sending"
            )
        self.ends.append(end_offset)

    def free_to(self, end_offset: int) -> None:
        """Forget every append whose end is at or below an acknowledged end offset."""
        while self.ends and self.ends[0] <= end_offset:
            self.ends.popleft()

    def free_first(self) -> None:
        if self.ends:
            self.ends.popleft()

    def reset(self) -> None:
        self.ends.clear()


@dataclass(slots=True)
class Progress:
    """Replication state of one follower as seen by the leader.

    Invariant: match_end <= next_offset. `match_end` is the follower's log end offset known
    to equal the leader's log (Kafka's follower LEO); `next_offset` is where the next append
    starts.
    """

    next_offset: int
    max_inflight: int
    match_end: int = 0
    state: ProgressState = ProgressState.PROBE
    probe_sent: bool = False
    recent_active: bool = False
    last_response_tick: int | None = None  # leader tick of the last answer (for the ISR)
    # Leader tick when it last held the leader's whole log (Kafka's last caught-up time).
    caught_up_tick: int | None = None
    end_at_last_answer: int = 0  # the leader's log end offset at its previous answer
    pending_snapshot: int = 0  # SNAPSHOT state: end offset of the snapshot sent
    snapshot_sent_tick: int = 0  # SNAPSHOT state: leader tick it was sent at
    inflights: Inflights = field(init=False)

    def __post_init__(self) -> None:
        self.inflights = Inflights(self.max_inflight)

    @property
    def paused(self) -> bool:
        if self.state is ProgressState.PROBE:
            return self.probe_sent
        if self.state is ProgressState.SNAPSHOT:
            return True
        return self.inflights.full

    def answered(self, tick: int, previous_tick: int | None, leader_end: int) -> None:
        """An answer at leader tick `tick` (the one before it at `previous_tick`), with the
        leader's log ending at `leader_end`: caught up now if it holds all of it, else as of
        its previous answer if it holds what the leader had then (as Kafka's leader keeps
        a follower's last caught-up time, KIP-836)."""
        if self.match_end >= leader_end:
            self.caught_up_tick = tick
        elif (
            previous_tick is not None
            and 0 < self.end_at_last_answer <= self.match_end
            and (self.caught_up_tick is None or self.caught_up_tick < previous_tick)
        ):
            self.caught_up_tick = previous_tick
        self.end_at_last_answer = leader_end

    def become_snapshot(self, end_offset: int, tick: int) -> None:
        self.state = ProgressState.SNAPSHOT
        self.probe_sent = False
        self.inflights.reset()
        self.pending_snapshot = end_offset
        self.snapshot_sent_tick = tick
        self.next_offset = max(end_offset, self.match_end)

    def become_probe(self) -> None:
        self.state = ProgressState.PROBE
        self.probe_sent = False
        self.inflights.reset()
        self.next_offset = self.match_end

    def become_replicate(self) -> None:
        self.state = ProgressState.REPLICATE
        self.probe_sent = False
        self.inflights.reset()
        self.next_offset = self.match_end

    def sent_append(self, end_offset: int) -> None:
        """Record an append covering up to `end_offset` (exclusive) was sent."""
        if self.state is ProgressState.REPLICATE:
            if end_offset > self.next_offset:
                self.next_offset = end_offset
                self.inflights.add(end_offset)
        else:
            self.probe_sent = True

    def maybe_update(self, match_end: int) -> bool:
        """Follower acknowledged its log matches up to `match_end`; False if stale."""
        updated = match_end > self.match_end
        if updated:
            self.match_end = match_end
            self.probe_sent = False
        self.next_offset = max(self.next_offset, match_end)
        return updated

    def maybe_decrease(self, rejected_prev_offset: int, probe_prev_offset: int) -> bool:
        """An append with prev offset `rejected_prev_offset` was rejected.

        `probe_prev_offset` is where the leader's log may match, computed from the follower's
        hint. Returns False when the rejection is stale (answers an older probe).
        """
        if self.state is ProgressState.SNAPSHOT:
            return False  # answers an append sent before the snapshot
        if self.state is ProgressState.REPLICATE:
            if rejected_prev_offset + 1 <= self.match_end:
                return False
            self.next_offset = self.match_end
            return True
        if self.next_offset - 1 != rejected_prev_offset:
            return False
        self.next_offset = max(min(rejected_prev_offset, probe_prev_offset) + 1, self.match_end)
        self.probe_sent = False
        return True
