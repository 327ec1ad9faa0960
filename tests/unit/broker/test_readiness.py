"""The broker's readiness poller: parked readers served without being woken, woken with what
needs them, and the group commit written once per step for every connection served in it."""

from __future__ import annotations

import functools
import os
import select
import socket
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace

import pytest
import trio
import trio.testing

from raftka.broker import idle_wait
from raftka.broker.group_commit import GroupCommit
from raftka.broker.idle_wait import IdleWait
from raftka.broker.long_polls import LongPolls, Wakeable
from raftka.broker.metrics import BrokerMetrics
from raftka.broker.readiness import ROUNDS_PER_STEP, ReadinessPoller
from raftka.broker.run_queue import batches_run
from raftka.broker.topics import Partition


class _Connection:
    """What the poller uses of a connection: its socket, its parked reader, `readable`, and
    `serve_readable`, which here reads the bytes and answers as `decide` says."""

    def __init__(
        self,
        sock: socket.socket,
        group_commit: GroupCommit,
        decide: Callable[[bytes], bytes | None],
    ) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.fd = sock.fileno()
        self.parked: trio.lowlevel.Task | None = None
        self.readable = False
        self.armed = True
        self.group_commit = group_commit
        self.decide = decide
        self.served: list[bytes] = []
        self.log: list[str] = []

    def serve_readable(self, now: float) -> bytes | bytearray | None:
        data = os.read(self.fd, 1024)
        if data == b"fail":
            raise ConnectionResetError("the client reset the connection")
        self.served.append(data)
        self.group_commit.wait_for_write(self)
        return self.decide(data)

    def written(self) -> None:
        self.log.append("written")

    def abort(self) -> None:
        raise AssertionError("not expected")


def _stay_parked(_: bytes) -> bytes | None:
    return None


def test_a_parked_reader_is_served_without_waking_and_woken_with_what_needs_it() -> None:
    writes: list[str] = []
    group = GroupCommit(lambda: writes.append("write"))
    metrics = BrokerMetrics({})
    poller = ReadinessPoller(group, metrics)
    client, server = socket.socketpair()
    connection = _Connection(server, group, lambda data: data if data == b"wake" else None)
    woken: list[bytes | bytearray] = []

    async def reader() -> None:
        woken.append(await poller.wait(connection))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(poller.run)
            assert poller.register(connection)
            nursery.start_soon(reader)
            await trio.testing.wait_all_tasks_blocked()
            assert connection.parked is not None
            client.send(b"one")
            await trio.testing.wait_all_tasks_blocked()
            # served in the poller's step: the reader still waits, one write answered it
            assert (connection.served, woken, writes) == ([b"one"], [], ["write"])
            assert connection.log == ["written"]
            client.send(b"wake")
            await trio.testing.wait_all_tasks_blocked()
            assert woken == [b"wake"]
            assert connection.parked is None
            assert metrics.poller_wakeups == 2  # a wake-up for each send
            nursery.cancel_scope.cancel()

    trio.run(main)
    client.close()
    server.close()


def test_bytes_for_a_reader_not_parked_are_marked_for_it_and_reported_when_it_parks() -> None:
    group = GroupCommit(lambda: None)
    poller = ReadinessPoller(group)
    client, server = socket.socketpair()
    connection = _Connection(server, group, _stay_parked)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(poller.run)
            poller.register(connection)
            await trio.testing.wait_all_tasks_blocked()
            client.send(b"one")
            await trio.testing.wait_all_tasks_blocked()
            # its own reader reads them; until it parks, no more events for the socket
            assert (connection.readable, connection.armed, connection.served) == (True, False, [])
            assert os.read(connection.fd, 1024) == b"one"
            client.send(b"two")  # while the busy reader serves "one"
            await trio.testing.wait_all_tasks_blocked()
            assert connection.served == []
            # parking re-arms the socket, which reports the bytes that came meanwhile
            nursery.start_soon(poller.wait, connection)
            await trio.testing.wait_all_tasks_blocked()
            assert connection.armed
            assert connection.served == [b"two"]
            nursery.cancel_scope.cancel()

    trio.run(main)
    client.close()
    server.close()


