"""How one broker's queue API reaches the whole queue: each partition's leader, the group's
coordinator, and the broker that handed a message out.

Kafka requests (ShareGroupHeartbeat, ShareFetch, ShareAcknowledge, Produce) go to the
broker they belong at over the brokers' peer connection (`RemoteCalls`), made as the
HTTP caller's principal: the broker asked runs its own handler, so its ACLs decide as for
a Kafka client of that principal. The queue API's own steps that are no Kafka request (a
priority changed, a message cancelled, a release's delay, an acknowledgement of a message
another broker handed out) go as a `queues.call` of the same peer connection, with the
same principal, and run there as they would have here; a refusal comes back as the problem
the broker asked raised.

Leadership is read from the cluster's metadata before each step; a step refused because
the leader moved (NOT_LEADER_OR_FOLLOWER, a broker that does not answer, a partition
electing its leader) is tried again at the new leader a bounded number of times."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

import trio
from kio.schema.errors import ErrorCode

from raftka.broker.console.remote_calls import CALL_TIMEOUT_S
from raftka.broker.handlers.metadata import partition_leader
from raftka.broker.queues.problems import Problem
from raftka.consensus.transport import ForwardError

if TYPE_CHECKING:
    from raftka.broker.console.calls import Caller
    from raftka.broker.console.remote_calls import RemoteCalls
    from raftka.broker.handlers.context import BrokerServices

QUEUE_RPC = "queues.call"
#: A step refused because its partition has no leader now is tried this many times, this
#: far apart (a leader election takes well under the ten seconds this allows).
LEADER_TRIES = 40
LEADER_RETRY_S = 0.25
#: Produce errors after which nothing was written: the records are sent to the new leader.
MOVED = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.leader_not_available,
        ErrorCode.not_enough_replicas,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
    }
)

Json = dict[str, Any]  # Any: a JSON object's values
Op = Callable[["Caller", Json], Awaitable[Any]]


def leaders(caller: Caller, topic: str, indexes: Iterable[int]) -> dict[int, list[int]]:
    """Leader -> the partitions of `indexes` it leads (-1: those without a leader now), as
    the cluster's metadata on this broker has them."""
    services = caller.services
    found: dict[int, list[int]] = {}
    for index in indexes:
        partition = services.topics.partition(topic, index)
        leader = -1 if partition is None else partition_leader(services.controller, partition)[0]
        found.setdefault(leader, []).append(index)
    return found


class QueueOps:
    """The queue API's steps run at another broker (`call`), and theirs served here."""

    def __init__(self, services: BrokerServices, remote: RemoteCalls | None) -> None:
        self.services = services
        self.remote = remote
        #: Op name -> what runs it here (registered by the queue API).
        self.ops: dict[str, Op] = {}

    async def call(self, caller: Caller, node: int, op: str, args: Json) -> Any:
        """`op`'s answer from broker `node` (here when it is this broker); the problem it
        raised there; OSError when `node` does not answer."""
        if node == self.services.identity.node_id or self.remote is None:
            return await self.ops[op](caller, args)
        session = caller.session
        payload = {
            "principal": None if session is None else str(session.principal),
            "listener": None if session is None else session.listener.name,
            "host": caller.client_host,
            "op": op,
            "args": args,
        }
        try:
            raw = await self.remote.forward(
                node, QUEUE_RPC, json.dumps(payload).encode(), CALL_TIMEOUT_S
            )
        except ForwardError as exc:
            raise OSError(f"broker {node} did not answer: {exc}") from exc
        answer = json.loads(raw)
        if "problem" in answer:
            status, kind, detail = answer["problem"]
            raise Problem(HTTPStatus(status), kind, detail)
        return answer["ok"]

    async def serve(self, payload: bytes) -> tuple[int, bytes]:
        """Run another broker's `call` here, as its caller's principal."""
        try:
            asked = json.loads(payload)
            op = self.ops[asked["op"]]
            args = asked["args"]
            if not isinstance(args, dict) or self.remote is None:
                raise ValueError("no arguments")
            session = self.remote.session_of(asked["principal"], asked["listener"])
        except (ValueError, KeyError, TypeError) as exc:
            return int(ErrorCode.invalid_request), f"bad queue call: {exc}".encode()
        # Imported when first asked: it loads kio's request entities of every API it calls.
        from raftka.broker.console.calls import Caller

        caller = Caller(self.services, str(asked.get("host", "")), session, self.remote)
        try:
            result = await op(caller, args)
        except Problem as problem:
            refused = [int(problem.status), problem.kind, problem.detail]
            return 0, json.dumps({"problem": refused}).encode()
        except OSError as exc:
            refused = [int(HTTPStatus.SERVICE_UNAVAILABLE), "unavailable", str(exc)]
            return 0, json.dumps({"problem": refused}).encode()
        except (KeyError, TypeError, ValueError) as exc:  # arguments not of this version's
            return int(ErrorCode.invalid_request), f"bad queue call: {exc!r}".encode()
        return 0, json.dumps({"ok": result}).encode()

    async def at_leader(self, caller: Caller, topic: str, index: int, op: str, args: Json) -> Any:
        """`op` at the leader of `topic`'s partition `index`, followed to a new leader when
        the one asked no longer leads it or does not answer; 503 when none takes it."""
        last = "it has no leader"
        for _ in range(LEADER_TRIES):
            ((leader, _indexes),) = leaders(caller, topic, [index]).items()
            if leader >= 0:
                try:
                    return await self.call(caller, leader, op, args)
                except Problem as problem:
                    if problem.kind != "not-leader":
                        raise
                    last = problem.detail
                except OSError as exc:
                    last = str(exc)
            await trio.sleep(LEADER_RETRY_S)
        raise Problem(
            HTTPStatus.SERVICE_UNAVAILABLE,
            "not-leader",
            f"partition {index} of queue {topic} has no leader that answers now ({last})",
        )


async def produce_routed(
    caller: Caller, topic: str, batches: Sequence[tuple[int, bytes]]
) -> dict[int, tuple[int, str | None, int]]:
    """Partition -> (Kafka error code, message, base offset) of each batch, produced at
    its partition's leader (acks=all); a batch refused because leadership moved, or whose
    leader did not answer, is sent again to the new one (as a producer without idempotence
    does: a leader killed after writing but before answering may keep a copy)."""
    pending = dict(batches)
    answers: dict[int, tuple[int, str | None, int]] = {}
    for attempt in range(LEADER_TRIES):
        moved: dict[int, tuple[int, str | None, int]] = {}
        for leader, indexes in sorted(leaders(caller, topic, pending).items()):
            if leader < 0:
                moved |= {i: (int(ErrorCode.leader_not_available), None, -1) for i in indexes}
                continue
            try:
                response = await caller.at(leader).produce_batches(
                    topic, [(i, pending[i]) for i in indexes]
                )
            except OSError as exc:
                moved |= {i: (int(ErrorCode.leader_not_available), str(exc), -1) for i in indexes}
                continue
            for produced in response.responses:
                for answer in produced.partition_responses:
                    index = int(answer.index)
                    got = (int(answer.error_code), answer.error_message, int(answer.base_offset))
                    if answer.error_code in MOVED:
                        moved[index] = got
                    else:
                        answers[index] = got
        pending = {i: pending[i] for i in moved}
        if not pending or attempt + 1 == LEADER_TRIES:
            answers |= moved
            break
        await trio.sleep(LEADER_RETRY_S)
    return answers
