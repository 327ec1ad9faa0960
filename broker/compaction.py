"""The log cleaner of compacted partitions (`cleanup.policy` with `compact`).

Every `log.cleaner.backoff.ms` each hosted partition is looked at once:
- a replica (leader or follower) with a committed clean request it has not carried out
  carries it out: the cleaning runs in a worker thread, the swap on the event loop;
- otherwise a leader of a compacted partition decides whether a cleaning is due (dirty
  ratio, max.compaction.lag.ms, tombstones past their horizon) and how far it may go, and
  appends the request through Raft like any batch.
The request carries every value the result depends on, so all replicas clean alike.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

import trio

from raftka.broker.config import BrokerConfig
from raftka.broker.topics import Partition, TopicManager, now_ms
from raftka.consensus.core import NotLeaderError
from raftka.consensus.errors import OUT_OF_SPACE
from raftka.log import LogInvariantError, PartitionLog
from raftka.log.cleaner import (
    CleaningCancelled,
    CleaningPlan,
    CleanRequest,
    cleaning_due,
    max_map_keys,
    plan_cleaning,
)

logger = logging.getLogger("raftka.cleaner")


class LogCleaner:
    """Cleans the compacted partitions this broker hosts (one at a time)."""

    def __init__(self, topics: TopicManager, config: BrokerConfig) -> None:
        self.topics = topics
        self.config = config
        self.enabled = config.get_bool("log.cleaner.enable")
        #: Told of an I/O error (other than a full disk's) on a partition's files: the
        #: broker takes the log directory offline (Kafka's cleaner does the same).
        self.on_log_dir_failure: Callable[[str, OSError], None] | None = None

    # Dynamic broker configs: read when used, so a change applies from the next cleaning.
    @property
    def backoff_s(self) -> float:
        return self.config.get_int("log.cleaner.backoff.ms") / 1000

    @property
    def io_bytes_per_second(self) -> float:
        return self.config.get_float("log.cleaner.io.max.bytes.per.second")

    @property
    def max_map_keys(self) -> int:
        return max_map_keys(self.config.get_int("log.cleaner.dedupe.buffer.size"))

    async def run(self) -> None:
        if not self.enabled:
            return
        while True:
            await trio.sleep(self.backoff_s)
            for partition in list(self.topics.local_partitions()):
                try:
                    await self.step(partition)
                except (OSError, LogInvariantError) as exc:
                    if (
                        isinstance(exc, OSError)
                        and exc.errno not in OUT_OF_SPACE
                        and self.on_log_dir_failure is not None
                    ):
                        self.on_log_dir_failure(partition.name, exc)
                        continue
                    logger.error(
                        "%s: cleaning failed (%s); retrying in %.1f s",
                        partition.name,
                        exc,
                        self.backoff_s,
                        extra={"partition": partition.name, "topic": partition.topic.name},
                    )
                except Exception:
                    # A cleaner bug must not stop the broker; the partition stays as it is.
                    logger.exception(
                        "%s: cleaning failed; retrying in %.1f s",
                        partition.name,
                        self.backoff_s,
                        extra={"partition": partition.name, "topic": partition.topic.name},
                    )
                await trio.lowlevel.checkpoint()

    async def step(self, partition: Partition) -> None:
        """Carry out the partition's next committed clean request, or as its leader ask
        for one if a cleaning is due."""
        log = partition.log
        if log is None or partition.raft is None:
            return
        if log.clean_requests:
            request = log.clean_requests[0]
            if request.offset < partition.high_watermark:
                await self._carry_out(partition, log, request)
            return
        if partition.is_leader and log.config.compact:
            due = await self._due_request(partition, log)
            if due is not None:
                with contextlib.suppress(NotLeaderError):
                    partition.propose(due.encode_batch(), 1)

    async def _carry_out(
        self, partition: Partition, log: PartitionLog, request: CleanRequest
    ) -> None:
        started = trio.current_time()
        job = log.start_cleaning(request, now_ms(), self.io_bytes_per_second)
        try:
            # The thread is never left running: on cancellation the job is told to stop
            # (it does at its next batch) and awaited, so its descriptors close only after
            # its last read and it writes nothing once cancelled.
            result = await trio.to_thread.run_sync(job.run, abandon_on_cancel=True)
        except BaseException as exc:
            job.cancel()
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(job.done.wait)
            log.abandon_cleaning(job)
            if isinstance(exc, CleaningCancelled):
                return  # the log was closed or truncated meanwhile
            raise
        if partition.log is not log:
            log.abandon_cleaning(job)  # closed meanwhile: its next open completes the swap
            return
        finish = log.finish_cleaning(job)
        await trio.to_thread.run_sync(finish)
        logger.info(
            "%s: cleaned to offset %d (request at %d): %d -> %d bytes in %.2f s",
            partition.name,
            result.cleaned_end,
            request.offset,
            result.bytes_before,
            result.bytes_after,
            trio.current_time() - started,
            extra={"partition": partition.name, "topic": partition.topic.name},
        )

    async def _due_request(self, partition: Partition, log: PartitionLog) -> CleanRequest | None:
        config = partition.topic.config
        raft = partition.hosted_raft
        high_watermark = partition.high_watermark
        # Committed, held by every follower, decided (no open transaction), not active.
        limit = min(
            high_watermark,
            log.active_segment.base_offset,
            log.last_stable_offset(high_watermark),
            *raft.follower_match_ends().values(),
        )
        dirty_start = max(log.cleaner_checkpoint.cleaned_end, log.log_start_offset)
        now = now_ms()
        plan = CleaningPlan(dirty_start, dirty_start, 0, 0, -1)
        if limit > dirty_start:
            sources = log.source_segments(limit)
            try:
                plan = await trio.to_thread.run_sync(
                    plan_cleaning,
                    sources,
                    dirty_start,
                    limit,
                    now - config.get_int("min.compaction.lag.ms"),
                )
            finally:
                for source in sources:
                    source.close()
        end = cleaning_due(
            plan,
            config.get_float("min.cleanable.dirty.ratio"),
            config.get_int("max.compaction.lag.ms"),
            log.tombstone_horizon_ms,
            now,
        )
        if end is None:
            return None
        return CleanRequest(
            dirty_start,
            end,
            now,
            config.get_int("delete.retention.ms"),
            self.max_map_keys,
        )
