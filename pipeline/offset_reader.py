"""The driver's view of the broker: which partitions a subscription covers and which offsets
start, end or match a timestamp in them (Spark's `KafkaOffsetReaderAdmin`, over
confluent-kafka's AdminClient: Metadata and ListOffsets)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import cast

from confluent_kafka import IsolationLevel, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import OffsetSpec as KafkaOffsetSpec

from raftka.pipeline.errors import SourceError
from raftka.pipeline.options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    SourceOptions,
    TopicPartition,
    client_settings,
)


def _earliest_spec() -> KafkaOffsetSpec:
    """OffsetSpec.earliest(), typed: confluent-kafka leaves the classmethod unannotated."""
    return cast(KafkaOffsetSpec, KafkaOffsetSpec.earliest())  # type: ignore[no-untyped-call]


def _latest_spec() -> KafkaOffsetSpec:
    """OffsetSpec.latest(), typed: confluent-kafka leaves the classmethod unannotated."""
    return cast(KafkaOffsetSpec, KafkaOffsetSpec.latest())  # type: ignore[no-untyped-call]


def make_admin(client_config: Mapping[str, str]) -> AdminClient:
    """An AdminClient from the user's kafka.* options; a bad option is a `SourceError`."""
    try:
        return AdminClient(client_settings(client_config))
    except KafkaException as exc:
        raise SourceError(f"bad kafka.* option for the Kafka client: {exc}") from None


class OffsetReader:
    """Metadata and offsets for one query, every call bounded by `fetchOffset.timeoutMs`.

    Holds an AdminClient, created on first use: create it where it is used, never pickle it.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.timeout_s = options.fetch_offset_timeout_ms / 1000
        self._admin: AdminClient | None = None
        isolation = options.client_config.get("isolation.level", "read_uncommitted")
        self._isolation = (
            IsolationLevel.READ_COMMITTED
            if isolation == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )

    def _client(self) -> AdminClient:
        if self._admin is None:
            self._admin = make_admin(self.options.client_config)
        return self._admin

    def close(self) -> None:
        self._admin = None  # confluent-kafka closes the client when it is collected

    def _unreachable(self, exc: BaseException) -> SourceError:
        return SourceError(
            f"no answer from the broker at {self.options.bootstrap_servers} "
            f"(option kafka.bootstrap.servers) within {self.timeout_s:g} s: {exc}"
        )

    # -- partitions ------------------------------------------------------------------------

    def topic_partitions(self) -> list[TopicPartition]:
        """The partitions the subscription reads now, sorted. Subscribed or assigned topics
        (and assigned partitions) that do not exist are an error; a pattern may match none."""
        try:
            metadata = self._client().list_topics(timeout=self.timeout_s)
        except KafkaException as exc:
            raise self._unreachable(exc) from None
        existing = {
            name: sorted(topic.partitions)
            for name, topic in metadata.topics.items()
            if topic.error is None
        }
        subscription = self.options.subscription
        where = f"on {self.options.bootstrap_servers} (option {subscription.describe()})"
        if subscription.assigned is not None:
            missing = [t for t in subscription.assigned if t not in existing]
            if missing:
                raise SourceError(f"unknown topic(s) {', '.join(sorted(missing))} {where}")
            found = []
            for topic, partitions in subscription.assigned.items():
                absent = [p for p in partitions if p not in existing[topic]]
                if absent:
                    raise SourceError(
                        f"topic {topic} has no partition(s) {absent} (it has "
                        f"{len(existing[topic])}) {where}"
                    )
                found += [(topic, p) for p in partitions]
            return sorted(found)
        if subscription.pattern is None:
            missing = [t for t in subscription.topics if t not in existing]
            if missing:
                raise SourceError(f"unknown topic(s) {', '.join(sorted(missing))} {where}")
        return sorted(
            (topic, p)
            for topic, partitions in existing.items()
            if subscription.matches(topic)
            for p in partitions
        )

    # -- offsets ---------------------------------------------------------------------------

    def _list_offsets(
        self, specs: Mapping[TopicPartition, KafkaOffsetSpec]
    ) -> dict[TopicPartition, int]:
        if not specs:
            return {}
        try:
            futures = self._client().list_offsets(
                {KafkaTopicPartition(t, p): spec for (t, p), spec in specs.items()},
                isolation_level=self._isolation,
                request_timeout=self.timeout_s,
            )
        except KafkaException as exc:
            raise self._unreachable(exc) from None
        offsets = {}
        for tp, future in futures.items():
            try:
                offsets[(tp.topic, tp.partition)] = future.result(timeout=self.timeout_s).offset
            except KafkaException as exc:
                raise SourceError(
                    f"ListOffsets for {tp.topic}-{tp.partition} on "
                    f"{self.options.bootstrap_servers} failed: {exc}"
                ) from None
            except TimeoutError:
                raise self._unreachable(TimeoutError("ListOffsets timed out")) from None
        return offsets

    def earliest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's log start offset."""
        return self._list_offsets({tp: _earliest_spec() for tp in tps})

    def latest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's high watermark (last committed offset + 1)."""
        return self._list_offsets({tp: _latest_spec() for tp in tps})

    def for_timestamps(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Each partition's first offset whose timestamp is >= the given one, -1 if none."""
        return self._list_offsets(
            {tp: KafkaOffsetSpec.for_timestamp(ts) for tp, ts in timestamps.items()}
        )

    def resolve(
        self, spec: OffsetSpec, tps: list[TopicPartition], option: str
    ) -> dict[TopicPartition, int]:
        """`spec` as real offsets for every partition in `tps` (`option` names it in errors).

        Specific offsets and per-partition timestamps must name exactly `tps`, as Spark
        requires; -2 and -1 become the log start and the high watermark.
        """
        if spec.kind == "earliest":
            return self.earliest(tps)
        if spec.kind == "latest":
            return self.latest(tps)
        if spec.kind in ("offsets", "timestamps"):
            named = spec.offsets if spec.kind == "offsets" else spec.timestamps
            if set(named) != set(tps):
                raise SourceError(
                    f"option '{option}' must name every partition the query reads "
                    f"(use -2 for earliest, -1 for latest): named {sorted(named)}, "
                    f"the query reads {sorted(tps)}"
                )
        if spec.kind == "offsets":
            earliest = self.earliest(tp for tp, o in spec.offsets.items() if o == EARLIEST)
            latest = self.latest(tp for tp, o in spec.offsets.items() if o == LATEST)
            return {tp: earliest.get(tp, latest.get(tp, o)) for tp, o in spec.offsets.items()}
        if spec.kind == "timestamps":
            timestamps = dict(spec.timestamps)
        elif spec.timestamp is not None:
            timestamps = {tp: spec.timestamp for tp in tps}
        else:
            raise SourceError(f"option '{option}' of kind {spec.kind!r} names no timestamp")
        found = self.for_timestamps(timestamps)
        unmatched = [tp for tp, offset in found.items() if offset < 0]
        if unmatched and not spec.no_match_latest:
            tp = unmatched[0]
            raise SourceError(
                f"option '{option}': no record in {tp[0]}-{tp[1]} has a timestamp at or "
                f"after {timestamps[tp]} (set startingOffsetsByTimestampStrategy=latest to "
                f"start at the latest offset instead)"
            )
        found.update(self.latest(unmatched))
        return found
