"""Prometheus metrics of one broker, named as the Prometheus JMX exporter renders Kafka's.

Two kinds:
- counted as things happen, where a dict lookup and an increment is all they cost: requests,
  their total time and errors per API (once per request, in connection.py), bytes and
  messages in per topic (once per produced batch), bytes out per topic (once per fetched
  partition), open connections, and the event loop's lag;
- read at scrape time by `BrokerStateCollector` from the broker's parts (partition logs, Raft
  groups, consumer groups) and by `FetchSessionCollector` from the fetch session cache:
  nothing is kept per request for them.

Each broker has its own CollectorRegistry, so several brokers in one process do not clash.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import trio
from kio.schema.errors import ErrorCode
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from raftka.broker.topics import TopicManager
    from raftka.consensus.driver import RaftNode

# Kafka's RequestMetrics report TotalTimeMs in milliseconds; the histogram keeps that unit.
REQUEST_TIME_BUCKETS_MS = (1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)
# Kafka's name of the listener clients use; raftka has one.
LISTENER = "PLAINTEXT"
EVENT_LOOP_PROBE_INTERVAL_S = 0.5
# A handler that raised: the connection is closed, as Kafka answers an unexpected failure.
HANDLER_FAILED = "UNKNOWN_SERVER_ERROR"


def error_name(code: int) -> str:
    """Kafka's name of an error code, as the `error` label of ErrorsPerSec shows it."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return str(code)


@dataclass(frozen=True, slots=True)
class _ApiMetrics:
    name: str
    requests: Counter
    total_time_ms: Histogram


class BrokerMetrics:
    """The metrics counted as they happen, and the registry every broker metric is in.

    `live_topics` names the topics that exist; per-topic series of deleted topics are
    dropped at the next scrape, as Kafka removes a deleted topic's metrics.
    """

    def __init__(
        self,
        api_names: Mapping[int, str],
        live_topics: Callable[[], Collection[str]] = lambda: (),
    ) -> None:
        self.registry = CollectorRegistry()
        self._api_names = dict(api_names)
        self._live_topics = live_topics
        registry = self.registry
        self._requests = Counter(
            "kafka_network_requestmetrics_requests",
            "Requests answered, per API (Kafka's RequestMetrics RequestsPerSec).",
            ["request"],
            registry=registry,
        )
        self._total_time_ms = Histogram(
            "kafka_network_requestmetrics_totaltimems",
            "Time from reading a request to writing its response, in milliseconds, per API "
            "(Kafka's RequestMetrics TotalTimeMs).",
            ["request"],
            buckets=REQUEST_TIME_BUCKETS_MS,
            registry=registry,
        )
        self._errors = Counter(
            "kafka_network_requestmetrics_errors",
            "Requests answered with an error, per API and error: the response's top-level "
            "error code, Produce and Fetch per partition, UNKNOWN_SERVER_ERROR for a failed "
            "handler (Kafka's RequestMetrics ErrorsPerSec, without NONE).",
            ["request", "error"],
            registry=registry,
        )
        self._bytes_in = Counter(
            "kafka_server_brokertopicmetrics_bytesin",
            "Bytes of record batches appended by Produce, per topic (BytesInPerSec).",
            ["topic"],
            registry=registry,
        )
        self._messages_in = Counter(
            "kafka_server_brokertopicmetrics_messagesin",
            "Records appended by Produce, per topic (MessagesInPerSec).",
            ["topic"],
            registry=registry,
        )
        self._bytes_out = Counter(
            "kafka_server_brokertopicmetrics_bytesout",
            "Bytes of record batches returned by Fetch, per topic (BytesOutPerSec).",
            ["topic"],
            registry=registry,
        )
        self._connections = Gauge(
            "kafka_server_socketservermetrics_connection_count",
            "Open client connections (socket-server-metrics connection-count).",
            ["listener"],
            registry=registry,
        ).labels(LISTENER)
        self._event_loop_lag = Gauge(
            "raftka_event_loop_lag_seconds",
            f"How late the event loop woke a task that sleeps {EVENT_LOOP_PROBE_INTERVAL_S} s, "
            "last measured.",
            registry=registry,
        )
        self._per_api: dict[int, _ApiMetrics] = {}
        self._topics_in: dict[str, tuple[Counter, Counter]] = {}
        self._topics_out: dict[str, Counter] = {}

    # -- counted as it happens -------------------------------------------------------------

    def request_done(self, api_key: int, seconds: float, error: str | None) -> None:
        """One request answered (or left unanswered: acks=0) after `seconds`."""
        api = self._per_api.get(api_key)
        if api is None:
            api = self._api(api_key)
        api.requests.inc()
        api.total_time_ms.observe(seconds * 1000)
        if error is not None:
            self._errors.labels(api.name, error).inc()

    def request_error(self, api_key: int, code: int) -> None:
        """An error inside a response (a partition's), besides its top-level one."""
        name = self._api_names.get(api_key) or f"ApiKey{api_key}"
        self._errors.labels(name, error_name(code)).inc()

    def produced(self, topic: str, batch_bytes: int, records: int) -> None:
        """One batch appended to `topic` by Produce."""
        counters = self._topics_in.get(topic)
        if counters is None:
            counters = (self._bytes_in.labels(topic), self._messages_in.labels(topic))
            self._topics_in[topic] = counters
        counters[0].inc(batch_bytes)
        counters[1].inc(records)

    def fetched(self, topic: str, batch_bytes: int) -> None:
        """Bytes of `topic` returned by one Fetch response."""
        counter = self._topics_out.get(topic)
        if counter is None:
            counter = self._topics_out[topic] = self._bytes_out.labels(topic)
        counter.inc(batch_bytes)

    def connection_opened(self) -> None:
        self._connections.inc()

    def connection_closed(self) -> None:
        self._connections.dec()

    async def measure_event_loop_lag(self, interval_s: float = EVENT_LOOP_PROBE_INTERVAL_S) -> None:
        """Sleep `interval_s` at a time and record how late each wake-up came, until
        cancelled: work that holds the event loop (a long handler, a slow scrape) shows."""
        while True:
            due = trio.current_time() + interval_s
            await trio.sleep(interval_s)
            self._event_loop_lag.set(max(0.0, trio.current_time() - due))

    # -- scraping ---------------------------------------------------------------------------

    def exposition(self) -> bytes:
        """Every metric of the broker in Prometheus' text format."""
        self._forget_deleted_topics()
        return generate_latest(self.registry)

    def _api(self, api_key: int) -> _ApiMetrics:
        name = self._api_names.get(api_key) or f"ApiKey{api_key}"
        api = _ApiMetrics(name, self._requests.labels(name), self._total_time_ms.labels(name))
        self._per_api[api_key] = api
        return api

    def _forget_deleted_topics(self) -> None:
        live = self._live_topics()
        for topic in [t for t in self._topics_in if t not in live]:
            del self._topics_in[topic]
            self._bytes_in.remove(topic)
            self._messages_in.remove(topic)
        for topic in [t for t in self._topics_out if t not in live]:
            del self._topics_out[topic]
            self._bytes_out.remove(topic)