def test_an_error_while_serving_is_raised_in_the_reader() -> None:
    poller = ReadinessPoller(GroupCommit(lambda: None))
    client, server = socket.socketpair()
    connection = _Connection(server, GroupCommit(lambda: None), _stay_parked)
    raised: list[BaseException] = []

    async def reader() -> None:
        try:
            await poller.wait(connection)
        except ConnectionResetError as exc:
            raised.append(exc)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(poller.run)
            poller.register(connection)
            nursery.start_soon(reader)
            await trio.testing.wait_all_tasks_blocked()
            client.send(b"fail")
            await trio.testing.wait_all_tasks_blocked()
            assert [str(exc) for exc in raised] == ["the client reset the connection"]
            nursery.cancel_scope.cancel()

    trio.run(main)
    client.close()
    server.close()


def test_a_parked_reader_can_be_cancelled_and_an_unregistered_socket_is_not_watched() -> None:
    poller = ReadinessPoller(GroupCommit(lambda: None))
    client, server = socket.socketpair()
    connection = _Connection(server, GroupCommit(lambda: None), _stay_parked)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(poller.run)
            poller.register(connection)
            with trio.move_on_after(0.05) as waited:
                await poller.wait(connection)
            assert waited.cancelled_caught
            assert connection.parked is None
            poller.unregister(connection)
            client.send(b"unseen")
            await trio.testing.wait_all_tasks_blocked()
            assert (connection.served, connection.readable) == ([], False)
            nursery.cancel_scope.cancel()
        # stopped: connections that start now wait with trio
        assert not poller.register(connection)

    trio.run(main)
    client.close()
    server.close()


def test_requests_that_come_while_others_are_served_are_served_in_the_same_step() -> None:
    writes: list[str] = []
    group = GroupCommit(lambda: writes.append("write"))
    metrics = BrokerMetrics({})
    poller = ReadinessPoller(group, metrics)
    first_client, first_server = socket.socketpair()
    second_client, second_server = socket.socketpair()

    def send_to_second(_: bytes) -> None:
        second_client.send(b"two")  # a request that comes while "one" is served

    first = _Connection(first_server, group, send_to_second)
    second = _Connection(second_server, group, _stay_parked)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(poller.run)
            for connection in (first, second):
                poller.register(connection)
                nursery.start_soon(poller.wait, connection)
            await trio.testing.wait_all_tasks_blocked()
            first_client.send(b"one")
            await trio.testing.wait_all_tasks_blocked()
            assert (first.served, second.served) == ([b"one"], [b"two"])
            # one wake-up of the poller, the group commit written at the end of each round
            assert (metrics.poller_wakeups, writes) == (1, ["write", "write"])
            nursery.cancel_scope.cancel()

    trio.run(main)
    for sock in (first_client, first_server, second_client, second_server):
        sock.close()


def test_a_step_serves_a_bounded_number_of_rounds_before_other_tasks_run() -> None:
    group = GroupCommit(lambda: None)
    metrics = BrokerMetrics({})
    poller = ReadinessPoller(group, metrics)
    client, server = socket.socketpair()
    requests = ROUNDS_PER_STEP * 2 + 1

    def send_again(_: bytes) -> None:
        if len(connection.served) < requests:
            client.send(b"again")  # each answer brings another request at once

    connection = _Connection(server, group, send_again)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(poller.run)
            poller.register(connection)
            nursery.start_soon(poller.wait, connection)
            await trio.testing.wait_all_tasks_blocked()
            client.send(b"again")
            await trio.testing.wait_all_tasks_blocked()
            assert len(connection.served) == requests
            # the poller let trio's loop run between its steps: three wake-ups, not one
            assert metrics.poller_wakeups == 3
            nursery.cancel_scope.cancel()

    trio.run(main)
    client.close()
    server.close()


