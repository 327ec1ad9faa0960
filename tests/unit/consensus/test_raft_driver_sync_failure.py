"""A sync job that fails: the node's `on_sync_failure` hears of it once (never a retry),
nothing that waited for it goes ahead, and the other groups' jobs of the same round still
run, each the one job made for it (a log's flush job takes its dirty marks when made). A
full disk's failure is retried instead."""

from __future__ import annotations

import errno
from collections.abc import Callable, Sequence

import pytest
import trio
from test_raft_driver import MemoryRaftGroupStorage, free_ports

from raftka.consensus.core import StorageError
from raftka.consensus.driver import RaftGroup, RaftNode
from raftka.consensus.errors import SyncFailedError
from raftka.consensus.transport import PeerTransport
from raftka.consensus.types import Entry


class CountedStorage(MemoryRaftGroupStorage):
    """Counts the sync jobs made and run; the first `failures` runs raise `errno_`."""

    def __init__(self, failures: int = 0, errno_: int = errno.EIO) -> None:
        super().__init__(sync_every_append=True)
        self.failures = failures
        self.errno = errno_
        self.made = 0
        self.ran = 0

    def sync_job(self) -> Callable[[], None] | None:
        self.made += 1

        def sync() -> None:
            self.ran += 1
            if self.failures:
                self.failures -= 1
                raise OSError(self.errno, "injected")

        return sync


async def _single_voter_groups(
    nursery: trio.Nursery,
    storages: dict[str, CountedStorage],
    on_sync_failure: Callable[[str | None, OSError], None] | None,
) -> tuple[RaftNode, dict[str, RaftGroup]]:
    (port,) = free_ports(1)
    address = ("127.0.0.1", port)
    node = RaftNode(1, PeerTransport(1, address, {1: address}), on_sync_failure=on_sync_failure)
    groups = {name: node.add_raft_group(name, frozenset({1}), s) for name, s in storages.items()}
    for group in groups.values():
        group.campaign()
    await nursery.start(node.run)
    with trio.fail_after(5):
        while not all(g.role.name == "LEADER" for g in groups.values()):
            await trio.sleep(0.01)
    return node, groups


async def _wait_all(groups: Sequence[RaftGroup], entries: Sequence[Entry]) -> list[object]:
    """Each group's wait_durable for its entry: True, False, or the error it raised."""
    outcomes: list[object] = [None] * len(groups)

    async def wait(i: int, group: RaftGroup) -> None:
        try:
            outcomes[i] = await group.wait_durable(entries[i].end_offset, 5.0, entries[i].epoch)
        except Exception as exc:  # the outcome is what the test checks
            outcomes[i] = exc

    async with trio.open_nursery() as nursery:
        for i, group in enumerate(groups):
            nursery.start_soon(wait, i, group)
    return outcomes


def test_a_failed_sync_is_reported_once_and_the_other_groups_still_sync() -> None:
    storages = {"a-0": CountedStorage(failures=1), "b-0": CountedStorage()}
    reported: list[tuple[str | None, int | None]] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:

            def on_sync_failure(group: str | None, exc: OSError) -> None:
                reported.append((group, exc.errno))
                assert group is not None
                node.remove_raft_group(group, StorageError(None, str(exc)))

            node, groups = await _single_voter_groups(nursery, storages, on_sync_failure)
            base = {name: s.made for name, s in storages.items()}
            # Both batches are proposed before the sync task runs: one round, a's job first.
            entries = [groups[name].propose(1, b"x") for name in ("a-0", "b-0")]
            a, b = await _wait_all([groups["a-0"], groups["b-0"]], entries)
            assert isinstance(a, StorageError), a
            assert b is True, b
            await trio.sleep(0.2)  # a retry would show here
            assert reported == [("a-0", errno.EIO)]
            assert node.raft_group("a-0") is None
            assert storages["a-0"].made - base["a-0"] == 1 and storages["a-0"].ran == 1
            # b's job is the one made in that round, run once after a's failed.
            assert storages["b-0"].made - base["b-0"] == 1
            assert storages["b-0"].ran == storages["b-0"].made
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_a_full_disk_sync_is_retried_and_the_job_after_it_is_not_remade() -> None:
    storages = {
        "a-0": CountedStorage(failures=1, errno_=errno.ENOSPC),
        "b-0": CountedStorage(),
    }
    reported: list[str | None] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            _, groups = await _single_voter_groups(
                nursery, storages, lambda group, exc: reported.append(group)
            )
            base = {name: s.made for name, s in storages.items()}
            entries = [groups[name].propose(1, b"x") for name in ("a-0", "b-0")]
            outcomes = await _wait_all([groups["a-0"], groups["b-0"]], entries)
            assert outcomes == [True, True]
            assert reported == []
            # a's failed job was made again for the retry; b's was made once and run once.
            assert storages["a-0"].made - base["a-0"] == 2
            assert storages["b-0"].made - base["b-0"] == 1
            assert storages["b-0"].ran == storages["b-0"].made
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_without_a_handler_a_failed_sync_stops_the_node() -> None:
    storages = {"a-0": CountedStorage(failures=1)}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            _, groups = await _single_voter_groups(nursery, storages, None)
            groups["a-0"].propose(1, b"x")
            await trio.sleep_forever()

    with pytest.raises(BaseExceptionGroup) as raised:
        trio.run(main)
    assert raised.value.subgroup(SyncFailedError) is not None, raised.value
