"""Writing DataFrame rows as records, like Spark's Kafka sink (`KafkaWriteTask`): columns
`value` (required), `key`, `topic`, `partition`, `headers`; a `topic` option overrides the
column. At-least-once: a task that fails after some sends is retried and sends them again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from raftka.pipeline.errors import SourceError
from raftka.pipeline.options import OptionError, SinkOptions, client_settings

if TYPE_CHECKING:
    from pyspark.sql import Row

FLUSH_TIMEOUT_S = 120.0
POLL_EVERY = 1000  # rows between producer.poll(0) calls, to serve delivery reports


@dataclass(frozen=True)
class SinkColumns:
    """Which of the sink's columns the written DataFrame has (checked against its schema)."""

    has_key: bool
    has_topic: bool
    has_partition: bool
    has_headers: bool


@dataclass
class WrittenRecords(WriterCommitMessage):
    """What one task wrote: records acknowledged by the broker."""

    records: int


def _is_bytes_or_string(data_type: DataType) -> bool:
    return isinstance(data_type, (BinaryType, StringType))


def check_sink_schema(schema: StructType, options: SinkOptions) -> SinkColumns:
    """The columns a write will use; an `OptionError` names a missing or mistyped one."""
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise OptionError("Required attribute 'value' not found in the written DataFrame")
    if not _is_bytes_or_string(fields["value"]):
        raise OptionError(
            f"value attribute type must be a string or binary, got {fields['value'].simpleString()}"
        )
    if "key" in fields and not _is_bytes_or_string(fields["key"]):
        raise OptionError(
            f"key attribute type must be a string or binary, got {fields['key'].simpleString()}"
        )
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise OptionError(
            f"topic attribute type must be a string, got {fields['topic'].simpleString()}"
        )
    if "topic" not in fields and options.topic is None:
        raise OptionError(
            "topic option required when no 'topic' attribute is present. Use the topic "
            "option for setting a topic."
        )
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise OptionError(
            f"partition attribute type must be an int, got {fields['partition'].simpleString()}"
        )
    if "headers" in fields:
        headers = fields["headers"]
        ok = (
            isinstance(headers, ArrayType)
            and isinstance(headers.elementType, StructType)
            and [(f.name, type(f.dataType)) for f in headers.elementType.fields]
            == [("key", StringType), ("value", BinaryType)]
        )
        if not ok:
            raise OptionError(
                "headers attribute type must be array<struct<key:string,value:binary>>, got "
                f"{headers.simpleString()}"
            )
    return SinkColumns(
        has_key="key" in fields,
        has_topic="topic" in fields,
        has_partition="partition" in fields,
        has_headers="headers" in fields,
    )


def _as_bytes(value: str | bytes | bytearray | memoryview | None) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return bytes(value)  # bytearray, memoryview


def write_rows(rows: Iterable[Row], options: SinkOptions, columns: SinkColumns) -> WrittenRecords:
    """Produce one record per row and wait until the broker acknowledged every one.

    Raises `SourceError` naming the topic and the first error when any record failed.
    """
    try:
        producer = Producer(client_settings(options.producer_config()))
    except KafkaException as exc:
        raise SourceError(f"bad kafka.* option for the Kafka producer: {exc}") from None
    failures: list[str] = []
    acked = [0]

    def on_delivery(error: KafkaError | None, message: Message) -> None:
        if error is None:
            acked[0] += 1
        elif len(failures) < 5:
            failures.append(f"{message.topic()}: {error.str()}")

    sent = 0
    for row in rows:
        topic = options.topic or (row["topic"] if columns.has_topic else None)
        if not topic:
            raise SourceError(
                "null topic present in the data. Use the topic option for setting a topic."
            )
        record: dict[str, Any] = {  # Any: Producer.produce's keywords
            "value": _as_bytes(row["value"]),
            "on_delivery": on_delivery,
        }
        if columns.has_key:
            record["key"] = _as_bytes(row["key"])
        if columns.has_partition and row["partition"] is not None:
            record["partition"] = row["partition"]
        if columns.has_headers and row["headers"]:
            record["headers"] = [(h["key"], _as_bytes(h["value"])) for h in row["headers"]]
        while True:
            try:
                producer.produce(topic, **record)
                break
            except BufferError:
                producer.poll(0.05)  # the local queue is full: wait for acknowledgements
            except KafkaException as exc:
                raise SourceError(f"cannot write to topic {topic}: {exc}") from None
        sent += 1
        if sent % POLL_EVERY == 0:
            producer.poll(0)
    left = producer.flush(FLUSH_TIMEOUT_S)
    if failures or left:
        raise SourceError(
            f"{sent - acked[0]} of {sent} records not written to "
            f"{options.bootstrap_servers}"
            + (f" ({left} unacknowledged after {FLUSH_TIMEOUT_S:g} s)" if left else "")
            + (f": {'; '.join(failures)}" if failures else "")
        )
    return WrittenRecords(sent)


def summarize(messages: Iterable[WriterCommitMessage | None]) -> int:
    """Records written by all tasks of a job."""
    return sum(m.records for m in messages if isinstance(m, WrittenRecords))