class ControllerRole(Protocol):
    """What the metrics read of the controller."""

    @property
    def is_controller(self) -> bool:
        """Whether this broker leads the metadata Raft group."""
        ...


class CommittedOffset(Protocol):
    @property
    def offset(self) -> int: ...


class GroupOffsets(Protocol):
    """What the metrics read of a consumer group: its committed offsets."""

    @property
    def offsets(self) -> Mapping[tuple[str, int], CommittedOffset]:
        """(topic, partition) -> the committed offset."""
        ...


class GroupsView(Protocol):
    """What the metrics read of the group coordinator: the groups it coordinates."""

    @property
    def groups(self) -> Mapping[str, GroupOffsets]: ...


class FetchSessionsView(Protocol):
    """What the metrics read of the fetch session cache."""

    @property
    def size(self) -> int: ...
    @property
    def partitions_cached(self) -> int: ...
    @property
    def evictions(self) -> int: ...
    @property
    def incremental_fetches(self) -> int: ...


class FetchSessionCollector(Collector):
    """Kafka's FetchSessionCache metrics, read when Prometheus scrapes."""

    def __init__(self, sessions: FetchSessionsView) -> None:
        self.sessions = sessions

    def collect(self) -> Iterator[Metric]:
        sessions = self.sessions
        prefix = "kafka_server_fetchsessioncache_"
        yield GaugeMetricFamily(
            prefix + "numincrementalfetchsessions",
            "Open incremental fetch sessions (NumIncrementalFetchSessions).",
            value=sessions.size,
        )
        yield GaugeMetricFamily(
            prefix + "numincrementalfetchpartitionscached",
            "Partitions over all fetch sessions (NumIncrementalFetchPartitionsCached).",
            value=sessions.partitions_cached,
        )
        yield CounterMetricFamily(
            prefix + "incrementalfetchsessionevictions",
            "Fetch sessions evicted for a new one (IncrementalFetchSessionEvictionsPerSec).",
            value=sessions.evictions,
        )
        yield CounterMetricFamily(
            "raftka_incremental_fetch_requests",
            "Fetch requests served from a session (incremental fetches).",
            value=sessions.incremental_fetches,
        )


