"""`scripts/pipeline generate`: JSON click events (`user`, `page`, `ts`) produced to a topic
at a steady rate, keyed by user.

Event time advances `speedup` times faster than wall time, so a short run spans several
one-minute windows. Event `i` has time `start + i * speedup / rate` less a small random
delay (late-arriving clicks, never later than the pipeline's 30 s watermark allows). By
default `start` is now, or just after the newest event already in the topic if that is
later, so consecutive runs continue one timeline.
"""

from __future__ import annotations

import datetime
import json
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

PAGES = ("/home", "/search", "/product", "/cart", "/checkout", "/help")
PAGE_WEIGHTS = (30, 25, 20, 12, 8, 5)
EVENTS_TOPIC = "events"
EVENTS_PARTITIONS = 3
MAX_DELAY_MS = 2_000  # how late (in event time) a click may reach the topic
PROGRESS_EVERY_S = 0.5
PLAIN_PROGRESS_EVERY_S = 5.0  # when stdout is not a terminal


@dataclass(frozen=True)
class GenerateResult:
    """What one run produced."""

    events: int
    failed: int
    first_ts_ms: int
    last_ts_ms: int
    elapsed_s: float


def format_ts(ts_ms: int) -> str:
    """Event time as the events carry it: ISO 8601 in UTC with milliseconds."""
    moment = datetime.datetime.fromtimestamp(ts_ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts_ms % 1000:03d}Z"


def parse_ts(text: str) -> int:
    """Milliseconds since the epoch from an ISO 8601 time (a naive one is UTC)."""
    moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def ensure_topic(bootstrap: str, topic: str, partitions: int, timeout_s: float = 30) -> None:
    """Create `topic` unless it exists; returns once every partition has a leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise SystemExit(
            f"no answer from the broker at {bootstrap} within {timeout_s:g} s: {exc}"
        ) from None
    if topic not in metadata.topics:
        future = admin.create_topics([NewTopic(topic, num_partitions=partitions)])[topic]
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = admin.list_topics(topic=topic, timeout=5).topics.get(topic)
        if (
            found is not None
            and found.error is None
            and found.partitions
            and all(p.leader >= 0 for p in found.partitions.values())
        ):
            return
        time.sleep(0.1)
    raise SystemExit(f"topic {topic} has no leader for every partition after {timeout_s:g} s")


def newest_event_ms(bootstrap: str, topic: str, timeout_s: float = 10) -> int | None:
    """The largest `ts` among the last event of each partition of `topic`, if any."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "pipeline-generate",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return None
        newest = None
        for partition in metadata.partitions:
            tp = KafkaTopicPartition(topic, partition)
            low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s)
            if high <= low:
                continue
            # A few offsets back, in case the last ones are control batches.
            consumer.assign([KafkaTopicPartition(topic, partition, max(low, high - 5))])
            deadline = time.monotonic() + timeout_s
            done = False
            while not done and time.monotonic() < deadline:
                for message in consumer.consume(100, 0.5):
                    error = message.error()
                    if error is not None:
                        done = error.code() == KafkaError._PARTITION_EOF
                        continue
                    try:
                        ts_ms = parse_ts(json.loads(message.value() or b"")["ts"])
                    except (ValueError, KeyError, TypeError):
                        continue  # not a click event
                    newest = ts_ms if newest is None else max(newest, ts_ms)
        return newest
    finally:
        consumer.close()


class ProgressLine:
    """One progress line, redrawn in place on a terminal, printed every few seconds
    otherwise."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.live = out.isatty()
        self.every_s = PROGRESS_EVERY_S if self.live else PLAIN_PROGRESS_EVERY_S
        self.next_at = time.monotonic() + self.every_s

    def update(self, text: str, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now < self.next_at:
            return
        self.next_at = now + self.every_s
        if self.live:
            self.out.write(f"\r{text}\033[K")
        else:
            self.out.write(text + "\n")
        self.out.flush()

    def close(self) -> None:
        if self.live:
            self.out.write("\n")
            self.out.flush()


def generate(
    bootstrap: str,
    *,
    rate: float,
    duration_s: float,
    speedup: float = 1.0,
    topic: str = EVENTS_TOPIC,
    users: int = 50,
    seed: int | None = None,
    start_ms: int | None = None,
    out: TextIO = sys.stdout,
    clock: Callable[[], float] = time.monotonic,
) -> GenerateResult:
    """Produce `rate * duration_s` events over `duration_s` seconds and wait until the broker
    acknowledged each; prints a progress line (events/s, total) and a summary to `out`."""
    if rate <= 0 or duration_s <= 0 or speedup <= 0:
        raise ValueError("rate, duration and speedup must be positive")
    ensure_topic(bootstrap, topic, EVENTS_PARTITIONS)
    if start_ms is None:
        now_ms = int(time.time() * 1000)
        newest = newest_event_ms(bootstrap, topic)
        start_ms = max(now_ms, newest + MAX_DELAY_MS + 1) if newest is not None else now_ms
    rng = random.Random(seed)
    total = int(rate * duration_s)
    step_ms = 1000 * speedup / rate
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 20,
            "message.timeout.ms": 60_000,
        }
    )
    failed: list[str] = []

    def on_delivery(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            failed.append(error.str())

    progress = ProgressLine(out)
    started = clock()
    first_ts = last_ts = start_ms
    for i in range(total):
        # Pace by the schedule, not by sleeps, so the rate holds over the whole run. (A
        # negative poll timeout would wait forever.)
        due = started + i / rate
        while (wait_s := due - clock()) > 0:
            producer.poll(min(wait_s, 0.05))
        ts_ms = int(start_ms + i * step_ms) - rng.randrange(MAX_DELAY_MS if i else 1)
        first_ts, last_ts = min(first_ts, ts_ms), max(last_ts, ts_ms)
        user = f"user-{rng.randrange(users):03d}"
        event = {
            "user": user,
            "page": rng.choices(PAGES, PAGE_WEIGHTS)[0],
            "ts": format_ts(ts_ms),
        }
        while True:
            try:
                producer.produce(
                    topic,
                    key=user.encode(),
                    value=json.dumps(event, separators=(",", ":")).encode(),
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        elapsed = clock() - started
        progress.update(
            f"generate: {i + 1} events, {(i + 1) / max(elapsed, 1e-9):,.0f} events/s, "
            f"event time {format_ts(ts_ms)}"
        )
    left = producer.flush(60)
    elapsed = clock() - started
    progress.update(
        f"generate: {total} events, {total / max(elapsed, 1e-9):,.0f} events/s", force=True
    )
    progress.close()
    delivered = total - len(failed) - left
    result = GenerateResult(delivered, total - delivered, first_ts, last_ts, elapsed)
    out.write(
        f"generate: {result.events} events to {topic} on {bootstrap} in {elapsed:.1f} s "
        f"({result.events / max(elapsed, 1e-9):,.0f} events/s); event time "
        f"{format_ts(first_ts)} to {format_ts(last_ts)} ({speedup:g}x)\n"
    )
    if result.failed:
        out.write(f"generate: {result.failed} events NOT delivered: {failed[:1] or 'timeout'}\n")
    out.flush()
    return result