def test_fetches_woken_by_a_rounds_appends_are_answered_after_its_batches_are_written() -> None:
    log: list[str] = []
    group = GroupCommit(lambda: log.append("write"))
    polls = LongPolls()
    metrics = BrokerMetrics({})
    poller = ReadinessPoller(group, metrics, polls)
    client, server = socket.socketpair()
    waiters: set[Wakeable] = set()
    partition = SimpleNamespace(waiters=waiters)

    def append(_: bytes) -> None:
        log.append("append")
        Partition.notify_appended(partition)  # type: ignore[arg-type]

    connection = _Connection(server, group, append)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(polls.run)
            nursery.start_soon(poller.run)
            poller.register(connection)
            nursery.start_soon(poller.wait, connection)
            polls.watch([partition], trio.current_time() + 30, lambda t: log.append("fetch"))
            await trio.testing.wait_all_tasks_blocked()
            client.send(b"produce")
            await trio.testing.wait_all_tasks_blocked()
            assert log == ["append", "write", "fetch"]
            assert not polls.held
            nursery.cancel_scope.cancel()

    trio.run(main)
    client.close()
    server.close()


def _in_turn(*actions: Callable[[], object]) -> tuple[threading.Thread, Callable[[], None]]:
    """A thread outside trio that does `actions` in order, each when let (`go`, returned)."""
    let = threading.Semaphore(0)

    def run() -> None:
        for action in actions:
            let.acquire()
            action()

    return threading.Thread(target=run, daemon=True), let.release


def test_lone_requests_are_served_in_the_pollers_own_step_while_trio_has_nothing_to_do() -> None:
    group = GroupCommit(lambda: None)
    poller = ReadinessPoller(group)
    client, server = socket.socketpair()
    requests = [b"one", b"two", b"three", b"four", b"five"]
    sender, go = _in_turn(*(functools.partial(client.send, request) for request in requests))
    done = trio.Event()

    def answer(_: bytes) -> None:
        if len(connection.served) == len(requests):
            done.set()
        go()  # the next request, sent once this one is served

    connection = _Connection(server, group, answer)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(poller.run)
            poller.register(connection)
            nursery.start_soon(poller.wait, connection)
            await trio.testing.wait_all_tasks_blocked()
            before = batches_run()
            sender.start()
            go()
            with trio.fail_after(30):
                await done.wait()
            # each request came alone; trio's loop stepped the poller once (it served all
            # five in that step, waiting for each in it) and then this task
            assert connection.served == requests
            assert batches_run() - before == 2
            nursery.cancel_scope.cancel()

    trio.run(main)
    sender.join()
    client.close()
    server.close()


def test_a_task_trio_runs_beside_the_poller_is_not_kept_waiting_by_its_wait() -> None:
    group = GroupCommit(lambda: None)
    poller = ReadinessPoller(group)
    client, server = socket.socketpair()
    other_client, other_server = socket.socketpair()
    other_server.setblocking(False)
    connection = _Connection(server, group, _stay_parked)

    async def other(ran: trio.Event) -> None:
        await trio.lowlevel.wait_readable(other_server)
        other_server.recv(16)
        ran.set()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(poller.run)
            poller.register(connection)
            nursery.start_soon(poller.wait, connection)
            # trio takes both sockets' readiness in one turn and runs the poller and the
            # other task in one batch, in either order: the poller must not wait in its step
            # while the other has still to run (it would, until the next deadline)
            for _ in range(20):
                ran = trio.Event()
                nursery.start_soon(other, ran)
                await trio.testing.wait_all_tasks_blocked()
                client.send(b"request")
                other_client.send(b"ready")
                with trio.fail_after(30):
                    await ran.wait()
            assert len(connection.served) == 20
            nursery.cancel_scope.cancel()

    trio.run(main)
    for sock in (client, server, other_client, other_server):
        sock.close()


