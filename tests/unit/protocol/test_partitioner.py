"""Kafka's key partitioner: the hashes Kafka's own tests give for murmur2 (UtilsTest), and
the partition a Kafka producer picks."""

from __future__ import annotations

import pytest

from raftka.protocol.partitioner import murmur2, partition_for_key


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_is_kafkas(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_a_key_goes_where_a_kafka_producer_puts_it() -> None:
    # toPositive(-973932308) = 1173551340, and 1173551340 % 3 = 0.
    assert partition_for_key(b"21", 3) == (-973932308 & 0x7FFFFFFF) % 3 == 0
    assert {partition_for_key(b"k%d" % i, 4) for i in range(100)} == {0, 1, 2, 3}
