"""How a partition's log is opened after a clean shutdown or a crash: stray files removed,
segments trusted or validated batch by batch, the leader-epoch cache, producer state and
aborted-transaction indexes rebuilt where needed.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from raftka.protocol.batch_builder import end_txn_marker

from .cleaner import (
    CLEANER_CHECKPOINT_FILE,
    complete_interrupted_swap,
    decode_clean_request,
    read_checkpoint,
)
from .epochs import LeaderEpochCache, write_file_atomically
from .partition_cleaning import PartitionCleaning
from .partition_core import (
    CLEAN_SHUTDOWN_FILE,
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_FILE,
    RECOVERY_POINT_FILE,
)
from .producer_state import ProducerStateManager, load_latest_snapshot

logger = logging.getLogger("raftka.log")

_SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex)$")
# Left behind by an interrupted atomic write or segment deletion; never data.
_STRAY_SUFFIXES = (".tmp", ".deleted", ".cleaned", ".swap")


def _read_offset_file(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError, UnicodeDecodeError):
        return None


class PartitionRecovery(PartitionCleaning):
    """Opening a partition folder: segments checked or recovered, leader epochs, producer
    state and pending clean requests loaded."""

    def _open_segments(self, now_ms: int) -> None:
        directory = self.directory
        complete_interrupted_swap(directory)
        log_bases: set[int] = set()
        index_files: list[tuple[int, Path]] = []
        for path in directory.iterdir():
            if path.name.endswith(_STRAY_SUFFIXES):
                path.unlink(missing_ok=True)
                continue
            match = _SEGMENT_FILE.match(path.name)
            if match is None:
                continue
            base = int(match.group(1))
            if match.group(2) == "log":
                log_bases.add(base)
            else:
                index_files.append((base, path))
        for base, path in index_files:
            if base not in log_bases:
                path.unlink(missing_ok=True)

        clean_marker = directory / CLEAN_SHUTDOWN_FILE
        clean = clean_marker.exists()
        recovery_point = _read_offset_file(directory / RECOVERY_POINT_FILE) or 0
        persisted_start = _read_offset_file(directory / LOG_START_OFFSET_FILE)
        cached_epochs = LeaderEpochCache.read_checkpoint(directory / LEADER_EPOCH_CHECKPOINT)

        bases = sorted(log_bases)
        recovering = not clean
        recovered_from: int | None = None
        epoch_starts: list[tuple[int, int]] = []
        for i, base in enumerate(bases):
            segment = self._new_segment(base, now_ms)
            if self.segments and base < self.segments[-1].next_offset:
                # Overlaps its predecessor: not a segment this log could have written.
                logger.warning(
                    "%s: removing overlapping segment %s",
                    directory,
                    base,
                    extra={"partition": directory.name},
                )
                segment.delete()
                for later in bases[i + 1 :]:
                    self._new_segment(later, now_ms).delete()
                break
            below_recovery_point = i + 1 < len(bases) and bases[i + 1] <= recovery_point
            trusted = (clean or below_recovery_point) and recovered_from is None
            if trusted and not segment.load_trusted():
                logger.warning(
                    "%s: rebuilding indexes of segment %s",
                    directory,
                    base,
                    extra={"partition": directory.name},
                )
                trusted = False
            if not trusted:
                recovering = True
                if recovered_from is None:
                    recovered_from = base
                result = segment.recover()
                epoch_starts.extend(result.epoch_starts)
                if result.error is not None:
                    dropped = bases[i + 1 :]
                    logger.warning(
                        "%s: recovery truncated %d bytes at offset %d (%s)%s",
                        directory,
                        result.truncated_bytes,
                        segment.next_offset,
                        result.error,
                        f" and removed {len(dropped)} later segments" if dropped else "",
                        extra={"partition": directory.name},
                    )
                    self._append_segment(segment)
                    for later in dropped:
                        self._new_segment(later, now_ms).delete()
                    break
            self._append_segment(segment)

        if not self.segments:
            self._append_segment(self._new_segment(persisted_start or 0, now_ms, fresh=True))
            self._directory_dirty = True
        self.log_end_offset = self.segments[-1].next_offset
        first_base = self.segments[0].base_offset
        self.log_start_offset = min(max(first_base, persisted_start or 0), self.log_end_offset)

        if cached_epochs is None:
            if self.log_end_offset > first_base:
                logger.info(
                    "%s: rebuilding the leader-epoch cache from the log",
                    directory,
                    extra={"partition": directory.name},
                )
            self.epochs = self._epochs_from_log()
            self._epochs_dirty = True
        else:
            self.epochs = cached_epochs
            if recovered_from is not None:
                self._epochs_dirty |= self.epochs.truncate_from_end(recovered_from)
                for epoch, start in epoch_starts:
                    self._epochs_dirty |= self.epochs.assign(epoch, start)
        self._epochs_dirty |= self.epochs.truncate_from_end(self.log_end_offset)
        self._epochs_dirty |= self.epochs.truncate_from_start(self.log_start_offset)

        if clean and not recovering:
            self.recovery_point = self.log_end_offset
        else:
            self.recovery_point = min(
                recovery_point,
                self.log_end_offset if recovered_from is None else recovered_from,
            )
            if self.recovery_point < recovery_point:
                # The file must not trust more than this open did. A truncation lowers the
                # file only below the recovery point held here; one between the two would
                # leave the file's higher value standing, and the next open would trust the
                # segments it rewrote (and the leader-epoch checkpoint for them) unchecked.
                # Synced by the next flush job, as a truncation's lowering is.
                path = directory / RECOVERY_POINT_FILE
                write_file_atomically(path, f"{self.recovery_point}\n".encode(), durable=False)
                self._files_to_sync.add(path)
        # A recovered segment's aborted-transaction index, or one missing or implausible, is
        # rebuilt with everything after it while the producer state is replayed.
        rebuild_from = recovered_from
        for segment in self.segments:
            if rebuild_from is not None and segment.base_offset >= rebuild_from:
                break
            if not segment.txn_index.load(segment.base_offset, segment.next_offset):
                rebuild_from = segment.base_offset
                break
        if rebuild_from is not None and self.log_end_offset > rebuild_from:
            logger.info(
                "%s: rebuilding aborted-transaction indexes from offset %d",
                directory,
                rebuild_from,
                extra={"partition": directory.name},
            )
        self._load_producer_state(rebuild_from)
        self._load_clean_requests()
        clean_marker.unlink(missing_ok=True)

    def _load_clean_requests(self) -> None:
        """The cleaner's checkpoint, and the clean requests in the log after it (only a log
        that is or was compacted has any, so others are not scanned)."""
        checkpoint = read_checkpoint(self.directory / CLEANER_CHECKPOINT_FILE)
        if checkpoint is not None:
            self.cleaner_checkpoint = checkpoint
        elif not self.config.compact:
            return
        start = max(self.cleaner_checkpoint.request_offset + 1, self.segments[0].base_offset)
        self.clean_requests = []
        for segment in self._segments_from(start):
            _, position = segment.offset_index.lookup(start)
            for header in segment.batches_from(position):
                if header.base_offset < start or not header.is_control or header.producer_id >= 0:
                    continue
                request = decode_clean_request(
                    header, segment.pread(header.size_bytes, header.position)
                )
                if request is not None:
                    self.clean_requests.append(request)

    def _load_producer_state(self, rebuild_txn_index_from: int | None = None) -> None:
        """Producer state as of the log end: the newest snapshot at or below it, then the
        batches after it (all of the log if there is no snapshot): headers only, plus the
        records of transaction markers. With `rebuild_txn_index_from`, the aborted-transaction
        indexes of the segments from that offset (a segment's base) on are rebuilt on the way."""
        expiration_ms = self.config.producer_id_expiration_ms
        upto = self.log_end_offset
        if rebuild_txn_index_from is not None:
            # A segment's base: the indexes from that segment on are rebuilt whole.
            upto = min(upto, rebuild_txn_index_from)
            for segment in self.segments:
                if segment.base_offset >= rebuild_txn_index_from:
                    segment.txn_index.clear()
        loaded = load_latest_snapshot(self.directory, upto, expiration_ms)
        if loaded is None:
            start, state = self.segments[0].base_offset, ProducerStateManager(expiration_ms)
        else:
            start, state = loaded
        self.producer_state = state
        for segment in self._segments_from(start):
            _, position = segment.offset_index.lookup(start)
            for header in segment.batches_from(position):
                if header.base_offset < start or header.producer_id < 0:
                    continue
                marker = None
                if header.is_control:
                    marker = end_txn_marker(segment.pread(header.size_bytes, header.position))
                completed = state.update(header, header.base_offset, header.max_timestamp, marker)
                if (
                    completed is not None
                    and completed.is_aborted
                    and rebuild_txn_index_from is not None
                    and completed.last_offset >= rebuild_txn_index_from
                ):
                    self._index_aborted(segment, completed)
        state.remove_expired(self._clock_ms)

    def _epochs_from_log(self) -> LeaderEpochCache:
        cache = LeaderEpochCache()
        for segment in self.segments:
            for header in segment.batches_from(0):
                cache.assign(header.partition_leader_epoch, header.base_offset)
        return cache
