"""Snapshots of the metadata image in lmdb, so a restart does not replay the whole log.

One lmdb environment `<data-dir>/cluster-metadata.lmdb` holds key `image` (the image as JSON)
and `applied-offset` (decimal), written in one transaction: a snapshot is all or nothing.
After loading, the broker replays the metadata log from `applied_offset + 1`.

Keys `retained-image` and `retained-end` hold the snapshot the metadata log is truncated
behind: the image as of offset `retained-end` - 1, the metadata log's start - 1. It is what a
leader sends a broker that needs offsets below its log start, and it is always written
(together with `image`) before the log is truncated.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import lmdb

from raftka.broker.cluster.image import MetadataImage

SNAPSHOT_DIR_NAME = "cluster-metadata.lmdb"
_IMAGE_KEY = b"image"
_OFFSET_KEY = b"applied-offset"
_RETAINED_IMAGE_KEY = b"retained-image"
_RETAINED_END_KEY = b"retained-end"


class SnapshotError(ValueError):
    """A snapshot that exists but cannot be read back."""


class SnapshotStore:
    """The snapshot environment of one data directory (open once per process)."""

    def __init__(self, data_dir: Path, map_size: int = 1 << 30) -> None:
        self.path = Path(data_dir) / SNAPSHOT_DIR_NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._env = lmdb.open(str(self.path), map_size=map_size, subdir=True)

    def save(self, image: MetadataImage) -> None:
        self.save_job(image)()

    def save_job(self, image: MetadataImage, retained: bool = False) -> Callable[[], None]:
        """The image serialized now; the returned function commits and fsyncs it and may run
        in a worker thread while the image changes. Raises OSError if the write fails.
        `retained`: it also becomes the retained snapshot (see the module docstring)."""
        return self.save_raw_job(serialize(image), image.applied_offset, retained)

    def save_raw_job(self, raw: bytes, applied_offset: int, retained: bool) -> Callable[[], None]:
        offset = str(applied_offset).encode()
        env = self._env

        def save() -> None:
            try:
                with env.begin(write=True) as txn:
                    current = txn.get(_OFFSET_KEY)
                    # A save that lost a race with a newer one (an installed snapshot) must
                    # not put an older image back.
                    if current is None or int(current) <= applied_offset:
                        txn.put(_IMAGE_KEY, raw)
                        txn.put(_OFFSET_KEY, offset)
                    if retained:
                        txn.put(_RETAINED_IMAGE_KEY, raw)
                        txn.put(_RETAINED_END_KEY, str(applied_offset + 1).encode())
                env.sync(True)
            except lmdb.Error as exc:
                raise OSError(f"metadata snapshot not saved: {exc}") from exc

        return save

    def load(self) -> MetadataImage:
        with self._env.begin() as txn:
            raw = txn.get(_IMAGE_KEY)
            offset = txn.get(_OFFSET_KEY)
        if raw is None:
            return MetadataImage()
        try:
            image = MetadataImage.from_dict(json.loads(raw))
        except (ValueError, KeyError, TypeError) as exc:
            raise SnapshotError(f"unreadable metadata snapshot in {self.path}: {exc}") from None
        if offset is None or int(offset) != image.applied_offset:
            raise SnapshotError(
                f"metadata snapshot in {self.path}: applied offset {offset!r} does not match "
                f"the image's {image.applied_offset}"
            )
        return image

    def load_retained(self) -> tuple[int, bytes] | None:
        """(end offset, image JSON) of the retained snapshot, if one was taken."""
        with self._env.begin() as txn:
            raw = txn.get(_RETAINED_IMAGE_KEY)
            end = txn.get(_RETAINED_END_KEY)
        if raw is None or end is None:
            return None
        return int(end), bytes(raw)

    def close(self) -> None:
        self._env.close()

    def __enter__(self) -> SnapshotStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serialize(image: MetadataImage) -> bytes:
    return json.dumps(image.to_dict(), separators=(",", ":")).encode()


def deserialize(raw: bytes, source: str) -> MetadataImage:
    """The image in `raw` (JSON); SnapshotError naming `source` if it cannot be read."""
    try:
        return MetadataImage.from_dict(json.loads(raw))
    except (ValueError, KeyError, TypeError) as exc:
        raise SnapshotError(f"unreadable metadata snapshot from {source}: {exc}") from None


def save_snapshot(data_dir: Path, image: MetadataImage) -> None:
    """Write `image` as the snapshot of `data_dir`, replacing any earlier one atomically."""
    with SnapshotStore(data_dir) as store:
        store.save(image)


def load_snapshot(data_dir: Path) -> MetadataImage:
    """The snapshot of `data_dir`; an empty image when there is none (nothing is created)."""
    if not (Path(data_dir) / SNAPSHOT_DIR_NAME).exists():
        return MetadataImage()
    with SnapshotStore(data_dir) as store:
        return store.load()