class BrokerStateCollector(Collector):
    """Metrics read from the broker's state when Prometheus scrapes: per partition hosted
    here, per Raft group, per consumer group this broker coordinates."""

    def __init__(
        self,
        topics: TopicManager,
        controller: ControllerRole,
        groups: GroupsView,
        node: RaftNode,
    ) -> None:
        self.topics = topics
        self.controller = controller
        self.groups = groups
        self.node = node

    def collect(self) -> Iterator[Metric]:
        yield from self._partitions()
        yield from self._raft_groups()
        yield from self._group_lag()
        yield GaugeMetricFamily(
            "kafka_controller_kafkacontroller_activecontrollercount",
            "1 on the broker that leads the metadata Raft group (the controller), else 0.",
            value=1 if self.controller.is_controller else 0,
        )

    def _partitions(self) -> Iterator[Metric]:
        labels = ["topic", "partition"]
        log_end = GaugeMetricFamily(
            "kafka_log_log_logendoffset", "Log end offset per partition hosted here.", labels=labels
        )
        log_start = GaugeMetricFamily(
            "kafka_log_log_logstartoffset",
            "Log start offset per partition hosted here.",
            labels=labels,
        )
        size = GaugeMetricFamily(
            "kafka_log_log_size", "Bytes of segments per partition hosted here.", labels=labels
        )
        high_watermark = GaugeMetricFamily(
            "raftka_partition_high_watermark",
            "High watermark (committed end) per partition hosted here.",
            labels=labels,
        )
        hosted = led = under_replicated = 0
        for partition in self.topics.local_partitions():
            log, raft = partition.log, partition.raft
            if log is None or raft is None:
                continue
            hosted += 1
            values = [partition.topic.name, str(partition.index)]
            log_end.add_metric(values, log.log_end_offset)
            log_start.add_metric(values, log.log_start_offset)
            size.add_metric(values, log.size_bytes)
            high_watermark.add_metric(values, partition.high_watermark)
            if partition.is_leader:
                led += 1
                if len(partition.in_sync_replicas()) < len(partition.replicas):
                    under_replicated += 1
        yield from (log_end, log_start, size, high_watermark)
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_partitioncount",
            "Partitions hosted on this broker.",
            value=hosted,
        )
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_leadercount", "Partitions this broker leads.", value=led
        )
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_underreplicatedpartitions",
            "Partitions this broker leads with fewer in-sync replicas than replicas.",
            value=under_replicated,
        )

    def _raft_groups(self) -> Iterator[Metric]:
        term = GaugeMetricFamily(
            "raftka_raft_term", "Current term per Raft group hosted here.", labels=["raft_group"]
        )
        leader = GaugeMetricFamily(
            "raftka_raft_leader",
            "Leader's node id per Raft group hosted here (-1: none known).",
            labels=["raft_group"],
        )
        changes = CounterMetricFamily(
            "raftka_raft_leader_changes",
            "Leaders (a new term or node) this broker learned of, per Raft group hosted here.",
            labels=["raft_group"],
        )
        commit_lag = GaugeMetricFamily(
            "raftka_raft_commit_lag",
            "Offsets a follower lacks of the leader's log, per Raft group this broker leads.",
            labels=["raft_group", "peer"],
        )
        for name, raft in sorted(self.node.raft_groups.items()):
            term.add_metric([name], raft.term)
            leader_id = raft.leader_id
            leader.add_metric([name], -1 if leader_id is None else leader_id)
            changes.add_metric([name], raft.leader_changes)
            end = raft.log_end_offset
            for peer, match_end in sorted(raft.follower_match_ends().items()):
                commit_lag.add_metric([name, str(peer)], max(0, end - match_end))
        yield from (term, leader, changes, commit_lag)

    def _group_lag(self) -> Iterator[Metric]:
        lag = GaugeMetricFamily(
            "raftka_group_lag",
            "High watermark minus committed offset, per consumer group this broker "
            "coordinates and partition hosted here.",
            labels=["group", "topic", "partition"],
        )
        for group_id, group in sorted(self.groups.groups.items()):
            for (topic, index), committed in sorted(group.offsets.items()):
                partition = self.topics.partition(topic, index)
                if partition is None or partition.log is None or partition.raft is None:
                    continue
                lag.add_metric(
                    [group_id, topic, str(index)],
                    max(0, partition.high_watermark - committed.offset),
                )
        yield lag
