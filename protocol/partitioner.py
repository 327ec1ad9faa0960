"""Kafka's default partitioner for keyed records: murmur2 of the key, made positive, modulo
the partition count (the Java client's `Utils.murmur2` and `Utils.toPositive`), so a record
raftka places by key lands where a Kafka producer would put it."""

from __future__ import annotations

import struct

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """The 32-bit murmur2 hash Kafka uses, as a signed int (as Java returns it)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - length % 4
    for (k,) in struct.iter_unpack("<I", data[:whole]):
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length % 4
    if tail:
        if tail == 3:
            h ^= data[whole + 2] << 16
        if tail >= 2:
            h ^= data[whole + 1] << 8
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition Kafka's producers choose for a record with this key."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
