"""Encode genuine Kafka v2 record batches (uncompressed or gzip) for tests.

Follows Kafka's DefaultRecord / DefaultRecordBatch encoding: records are zig-zag varint
framed, the CRC-32C covers attributes..end of batch.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import crc32c

Record = tuple[bytes | None, bytes | None]  # (key, value)


def zigzag_varint(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    raw &= (1 << 64) - 1
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> bytes:
    body = bytearray(b"\x00")  # attributes (unused)
    body += zigzag_varint(timestamp_delta)
    body += zigzag_varint(offset_delta)
    for blob in (key, value):
        if blob is None:
            body += zigzag_varint(-1)
        else:
            body += zigzag_varint(len(blob)) + blob
    body += zigzag_varint(len(headers))
    for name, header_value in headers:
        encoded = name.encode()
        body += zigzag_varint(len(encoded)) + encoded
        if header_value is None:
            body += zigzag_varint(-1)
        else:
            body += zigzag_varint(len(header_value)) + header_value
    return zigzag_varint(len(body)) + bytes(body)


def encode_batch(
    records: Sequence[Record] | None = None,
    *,
    count: int | None = None,
    base_offset: int = 0,
    base_timestamp: int = 1_700_000_000_000,
    timestamps: Sequence[int] | None = None,
    leader_epoch: int = -1,
    attributes: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    value_size: int = 10,
    gzip: bool = False,
    headers: Sequence[Sequence[tuple[str, bytes | None]]] | None = None,
) -> bytes:
    """One v2 batch. Give `records`, or `count` records of `value_size`-byte values.

    `timestamps` are absolute per-record timestamps (default: all `base_timestamp`);
    `headers`, one sequence per record (default: none).
    """
    if records is None:
        n = 1 if count is None else count
        records = [(None, bytes([i % 256]) * value_size) for i in range(n)]
    if timestamps is None:
        timestamps = [base_timestamp] * len(records)
    first_ts = timestamps[0] if timestamps else base_timestamp
    if headers is None:
        headers = [()] * len(records)
    body = b"".join(
        encode_record(i, ts - first_ts, key, value, record_headers)
        for i, ((key, value), ts, record_headers) in enumerate(
            zip(records, timestamps, headers, strict=True)
        )
    )
    if gzip:
        import cramjam

        body = bytes(cramjam.gzip.compress(body))
        attributes |= 1
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            attributes,
            len(records) - 1,
            first_ts,
            max(timestamps) if timestamps else first_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
        + body
    )
    crc = crc32c.crc32c(after_crc)
    batch_length = 4 + 1 + 4 + len(after_crc)
    return struct.pack(">qiibI", base_offset, batch_length, leader_epoch, 2, crc) + after_crc
