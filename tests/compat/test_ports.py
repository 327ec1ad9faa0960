"""The harness's port scheme: each xdist worker takes ports from a block of its own, outside
the kernel's ephemeral range, and never hands one out twice."""

from __future__ import annotations

import socket

from harness import PortAllocator, ephemeral_range, free_port, free_port_pair, worker_block


def test_worker_blocks_are_disjoint_and_outside_the_ephemeral_range() -> None:
    first, last = ephemeral_range()
    for count in (1, 2, 6):
        blocks = [set(worker_block(i, count)) for i in range(count)]
        for i, block in enumerate(blocks):
            assert block and not any(first <= port <= last for port in block)
            for other in blocks[i + 1 :]:
                assert not block & other


def test_a_block_above_the_ephemeral_range_when_that_side_is_larger() -> None:
    block = worker_block(1, 2, ephemeral=(1024, 20000))
    assert block.start > 20000 and block.stop <= 65536


def test_the_allocator_hands_out_each_port_once_and_skips_a_taken_one() -> None:
    block = worker_block(0, 1)
    allocator = PortAllocator(block, seed=7)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", block[allocator.next]))
        taken.listen()
        held = taken.getsockname()[1]
        handed = [allocator.take() for _ in range(50)]
    assert held not in handed
    assert len(set(handed)) == len(handed)
    assert all(port in block for port in handed)


def test_a_pair_is_two_consecutive_ports_of_the_block() -> None:
    port = free_port_pair()
    assert port + 1 != free_port()
    first, last = ephemeral_range()
    assert not first <= port <= last and not first <= port + 1 <= last
