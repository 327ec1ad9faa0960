"""The broker's group commit: one write per turn of the event loop for every connection
whose answers wait for it, each connection answered after that write."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from raftka.broker.group_commit import PROBE_EVERY, SOLO_WRITES_BEFORE_INLINE, GroupCommit


class _Connection:
    def __init__(self, log: list[str], name: str, fail: bool = False) -> None:
        self.log = log
        self.name = name
        self.fail = fail
        self.aborted = False

    def written(self) -> None:
        if self.fail:
            raise RuntimeError(f"{self.name} cannot answer")
        self.log.append(f"answer {self.name}")

    def abort(self) -> None:
        self.aborted = True


def _run_turns(group: GroupCommit, body: object) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(group.run)
            await body()  # type: ignore[operator]
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_connections_served_in_one_turn_share_one_write() -> None:
    log: list[str] = []
    group = GroupCommit(lambda: log.append("write"))
    connections = [_Connection(log, str(n)) for n in range(5)]

    async def body() -> None:
        for connection in connections:
            group.wait_for_write(connection)
        group.wait_for_write(connections[0])  # asked twice in a turn: answered once
        await trio.testing.wait_all_tasks_blocked()

    _run_turns(group, body)
    assert log == ["write"] + [f"answer {n}" for n in range(5)]
    assert (group.writes, group.connections_answered) == (1, 5)


def test_each_turn_that_asks_gets_its_own_write_and_none_without_asking() -> None:
    log: list[str] = []
    group = GroupCommit(lambda: log.append("write"))
    first, second = _Connection(log, "a"), _Connection(log, "b")

    async def body() -> None:
        group.wait_for_write(first)
        await trio.testing.wait_all_tasks_blocked()
        await trio.testing.wait_all_tasks_blocked()  # a quiet turn: no write
        group.wait_for_write(second)
        await trio.testing.wait_all_tasks_blocked()

    _run_turns(group, body)
    assert log == ["write", "answer a", "write", "answer b"]


def test_a_forgotten_connection_is_not_answered() -> None:
    log: list[str] = []
    group = GroupCommit(lambda: log.append("write"))
    gone, staying = _Connection(log, "gone"), _Connection(log, "staying")

    async def body() -> None:
        group.wait_for_write(gone)
        group.wait_for_write(staying)
        group.forget(gone)
        await trio.testing.wait_all_tasks_blocked()

    _run_turns(group, body)
    assert log == ["write", "answer staying"]


def test_one_connections_failure_closes_it_and_the_others_are_answered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log: list[str] = []
    group = GroupCommit(lambda: log.append("write"))
    broken = _Connection(log, "broken", fail=True)
    others = [_Connection(log, "x"), _Connection(log, "y")]

    async def body() -> None:
        group.wait_for_write(others[0])
        group.wait_for_write(broken)
        group.wait_for_write(others[1])
        await trio.testing.wait_all_tasks_blocked()

    _run_turns(group, body)
    assert log == ["write", "answer x", "answer y"]
    assert broken.aborted and not any(c.aborted for c in others)


def test_a_failed_write_is_logged_and_the_connections_still_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log: list[str] = []

    def write() -> None:
        raise OSError("disk gone")

    group = GroupCommit(write)
    connection = _Connection(log, "c")

    async def body() -> None:
        group.wait_for_write(connection)
        await trio.testing.wait_all_tasks_blocked()

    with caplog.at_level(logging.ERROR, logger="raftka.connection"):
        _run_turns(group, body)
    # Each connection's own settle meets the error again and answers from it.
    assert log == ["answer c"]
    assert "writing the proposed batches failed" in caplog.text


def _ask_alone_until_inline(group: GroupCommit, connection: _Connection) -> list[bool]:
    """What `write_now` answered a connection asking alone, one turn after another, until
    (and including) the first time it was told to write itself."""

    answers: list[bool] = []

    async def body() -> None:
        while (not answers or not answers[-1]) and len(answers) <= SOLO_WRITES_BEFORE_INLINE:
            answers.append(group.write_now(connection))
            await trio.testing.wait_all_tasks_blocked()

    _run_turns(group, body)
    return answers


def test_a_connection_served_alone_writes_its_own_batches_after_a_run_of_solo_writes() -> None:
    log: list[str] = []
    group = GroupCommit(lambda: log.append("write"))
    alone = _Connection(log, "a")
    answers = _ask_alone_until_inline(group, alone)
    assert answers == [False] * SOLO_WRITES_BEFORE_INLINE + [True]
    assert group.writes == SOLO_WRITES_BEFORE_INLINE and not group.grouping

    # From now on it writes itself, but one ask in PROBE_EVERY still goes through the
    # task, which writes and answers it.
    later: list[bool] = []

    async def body() -> None:
        for _ in range(2 * PROBE_EVERY):
            later.append(group.write_now(alone))
            await trio.testing.wait_all_tasks_blocked()

    _run_turns(group, body)
    assert later.count(False) == 2 and not group.grouping
    assert group.writes == SOLO_WRITES_BEFORE_INLINE + 2
    assert log[-2:] == ["write", "answer a"]


def test_connections_met_in_a_probes_turn_are_grouped_again() -> None:
    log: list[str] = []
    group = GroupCommit(lambda: log.append("write"))
    first, second = _Connection(log, "a"), _Connection(log, "b")
    _ask_alone_until_inline(group, first)
    log.clear()
    asked: list[tuple[bool, bool]] = []

    async def body() -> None:
        # Both ask in each turn; the first ask of a turn writes itself, unless it is the
        # probe (the asks are counted: here the probe is a turn's first ask): then the
        # second joins its write, and that write turns grouping on.
        while group.writes == SOLO_WRITES_BEFORE_INLINE and len(asked) <= PROBE_EVERY:
            asked.append((group.write_now(first), group.write_now(second)))
            await trio.testing.wait_all_tasks_blocked()
        asked.append((group.write_now(first), group.write_now(second)))
        await trio.testing.wait_all_tasks_blocked()

    _run_turns(group, body)
    # Before the probe each turn's first ask wrote itself and the second was told to too
    # (no write was due); the probe's turn and every turn after it wait for the task.
    assert asked[:-2] == [(True, True)] * (len(asked) - 2)
    assert asked[-2:] == [(False, False), (False, False)]
    assert group.grouping
    assert log == ["write", "answer a", "answer b"] * 2


def test_only_connections_that_proposed_batches_count_as_sharing_a_write() -> None:
    log: list[str] = []
    group = GroupCommit(lambda: log.append("write"))
    writer, sender = _Connection(log, "w"), _Connection(log, "s")
    answers: list[bool] = []

    async def body() -> None:
        while (not answers or not answers[-1]) and len(answers) <= SOLO_WRITES_BEFORE_INLINE:
            # The same writer asking twice in a turn, and a connection that only sends
            # answers decided in another task: still a write for one connection.
            answers.append(group.write_now(writer))
            group.write_now(writer)
            group.wait_for_write(sender)
            await trio.testing.wait_all_tasks_blocked()

    _run_turns(group, body)
    assert answers == [False] * SOLO_WRITES_BEFORE_INLINE + [True]