def test_the_pollers_wait_ends_for_a_descriptor_of_trios_a_woken_task_and_a_deadline() -> None:
    group = GroupCommit(lambda: None)
    poller = ReadinessPoller(group)
    client, server = socket.socketpair()
    other_client, other_server = socket.socketpair()
    other_server.setblocking(False)
    sender, go = _in_turn(
        functools.partial(client.send, b"park"),
        functools.partial(other_client.send, b"ready"),
        functools.partial(client.send, b"wake"),
        functools.partial(client.send, b"park"),
    )
    seen: list[str] = []
    step = trio.Event()

    def answer(request: bytes) -> bytes | None:
        if request == b"park":
            go()  # while the poller waits in its step, bytes for another task's socket
            return None
        return request  # the reader's to serve: the poller wakes it

    connection = _Connection(server, group, answer)

    async def other() -> None:
        await trio.lowlevel.wait_readable(other_server)
        seen.append("descriptor")
        step.set()

    async def reader() -> None:
        await poller.wait(connection)
        seen.append("woken")
        step.set()

    async def sleeper() -> None:
        go()  # a request that the poller serves alone, and then waits in its step
        await trio.sleep(0.05)
        seen.append("deadline")
        step.set()

    async def main() -> None:
        nonlocal step
        async with trio.open_nursery() as nursery:
            nursery.start_soon(poller.run)
            poller.register(connection)
            nursery.start_soon(reader)
            nursery.start_soon(other)
            await trio.testing.wait_all_tasks_blocked()
            sender.start()
            go()
            # no deadline but the guard's: a poller that waited on would hit it
            for expected in ("descriptor", "woken"):
                with trio.fail_after(30):
                    await step.wait()
                assert seen[-1] == expected
                step = trio.Event()
                if expected == "descriptor":
                    go()  # "wake"
            nursery.start_soon(poller.wait, connection)
            nursery.start_soon(sleeper)
            with trio.fail_after(30):
                await step.wait()
            assert seen == ["descriptor", "woken", "deadline"]
            nursery.cancel_scope.cancel()

    trio.run(main)
    sender.join()
    for sock in (client, server, other_client, other_server):
        sock.close()


def test_the_poller_waits_with_trio_where_it_cannot_read_trios_state() -> None:
    async def under_a_mock_clock() -> IdleWait | None:
        return IdleWait.of_current_run(select.epoll())

    assert trio.run(under_a_mock_clock, clock=trio.testing.MockClock()) is None
    assert trio.run(under_a_mock_clock) is not None
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAFTKA_IDLE_WAIT", "0")
        assert trio.run(under_a_mock_clock) is None


def test_the_idle_wait_tells_trios_time() -> None:
    async def both() -> list[tuple[float, float, float]]:
        idle = IdleWait.of_current_run(select.epoll())
        assert idle is not None
        readings = []
        for _ in range(3):
            readings.append((trio.current_time(), idle.now(), trio.current_time()))
            await trio.sleep(0.01)
        return readings

    for before, read, after in trio.run(both):
        assert before <= read <= after


def test_a_wait_lingers_only_while_requests_from_several_sockets_come_close_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Long beside a wait that finds bytes ready, short beside `later`: a stall of the machine
    # as long would be needed to blur the two.
    linger = 0.5
    later = 2.0
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        time.sleep(seconds)

    monkeypatch.setattr(idle_wait, "_sleep", sleep)
    ours = select.epoll()
    client, server = socket.socketpair()
    ours.register(server.fileno(), select.EPOLLIN)  # level-triggered: ready until read

    metrics = BrokerMetrics({})

    async def main() -> None:
        idle = IdleWait.of_current_run(ours, linger, metrics)
        assert idle is not None
        client.send(b"request")
        # each wait ends at once; the first two count the waits that ended within the linger
        assert idle.wait(served=2)
        assert idle.wait(served=2)
        assert slept == []
        assert idle.wait(served=1)  # one client's requests: never kept waiting
        assert slept == []
        assert idle.wait(served=2)  # it lingers, then takes what came meanwhile
        assert slept == [linger]
        server.recv(100)
        sender = threading.Timer(later, client.send, (b"request",))
        sender.start()
        assert idle.wait(served=2)  # a linger that finds nothing waits on for the bytes
        assert slept == [linger, linger]
        sender.join()
        assert idle.wait(served=2)  # that wait was long: no linger until two short ones
        assert slept == [linger, linger]
        assert metrics.poller_lingers == 2

    trio.run(main)
    for closing in (client, server, ours):
        closing.close()


def test_a_wait_never_lingers_with_no_linger(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(idle_wait, "_sleep", slept.append)
    ours = select.epoll()
    client, server = socket.socketpair()
    ours.register(server.fileno(), select.EPOLLIN)

    async def main() -> None:
        idle = IdleWait.of_current_run(ours)
        assert idle is not None
        client.send(b"request")
        for _ in range(5):
            assert idle.wait(served=10)
        assert slept == []

    trio.run(main)
    for closing in (client, server, ours):
        closing.close()
