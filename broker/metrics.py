"""Prometheus metrics of one broker, named as the Prometheus JMX exporter renders Kafka's.

Two kinds:
- counted as things happen, where a dict lookup and an increment is all they cost: requests,
  their total time and errors per API (once per request, in connection.py), bytes and
  messages in per topic (once per produced batch), bytes out per topic (once per fetched
  partition), open connections, and the event loop's lag. The per-request and per-topic
  ones are plain ints and floats that `BrokerMetrics.collect` renders at scrape time as the
  same series prometheus_client's Counter and Histogram would (`_created` included);
- read at scrape time by `BrokerStateCollector` from the broker's parts (partition logs, Raft
  groups, consumer groups), by `FetchSessionCollector` from the fetch session cache and by
  `LongPollCollector` from the waiting fetches: nothing is kept per request for them.

Each broker has its own CollectorRegistry, so several brokers in one process do not clash.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

import trio
from kio.schema.errors import ErrorCode
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client import metrics as prometheus_metrics
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

if TYPE_CHECKING:
    from raftka.broker.topics import TopicManager
    from raftka.consensus.driver import RaftNode

# Kafka's RequestMetrics report TotalTimeMs in milliseconds; the histogram keeps that unit.
REQUEST_TIME_BUCKETS_MS = (1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)
# Upper bounds of the buckets as floats, +Inf last, and their `le` labels.
_BOUNDS_MS: Final = (*(float(bound) for bound in REQUEST_TIME_BUCKETS_MS), math.inf)
# prometheus_client's rendering of a bound (Go's), which its Histogram uses for `le`.
_go_float: Callable[[float], str] = floatToGoString
_LE = tuple(_go_float(bound) for bound in _BOUNDS_MS)
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


@dataclass(slots=True)
class _ApiCounts:
    """One API's requests: how many fell in each time bucket (not cumulative; their sum is
    the request count) and the sum of their times."""

    name: str
    created: float
    buckets: list[int]
    sum_ms: float = 0.0


_REQUESTS = "kafka_network_requestmetrics_requests"
_REQUESTS_HELP = "Requests answered, per API (Kafka's RequestMetrics RequestsPerSec)."
_TOTAL_TIME = "kafka_network_requestmetrics_totaltimems"
_TOTAL_TIME_HELP = (
    "Time from reading a request to writing its response, in milliseconds, per API "
    "(Kafka's RequestMetrics TotalTimeMs)."
)
_ERRORS = "kafka_network_requestmetrics_errors"
_ERRORS_HELP = (
    "Requests answered with an error, per API and error: the response's top-level "
    "error code, Produce and Fetch per partition, UNKNOWN_SERVER_ERROR for a failed "
    "handler (Kafka's RequestMetrics ErrorsPerSec, without NONE)."
)
_BYTES_IN = "kafka_server_brokertopicmetrics_bytesin"
_BYTES_IN_HELP = "Bytes of record batches appended by Produce, per topic (BytesInPerSec)."
_MESSAGES_IN = "kafka_server_brokertopicmetrics_messagesin"
_MESSAGES_IN_HELP = "Records appended by Produce, per topic (MessagesInPerSec)."
_BYTES_OUT = "kafka_server_brokertopicmetrics_bytesout"
_BYTES_OUT_HELP = "Bytes of record batches returned by Fetch, per topic (BytesOutPerSec)."
_RESPONSE_SENDS = "raftka_response_sends"
_RESPONSE_SENDS_HELP = (
    "Sends of responses to clients: the responses of a connection decided together leave "
    "in one send (a spliced Fetch response, sendfile ranges and all, counts as one); "
    "requests answered over this is responses per send."
)
_POLLER_WAKEUPS = "raftka_poller_wakeups"
_POLLER_WAKEUPS_HELP = (
    "Wake-ups of the task that reads every plaintext client socket, each a turn of the event "
    "loop whose fixed cost the requests that arrived together share; plaintext requests "
    "answered over this is requests per wake-up."
)

_POLLER_LINGERS = "raftka_poller_lingers"
_POLLER_LINGERS_HELP = (
    "Waits of the readiness poller that lingered (request.linger.us) before taking the next "
    "requests, while requests of several connections came close together."
)


class BrokerMetrics(Collector):
    """The metrics counted as they happen, and the registry every broker metric is in.

    `live_topics` names the topics that exist; per-topic series of deleted topics are
    dropped at the next scrape, as Kafka removes a deleted topic's metrics.

    The counting methods take no lock: they and the scrape (`exposition`, from the HTTP
    endpoint's trio task) all run on the broker's one event-loop thread, so no count is
    read while it is being changed. A series' `_created` is when it was first counted.
    """

    def __init__(
        self,
        api_names: Mapping[int, str],
        live_topics: Callable[[], Collection[str]] = lambda: (),
    ) -> None:
        self.registry = CollectorRegistry()
        self._api_names = dict(api_names)
        self._live_topics = live_topics
        # Counted here, rendered by `collect`; registered first, so they lead the scrape.
        self._per_api: dict[int, _ApiCounts] = {}
        self._errors: dict[tuple[str, str], int] = {}
        self._errors_created: dict[tuple[str, str], float] = {}
        # topic -> [bytes in, messages in]; topic -> bytes out
        self._topics_in: dict[str, list[int]] = {}
        self._topics_in_created: dict[str, float] = {}
        self._topics_out: dict[str, int] = {}
        self._topics_out_created: dict[str, float] = {}
        #: Counted by the connections as they send (`_RESPONSE_SENDS`).
        self.response_sends = 0
        #: Counted by the readiness poller as it wakes (`_POLLER_WAKEUPS`).
        self.poller_wakeups = 0
        #: Counted by the poller's wait as it lingers (`_POLLER_LINGERS`).
        self.poller_lingers = 0
        self._created = time.time()
        registry = self.registry
        registry.register(self)
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

    # -- counted as it happens (one thread: no locks) ---------------------------------------

    def request_done(self, api_key: int, seconds: float, error: str | None) -> None:
        """One request answered (or left unanswered: acks=0) after `seconds`."""
        api = self._per_api.get(api_key)
        if api is None:
            api = self._api(api_key)
        time_ms = seconds * 1000
        # The first bucket whose bound is at least the time, as Histogram.observe picks it.
        api.buckets[bisect_left(_BOUNDS_MS, time_ms)] += 1
        api.sum_ms += time_ms
        if error is not None:
            self._count_error((api.name, error))

    def request_error(self, api_key: int, code: int) -> None:
        """An error inside a response (a partition's), besides its top-level one."""
        name = self._api_names.get(api_key) or f"ApiKey{api_key}"
        self._count_error((name, error_name(code)))

    def produced(self, topic: str, batch_bytes: int, records: int) -> None:
        """One batch appended to `topic` by Produce."""
        counts = self._topics_in.get(topic)
        if counts is None:
            counts = self._topics_in[topic] = [0, 0]
            self._topics_in_created[topic] = time.time()
        counts[0] += batch_bytes
        counts[1] += records

    def fetched(self, topic: str, batch_bytes: int) -> None:
        """Bytes of `topic` returned by one Fetch response."""
        total = self._topics_out.get(topic)
        if total is None:
            self._topics_out_created[topic] = time.time()
            total = 0
        self._topics_out[topic] = total + batch_bytes

    def topic_messages_in(self) -> dict[str, int]:
        """Records appended by Produce to each topic since start."""
        return {topic: counts[1] for topic, counts in self._topics_in.items()}

    def traffic_totals(self) -> tuple[int, int, int]:
        """(bytes in, messages in, bytes out) of every topic since start: what a rate is
        measured from."""
        bytes_in = sum(counts[0] for counts in self._topics_in.values())
        messages_in = sum(counts[1] for counts in self._topics_in.values())
        return bytes_in, messages_in, sum(self._topics_out.values())

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

    def _api(self, api_key: int) -> _ApiCounts:
        name = self._api_names.get(api_key) or f"ApiKey{api_key}"
        api = _ApiCounts(name, time.time(), [0] * len(_BOUNDS_MS))
        self._per_api[api_key] = api
        return api

    def _count_error(self, key: tuple[str, str]) -> None:
        count = self._errors.get(key)
        if count is None:
            self._errors_created[key] = time.time()
            count = 0
        self._errors[key] = count + 1

    # -- scraping ---------------------------------------------------------------------------

    def exposition(self) -> bytes:
        """Every metric of the broker in Prometheus' text format."""
        return generate_latest(self.registry)

    def collect(self) -> Iterator[Metric]:
        """The counted metrics, as prometheus_client's Counter and Histogram render them."""
        self._forget_deleted_topics()
        # prometheus_client's own switch (PROMETHEUS_DISABLE_CREATED_SERIES), so `_created`
        # shows here exactly when it shows for the library's Counter and Histogram.
        created = prometheus_metrics._use_created
        requests = CounterMetricFamily(_REQUESTS, _REQUESTS_HELP, labels=["request"])
        total_time = HistogramMetricFamily(_TOTAL_TIME, _TOTAL_TIME_HELP, labels=["request"])
        for api in self._per_api.values():
            cumulative: list[tuple[str, float]] = []
            count = 0
            for le, in_bucket in zip(_LE, api.buckets, strict=True):
                count += in_bucket
                cumulative.append((le, count))
            requests.add_metric([api.name], count, api.created if created else None)
            total_time.add_metric([api.name], cumulative, api.sum_ms)
            if created:
                labels = {"request": api.name}
                total_time.samples.append(Sample(_TOTAL_TIME + "_created", labels, api.created))
        yield requests
        yield total_time
        errors = CounterMetricFamily(_ERRORS, _ERRORS_HELP, labels=["request", "error"])
        for key, errors_count in self._errors.items():
            errors.add_metric(key, errors_count, self._errors_created[key] if created else None)
        yield errors
        bytes_in = CounterMetricFamily(_BYTES_IN, _BYTES_IN_HELP, labels=["topic"])
        messages_in = CounterMetricFamily(_MESSAGES_IN, _MESSAGES_IN_HELP, labels=["topic"])
        for topic, (in_bytes, messages) in self._topics_in.items():
            since_in = self._topics_in_created[topic] if created else None
            bytes_in.add_metric([topic], in_bytes, since_in)
            messages_in.add_metric([topic], messages, since_in)
        yield bytes_in
        yield messages_in
        bytes_out = CounterMetricFamily(_BYTES_OUT, _BYTES_OUT_HELP, labels=["topic"])
        for topic, out_bytes in self._topics_out.items():
            since_out = self._topics_out_created[topic] if created else None
            bytes_out.add_metric([topic], out_bytes, since_out)
        yield bytes_out
        yield CounterMetricFamily(
            _RESPONSE_SENDS,
            _RESPONSE_SENDS_HELP,
            value=self.response_sends,
            created=self._created if created else None,
        )
        yield CounterMetricFamily(
            _POLLER_WAKEUPS,
            _POLLER_WAKEUPS_HELP,
            value=self.poller_wakeups,
            created=self._created if created else None,
        )
        yield CounterMetricFamily(
            _POLLER_LINGERS,
            _POLLER_LINGERS_HELP,
            value=self.poller_lingers,
            created=self._created if created else None,
        )

    def _forget_deleted_topics(self) -> None:
        live = self._live_topics()
        for topic in [t for t in self._topics_in if t not in live]:
            del self._topics_in[topic]
            del self._topics_in_created[topic]
        for topic in [t for t in self._topics_out if t not in live]:
            del self._topics_out[topic]
            del self._topics_out_created[topic]


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


class LongPollsView(Protocol):
    """What the metrics read of the broker's waiting fetches (`LongPolls`)."""

    def __len__(self) -> int: ...
    @property
    def timed_out(self) -> int: ...


class LongPollCollector(Collector):
    """Fetches waiting for records (Kafka's fetch purgatory), read when Prometheus scrapes."""

    def __init__(self, polls: LongPollsView) -> None:
        self.polls = polls

    def collect(self) -> Iterator[Metric]:
        waiting = GaugeMetricFamily(
            "kafka_server_delayedoperationpurgatory_numdelayedoperations",
            "Requests waiting (NumDelayedOperations): Fetch requests long-polling for records.",
            labels=["delayedOperation"],
        )
        waiting.add_metric(["Fetch"], len(self.polls))
        yield waiting
        yield CounterMetricFamily(
            "raftka_fetch_long_polls_expired",
            "Fetch requests answered at their max_wait_ms, short of min_bytes.",
            value=self.polls.timed_out,
        )


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


class BrokerInfoCollector(Collector):
    """`raftka_broker_info`: which broker this is and on which host, for adding up a host's
    brokers (the shards of `raftka serve --shards`) in Prometheus: join on it by `instance`
    and sum by `host` or `rack`. Kafka has no such metric; its JMX exporter puts the broker id
    in the scrape's labels instead."""

    def __init__(self, node_id: int, rack: str | None, host: str) -> None:
        self.labels = {"node_id": str(node_id), "rack": rack or "", "host": host}

    def collect(self) -> Iterator[Metric]:
        info = InfoMetricFamily(
            "raftka_broker",
            "This broker's node id, rack (broker.rack, empty if none) and host name.",
            labels=(),
        )
        info.add_metric((), self.labels)
        yield info


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
        yield from self._log_dirs()
        yield GaugeMetricFamily(
            "kafka_controller_kafkacontroller_activecontrollercount",
            "1 on the broker that leads the metadata Raft group (the controller), else 0.",
            value=1 if self.controller.is_controller else 0,
        )

    def _log_dirs(self) -> Iterator[Metric]:
        """Kafka's LogManager gauges: offline log directories, and 1/0 per directory."""
        offline = self.topics.offline_log_dirs
        yield GaugeMetricFamily(
            "kafka_log_logmanager_offlinelogdirectorycount",
            "Log directories taken offline by an I/O error (back after a restart).",
            value=len(offline),
        )
        per_dir = GaugeMetricFamily(
            "kafka_log_logmanager_logdirectoryoffline",
            "1 when the log directory is offline after an I/O error, else 0.",
            labels=["logDirectory"],
        )
        for log_dir in self.topics.log_dirs:
            per_dir.add_metric([log_dir], 1 if log_dir in offline else 0)
        yield per_dir

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
