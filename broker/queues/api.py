"""The queue API's requests: authentication (HTTP Basic checked as SASL/PLAIN checks it,
when the cluster has a SASL listener), routing by ROUTES, JSON bodies in and out, and each
operation made through the broker's own Kafka API handlers as the caller's principal, so
the Kafka port's ACLs decide. Paths outside /queues, /openapi.json and /docs go to
`fallback` (the console, when it shares the endpoint)."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import trio
from kio.schema.create_topics.v7 import request as create_topics
from kio.schema.errors import ErrorCode

from raftka.broker.console.calls import ADMIN_TIMEOUT, Caller
from raftka.broker.http_endpoint import App, HttpError, HttpRequest, HttpResponse
from raftka.broker.queues import rest_v3
from raftka.broker.queues.changes import (
    LEADER_OPS,
    indexed,
    queue_state,
)
from raftka.broker.queues.member import (
    ACCEPT,
    REJECT,
    RELEASE,
    Delivered,
    MessageId,
    ShareMember,
    refuse_on,
)
from raftka.broker.queues.openapi import docs_page, openapi_document
from raftka.broker.queues.problems import Problem, json_response, problem_response
from raftka.broker.queues.remote import QueueOps, leaders, produce_routed
from raftka.broker.queues.rounds import Dequeue, hand_out, take
from raftka.broker.security.session import ClientSession, Principal
from raftka.protocol.api import build
from raftka.protocol.batch_builder import build_batch
from raftka.protocol.partitioner import partition_for_key

if TYPE_CHECKING:
    from raftka.broker.handlers.context import BrokerServices
    from raftka.broker.security.listeners import ListenerSpec

#: One queued message, by its partition and offset.
MESSAGE = "/queues/{name}/messages/{partition}/{offset}"
#: (method, path template) -> the QueueApi method answering it.
ROUTES: Mapping[tuple[str, str], str] = MappingProxyType(
    {
        ("GET", "/queues"): "list_queues",
        ("PUT", "/queues/{name}"): "create_queue",
        ("DELETE", "/queues/{name}"): "delete_queue",
        ("POST", "/queues/{name}/messages"): "enqueue",
        ("POST", "/queues/{name}/dequeue"): "dequeue",
        ("POST", "/queues/{name}/ack"): "ack",
        ("POST", "/queues/{name}/nack"): "nack",
        ("POST", "/queues/{name}/reject"): "reject",
        ("GET", "/queues/{name}/state"): "queue_state",
        ("PATCH", MESSAGE): "change_priority",
        ("DELETE", MESSAGE): "cancel",
        ("POST", rest_v3.TEMPLATE): "produce_v3",
        ("GET", "/openapi.json"): "openapi",
        ("GET", "/docs"): "docs",
    }
)
ORDERS = ("fifo", "priority", "fair")
MESSAGES_MAX = 500
DEQUEUE_MAX = 500
#: A dequeue waits at most this long (the endpoint answers within RESPONSE_TIMEOUT_S).
WAIT_MS_MAX = 5000
#: Broker-side share members kept at most (each group and queue dequeued from has one).
MEMBERS_MAX = 1000
PRIORITY_RANGE = (-(2**63), 2**63 - 1)
#: The longest delay of an enqueue or a nack (ten years).
DELAY_MS_MAX = 10 * 365 * 86_400_000
_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")

Json = dict[str, Any]  # Any: a JSON object's values


def _template(path: str) -> tuple[str, str | None, tuple[str, ...]] | None:
    """(template, queue name, the template's other parameters) of a served path, None for a
    path the API does not serve."""
    segments = [urllib.parse.unquote(s) for s in path.strip("/").split("/")]
    if path in ("/openapi.json", "/docs", "/queues"):
        return path, None, ()
    if segments[0] == "queues" and len(segments) in (2, 3):
        tail = "/" + segments[2] if len(segments) == 3 else ""
        return "/queues/{name}" + tail, segments[1], ()
    if segments[0] == "queues" and len(segments) == 5 and segments[2] == "messages":
        return MESSAGE, segments[1], (segments[3], segments[4])
    return None


def serves(path: str) -> bool:
    """Whether the queue API answers `path` (its problems are JSON)."""
    return path in ("/openapi.json", "/docs") or path == "/queues" or path.startswith("/queues/")


def _priority(headers: Sequence[tuple[str, bytes | None]], default: int | None) -> int | None:
    """A record's priority as a priority topic reads it: its last `priority` header when
    an integer, else the topic's default."""
    found = [value for name, value in headers if name == "priority"]
    try:
        return int((found[-1] or b"").decode("ascii")) if found else default
    except (ValueError, UnicodeDecodeError):
        return default


def error_answer(path: str, error: HttpError) -> HttpResponse | None:
    """A refusal of a queue API request (an oversized body, say) as a problem document."""
    if rest_v3.PATH.fullmatch(path):
        return rest_v3.rest_error(error.status, error.message)
    if not serves(path):
        return None
    kind = (
        "body-too-large" if error.status == HTTPStatus.REQUEST_ENTITY_TOO_LARGE else "bad-request"
    )
    return problem_response(error.status, kind, error.message)


def _body(request: HttpRequest) -> Json:
    if not request.body.strip():
        return {}
    try:
        found = json.loads(request.body)
    except (ValueError, UnicodeDecodeError):
        raise Problem(HTTPStatus.BAD_REQUEST, "malformed-json", "the body is not JSON") from None
    if not isinstance(found, dict):
        raise Problem(HTTPStatus.BAD_REQUEST, "malformed-json", "the body is not a JSON object")
    return found


def _int(body: Json, name: str, default: int | None, low: int, high: int) -> int | None:
    value = body.get(name, default)
    if value is None:
        return None
    if type(value) is not int or not low <= value <= high:
        raise Problem(
            HTTPStatus.BAD_REQUEST,
            f"invalid-{name.replace('_', '-')}",
            f"{name}: {value!r} is not a whole number in {low}..{high}",
        )
    return value


def _group(body: Json, name: str) -> str:
    """The share group a request names (default: the queue's own)."""
    group = body.get("group", name)
    if not isinstance(group, str) or not group:
        raise Problem(HTTPStatus.BAD_REQUEST, "invalid-group", "group is a non-empty text")
    return group


def _kafka(error: int, message: str | None, what: str) -> None:
    if error == ErrorCode.topic_already_exists:
        raise Problem(HTTPStatus.CONFLICT, "queue-exists", f"{what} already exists")
    refuse_on(ErrorCode(error), message, what)


class QueueApi:
    """Answers the queue API's requests on one broker (an HttpEndpoint's app)."""

    def __init__(
        self,
        services: BrokerServices,
        sasl_listener: ListenerSpec | None = None,
        fallback: App | None = None,
        members: dict[tuple[str, str], ShareMember] | None = None,
        ops: QueueOps | None = None,
    ) -> None:
        self.services = services
        self.sasl_listener = sasl_listener
        self.fallback = fallback
        #: The broker-side share members, by (group, queue); shared by a broker's endpoints.
        self.members: dict[tuple[str, str], ShareMember] = {} if members is None else members
        #: The steps taken at other brokers (their partitions' leaders, their members).
        self.ops = QueueOps(services, None) if ops is None else ops
        self.ops.ops.setdefault("settle", self._settle_op)
        for op, run in LEADER_OPS.items():
            self.ops.ops.setdefault(op, run)
        self._next_partition = 0

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        rest = rest_v3.PATH.fullmatch(request.path)
        if rest is not None:
            return await self.produce_v3(request, *map(urllib.parse.unquote, rest.groups()))
        found = _template(request.path)
        if found is None:
            if self.fallback is not None:
                return await self.fallback(request)
            return Problem(HTTPStatus.NOT_FOUND, "not-found", "no such path").response()
        template, name, parameters = found
        try:
            method = ROUTES.get((request.method, template))
            if method is None:
                allowed = [m for m, t in ROUTES if t == template]
                if not allowed:
                    raise Problem(HTTPStatus.NOT_FOUND, "not-found", "no such path")
                raise Problem(
                    HTTPStatus.METHOD_NOT_ALLOWED,
                    "method-not-allowed",
                    f"{template} serves {', '.join(allowed)}",
                )
            if template in ("/openapi.json", "/docs"):
                answer: HttpResponse = await getattr(self, method)()
                return answer
            caller = await self._caller(request)
            if name is not None and not _NAME.fullmatch(name):
                raise Problem(HTTPStatus.BAD_REQUEST, "invalid-name", f"{name!r} is no queue name")
            body = _body(request)
            group_given = urllib.parse.parse_qs(request.query).get("group")
            if group_given:
                body.setdefault("group", group_given[-1])  # as ?group=... too
            args = (caller, body) if name is None else (caller, name, *parameters, body)
            answer = await getattr(self, method)(*args)
            return answer
        except Problem as problem:
            extra = (
                (("WWW-Authenticate", 'Basic realm="raftka", charset="UTF-8"'),)
                if problem.status == HTTPStatus.UNAUTHORIZED
                else ()
            )
            return problem.response(*extra)

    async def _caller(self, request: HttpRequest) -> Caller:
        """The caller's principal: Basic credentials checked as SASL/PLAIN when the cluster
        has a SASL listener (401 without right ones), else the anonymous one."""
        remote = self.ops.remote
        if self.sasl_listener is None:
            return Caller(self.services, request.client_host, remote=remote)
        given = request.header("authorization") or ""
        scheme, _, encoded = given.partition(" ")
        user = password = ""
        if scheme.lower() == "basic":
            try:
                user, _, password = base64.b64decode(encoded, validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                user = ""
        authenticator = self.services.authenticator
        if user and await authenticator.check_plain(self.sasl_listener.name, user, password):
            authenticator.failure_delays.record_success(request.client_host)
            session = ClientSession(
                self.sasl_listener, principal=Principal("User", user), authenticated=True
            )
            return Caller(self.services, request.client_host, session, remote)
        if user:
            await trio.sleep(authenticator.failure_delays.record_failure(request.client_host))
        raise Problem(HTTPStatus.UNAUTHORIZED, "unauthorized", "a SASL user's Basic credentials")

    async def _queue(self, caller: Caller, name: str) -> Any:  # Any: a kio metadata topic
        response = await caller.metadata([name])
        (topic,) = response.topics
        if topic.error_code != ErrorCode.none:
            _kafka(topic.error_code, None, f"queue {name}")
        return topic

    # -- the routes ---------------------------------------------------------------------

    def _partition(self, key: bytes | None, count: int) -> int:
        """A keyed record's partition is the one a Kafka producer picks (murmur2 of the key);
        unkeyed ones go round robin."""
        if key is not None:
            return partition_for_key(key, count)
        self._next_partition += 1
        return (self._next_partition - 1) % count

    async def produce_v3(self, request: HttpRequest, cluster_id: str, topic: str) -> HttpResponse:
        """REST Proxy v3's produce: its own answers and error form (rest_v3.py)."""
        if request.method != "POST":
            return rest_v3.rest_error(HTTPStatus.METHOD_NOT_ALLOWED, "HTTP 405 Method Not Allowed")
        try:
            caller = await self._caller(request)
            return await rest_v3.produce_record(
                caller, cluster_id, topic, request.body, self._partition
            )
        except Problem as problem:
            answer = rest_v3.rest_error(problem.status, problem.detail)
            if problem.status == HTTPStatus.UNAUTHORIZED:
                challenge = ("WWW-Authenticate", 'Basic realm="raftka", charset="UTF-8"')
                answer = dataclasses.replace(answer, headers=(challenge,))
            return answer
        except rest_v3.RestError as refused:
            return refused.response()

    async def openapi(self) -> HttpResponse:
        return json_response(HTTPStatus.OK, openapi_document())

    async def docs(self) -> HttpResponse:
        return HttpResponse(HTTPStatus.OK, docs_page().encode(), "text/html; charset=utf-8")

    async def list_queues(self, caller: Caller, body: Json) -> HttpResponse:
        response = await caller.metadata()
        queues = []
        for topic in response.topics:
            if topic.error_code != ErrorCode.none or topic.is_internal:
                continue
            found = self.services.topics.get(topic.name)
            order = found.config.get_str("share.delivery.order") if found else "fifo"
            queues.append({"name": topic.name, "partitions": len(topic.partitions), "order": order})
        return json_response(HTTPStatus.OK, {"queues": sorted(queues, key=lambda q: q["name"])})

    async def create_queue(self, caller: Caller, name: str, body: Json) -> HttpResponse:
        partitions = _int(body, "partitions", 1, 1, 10000)
        order = body.get("order", "fifo")
        if order not in ORDERS:
            raise Problem(
                HTTPStatus.BAD_REQUEST, "invalid-order", f"order: {order!r} is not one of {ORDERS}"
            )
        configs = [("share.delivery.order", str(order))]
        default_priority = _int(body, "default_priority", None, *PRIORITY_RANGE)
        if default_priority is not None:
            configs.append(("share.delivery.default.priority", str(default_priority)))
        delays = body.get("delays", False)
        if not isinstance(delays, bool):
            raise Problem(HTTPStatus.BAD_REQUEST, "invalid-delays", "delays is true or false")
        if delays and order == "fifo":
            # The other orders always honour them.
            configs.append(("share.delivery.delay.enable", "true"))
        topic = build(
            create_topics.CreatableTopic,
            name=name,
            num_partitions=partitions,
            replication_factor=-1,
            assignments=(),
            configs=tuple(
                build(create_topics.CreatableTopicConfig, name=k, value=v) for k, v in configs
            ),
        )
        response = await caller.call(
            build(
                create_topics.CreateTopicsRequest,
                topics=(topic,),
                timeout=ADMIN_TIMEOUT,
                validate_only=False,
            )
        )
        (created,) = response.topics
        _kafka(created.error_code, created.error_message, f"queue {name}")
        return json_response(
            HTTPStatus.CREATED, {"name": name, "partitions": partitions, "order": order}
        )

    async def delete_queue(self, caller: Caller, name: str, body: Json) -> HttpResponse:
        response = await caller.delete_topic(name)
        (deleted,) = response.responses
        _kafka(deleted.error_code, deleted.error_message, f"queue {name}")
        for key in [k for k in self.members if k[1] == name]:
            del self.members[key]
        return json_response(HTTPStatus.OK, {"name": name, "deleted": True})

    async def enqueue(self, caller: Caller, name: str, body: Json) -> HttpResponse:
        given = body.get("messages", [body])
        if not isinstance(given, list) or not 1 <= len(given) <= MESSAGES_MAX:
            raise Problem(
                HTTPStatus.BAD_REQUEST,
                "invalid-messages",
                f"messages: a list of 1..{MESSAGES_MAX} message objects",
            )
        topic = await self._queue(caller, name)
        count = len(topic.partitions)
        now_ms = self.services.clock.wall_ms()
        by_partition: dict[int, list[tuple[int, bytes | None, bytes, list[Any]]]] = {}
        for position, message in enumerate(given):
            if not isinstance(message, dict):
                raise Problem(HTTPStatus.BAD_REQUEST, "invalid-messages", "a message is an object")
            key, value, headers = self._record(message, now_ms)
            partition = _int(message, "partition", None, 0, count - 1)
            if partition is None:
                partition = self._partition(key, count)
            by_partition.setdefault(partition, []).append((position, key, value, headers))
        batches = [
            (
                partition,
                build_batch(
                    [(k, v) for _, k, v, _ in records],
                    now_ms,
                    headers=[h for _, _, _, h in records],
                ),
            )
            for partition, records in sorted(by_partition.items())
        ]
        answers = await produce_routed(caller, name, batches)
        placed: list[Json] = [{} for _ in given]
        for partition, (error, message, base_offset) in sorted(answers.items()):
            _kafka(error, message, f"queue {name}")
            for n, (position, *_rest) in enumerate(by_partition[partition]):
                placed[position] = {"partition": partition, "offset": base_offset + n}
        return json_response(HTTPStatus.CREATED, {"messages": placed})

    def _record(
        self, message: Json, now_ms: int
    ) -> tuple[bytes | None, bytes, list[tuple[str, bytes | None]]]:
        if "value_base64" in message:
            try:
                value = base64.b64decode(str(message["value_base64"]), validate=True)
            except binascii.Error:
                raise Problem(
                    HTTPStatus.BAD_REQUEST, "invalid-value", "value_base64 is not base64"
                ) from None
        elif isinstance(message.get("value"), str):
            value = message["value"].encode()
        else:
            raise Problem(
                HTTPStatus.BAD_REQUEST,
                "invalid-value",
                "a message needs value (text) or value_base64",
            )
        key = message.get("key")
        if key is not None and not isinstance(key, str):
            raise Problem(HTTPStatus.BAD_REQUEST, "invalid-key", "key is text")
        given_headers = message.get("headers", {})
        if not isinstance(given_headers, dict) or not all(
            isinstance(v, str) for v in given_headers.values()
        ):
            raise Problem(
                HTTPStatus.BAD_REQUEST, "invalid-headers", "headers: an object of text values"
            )
        headers: list[tuple[str, bytes | None]] = [
            (k, v.encode()) for k, v in given_headers.items()
        ]
        priority = _int(message, "priority", None, *PRIORITY_RANGE)
        if priority is not None:
            headers.append(("priority", str(priority).encode()))
        delay = _int(message, "delay_ms", None, 0, DELAY_MS_MAX)
        at = _int(message, "deliver_at_ms", None, 0, 2**62)
        if delay is not None and at is not None:
            raise Problem(
                HTTPStatus.BAD_REQUEST, "invalid-delay", "give delay_ms or deliver_at_ms, not both"
            )
        if delay is not None:
            at = now_ms + delay
        if at is not None:
            headers.append(("deliver-at-ms", str(at).encode()))
        return (None if key is None else key.encode()), value, headers

    def _member(self, group: str, name: str) -> ShareMember:
        """The member dequeuing `name` for `group`; past MEMBERS_MAX the one unused longest
        (and not busy) is forgotten first: its ids go stale and its locks expire."""
        member = self.members.get((group, name))
        if member is None:
            idle = [
                key for key, m in self.members.items() if not m.lock.locked() and not m.rounds.busy
            ]
            if len(self.members) >= MEMBERS_MAX and idle:
                del self.members[min(idle, key=lambda key: self.members[key].last_used_s)]
            member = self.members[(group, name)] = ShareMember(group, name)
        member.last_used_s = self.services.clock.now_s()
        return member

    async def dequeue(self, caller: Caller, name: str, body: Json) -> HttpResponse:
        group = _group(body, name)
        wanted = _int(body, "max", 1, 1, DEQUEUE_MAX)
        wait_ms = _int(body, "wait_ms", 0, 0, WAIT_MS_MAX)
        ack = body.get("ack", False)
        if not isinstance(ack, bool):
            raise Problem(HTTPStatus.BAD_REQUEST, "invalid-ack", "ack is true or false")
        assert wanted is not None and wait_ms is not None, "defaults given"
        topic = await self._queue(caller, name)
        member = self._member(group, name)
        asked = Dequeue(caller, topic, wanted, ack, trio.current_time() + wait_ms / 1000)
        await member.rounds.serve(asked, lambda: self._round(group, name, member))
        if asked.failure is not None:
            raise asked.failure
        delivered = asked.records or []
        changed, refused = asked.changed, asked.refused
        messages = []
        here = self.services.identity.node_id
        for d in delivered:
            record = d.record
            headers = {k: (v or b"").decode("utf-8", "replace") for k, v in record.headers}
            shown: Json = {
                "id": MessageId(
                    group, member.member_id, name, record.partition, record.offset, here
                ).encode(),
                "partition": record.partition,
                "offset": record.offset,
                "timestamp_ms": record.timestamp_ms,
                "key": None if record.key is None else record.key.decode("utf-8", "replace"),
                "headers": headers,
                "delivery_count": d.delivery_count,
                # With ack=true: whether the acknowledgement took (else the id still may).
                "acked": ack and (record.partition, record.offset) not in refused,
            }
            where = (record.partition, record.offset)
            if where in changed:
                shown["priority"] = changed[where]
            elif "priority" in headers:
                shown["priority"] = _priority(record.headers, None)
            try:
                shown["value"] = None if record.value is None else record.value.decode()
            except UnicodeDecodeError:
                shown["value_base64"] = base64.b64encode(record.value or b"").decode()
            messages.append(shown)
        return json_response(HTTPStatus.OK, {"group": group, "acked": ack, "messages": messages})

    async def _round(self, group: str, name: str, member: ShareMember) -> None:
        """One round of `member`'s waiting dequeues (see rounds.py): those of the oldest
        one's principal, as that principal, under the member's lock. One ShareFetch
        (at each leader) for the records they ask for, their changed priorities, and one
        ShareAcknowledge (at each leader) accepting the records of those with ack=true and
        releasing any no dequeue took."""
        rounds = member.rounds
        if not rounds.pending:
            return
        first = rounds.pending[0]
        caller, topic = first.caller, first.topic
        taken: list[Dequeue] = []
        try:
            async with member.lock:
                while True:
                    take(rounds.pending, taken, first.principal)
                    if not taken:
                        return  # all gone (their requests ended) while the lock was held
                    asked = sum(d.wanted for d in taken)
                    delivered, leaders_asked = await member.poll(
                        caller, topic.topic_id, len(topic.partitions), asked, trio.current_time()
                    )
                    if delivered:
                        break
                    rounds.answer_expired(taken, first.principal)
                    rounds.answer_expired(rounds.pending, first.principal)
                    if not taken:
                        return
                    wait_s = min(d.deadline_s for d in taken) - trio.current_time()
                    rounds.waiting = first.principal
                    try:
                        delivered = await member.wait(
                            caller, topic.topic_id, leaders_asked, asked, wait_s
                        )
                    finally:
                        rounds.waiting = None
                    if delivered:
                        break
                # Read before an acknowledgement forgets them.
                changed = await self._changed_priorities(caller, group, name, delivered)
                given, left = hand_out(self._in_order(name, delivered, changed), taken)
                settle = [
                    (d.record.partition, d.record.offset, ACCEPT)
                    for position, records in given.items()
                    if taken[position].ack
                    for d in records
                ] + [(d.record.partition, d.record.offset, RELEASE) for d in left]
                refused: set[tuple[int, int]] = set()
                if settle:
                    refused = set(await member.acknowledge(caller, topic.topic_id, settle))
            for position, records in given.items():
                answered = taken[position]
                answered.changed, answered.refused = changed, refused
                answered.answer(records)
            rounds.put_back(taken)
        except Exception as failure:  # each dequeue taken raises it as its own answer
            for d in taken:
                if not d.answered:
                    d.fail(failure)

    def _in_order(
        self, name: str, delivered: list[Delivered], changed: Mapping[tuple[int, int], int]
    ) -> list[Delivered]:
        """A ShareFetch answers each partition's records in offset order; a priority
        queue's dequeue lists them most urgent first, as they were acquired (by their
        changed priority when the group changed it)."""
        topic = self.services.topics.get(name)
        if topic is None or topic.config.get_str("share.delivery.order") != "priority":
            return delivered
        default = topic.config.get_int("share.delivery.default.priority")

        def urgency(d: Delivered) -> tuple[int, int, int]:
            priority = changed.get((d.record.partition, d.record.offset))
            if priority is None:
                priority = _priority(d.record.headers, default)
            return default if priority is None else priority, d.record.offset, d.record.partition

        return sorted(delivered, key=urgency)

    async def ack(self, caller: Caller, name: str, body: Json) -> HttpResponse:
        return await self._settle(caller, name, body, ACCEPT, "acked")

    async def nack(self, caller: Caller, name: str, body: Json) -> HttpResponse:
        return await self._settle(caller, name, body, RELEASE, "released")

    async def change_priority(
        self, caller: Caller, name: str, partition: str, offset: str, body: Json
    ) -> HttpResponse:
        """A queued message's priority, in its group's state (the log is not rewritten)."""
        if "priority" not in body:
            raise Problem(HTTPStatus.BAD_REQUEST, "invalid-priority", "priority: give one")
        priority = _int(body, "priority", None, *PRIORITY_RANGE)
        return await self._change(caller, name, partition, offset, body, priority=priority)

    async def cancel(
        self, caller: Caller, name: str, partition: str, offset: str, body: Json
    ) -> HttpResponse:
        """A queued message cancelled in its group: archived, never handed out."""
        return await self._change(caller, name, partition, offset, body, cancel=True)

    async def _change(
        self,
        caller: Caller,
        name: str,
        partition: str,
        offset: str,
        body: Json,
        *,
        priority: int | None = None,
        cancel: bool = False,
    ) -> HttpResponse:
        """The change made at the partition's leader, whichever broker that is."""
        group = _group(body, name)
        where = {"partition": partition, "offset": offset}
        for field, text in where.items():
            if not text.isascii() or not text.isdigit() or len(text) > 19:
                raise Problem(
                    HTTPStatus.BAD_REQUEST,
                    f"invalid-{field}",
                    f"{field}: {text!r} is not a whole number",
                )
        await self._queue(caller, name)
        index = int(partition)
        if self.services.topics.partition(name, index) is None:
            raise Problem(
                HTTPStatus.NOT_FOUND, "unknown-partition", f"queue {name} has no partition {index}"
            )
        args = {
            "group": group,
            "topic": name,
            "partition": index,
            "offset": int(offset),
            "priority": priority,
            "cancel": cancel,
        }
        changed = await self.ops.at_leader(caller, name, index, "change", args)
        shown: Json = {
            "group": group,
            "partition": changed["partition"],
            "offset": changed["offset"],
            "state": changed["state"],
        }
        if changed["priority"] is not None:
            shown["priority"] = changed["priority"]
        return json_response(HTTPStatus.OK, shown)

    async def queue_state(self, caller: Caller, name: str, body: Json) -> HttpResponse:
        """The group's share-partitions of the queue as `queue_view` shows them: those this
        broker leads from here, the others asked of their leaders (as the caller); one whose
        leader is unknown or does not answer names its leader and `state: "unreachable"`."""
        topic = await self._queue(caller, name)
        group = _group(body, name)
        partitions = await queue_state(caller, group, name, range(len(topic.partitions)))
        elsewhere: dict[int, list[int]] = {}
        for shown in partitions:
            if not shown["led_here"]:
                elsewhere.setdefault(shown["leader"], []).append(shown["partition"])
        answered: dict[int, dict[str, Any]] = {}
        for node, indexes in sorted(elsewhere.items()):
            if node < 0:
                continue
            try:
                found = await self.ops.call(
                    caller, node, "state", {"group": group, "topic": name, "partitions": indexes}
                )
            except OSError:
                continue  # shown as unreachable below
            for shown in found:
                if shown["led_here"]:  # a leader that moved meanwhile is not chased
                    answered[int(shown["partition"])] = shown | {"led_here": False}
        for at, shown in enumerate(partitions):
            if not shown["led_here"]:
                partitions[at] = answered.get(shown["partition"], shown | {"state": "unreachable"})
        return json_response(
            HTTPStatus.OK, {"queue": name, "group": group, "partitions": partitions}
        )

    async def reject(self, caller: Caller, name: str, body: Json) -> HttpResponse:
        return await self._settle(caller, name, body, REJECT, "rejected")

    async def _settle(
        self, caller: Caller, name: str, body: Json, kind: int, done: str
    ) -> HttpResponse:
        """Acknowledge the ids as `kind`, each by the member (on whichever broker) that
        holds its lock, at its partition's leader: every id of this broker's members is
        checked before any is acknowledged."""
        given = body.get("ids", [body["id"]] if "id" in body else None)
        if not isinstance(given, list) or not 1 <= len(given) <= DEQUEUE_MAX:
            raise Problem(
                HTTPStatus.BAD_REQUEST, "invalid-id", f"ids: a list of 1..{DEQUEUE_MAX} message ids"
            )
        ids = [MessageId.decode(i) for i in given]
        delay_ms = _int(body, "delay_ms", None, 0, DELAY_MS_MAX) if kind == RELEASE else None
        if delay_ms is not None and not indexed(caller, name):
            raise Problem(
                HTTPStatus.CONFLICT,
                "delays-not-honoured",
                f"queue {name} is a fifo queue without share.delivery.delay.enable=true: it "
                "does not honour delays (nack without delay_ms, or enable them)",
            )
        for found in ids:
            if found.topic != name:
                raise Problem(
                    HTTPStatus.BAD_REQUEST,
                    "foreign-id",
                    f"an id of queue {found.topic}, not {name}",
                )
        here = self.services.identity.node_id
        by_node: dict[int, list[MessageId]] = {}
        for found in ids:
            by_node.setdefault(here if found.node is None else found.node, []).append(found)
        mine = by_node.pop(here, [])
        self._check_held(mine)
        due_ms = None if delay_ms is None else self.services.clock.wall_ms() + delay_ms
        refused = 0
        silent: list[int] = []
        for node, theirs in sorted(by_node.items()):
            args = {"topic": name, "ids": [i.encode() for i in theirs], "kind": kind}
            try:
                refused += int(await self.ops.call(caller, node, "settle", args | {"due": due_ms}))
            except OSError:
                refused += len(theirs)
                silent.append(node)
        if mine:
            refused += await self._settle_here(caller, name, mine, kind, due_ms)
        if refused:
            gone = (
                f" (broker {', '.join(map(str, silent))} that handed some out does not answer: "
                "their locks expire)"
                if silent
                else ""
            )
            raise Problem(
                HTTPStatus.CONFLICT,
                "stale-id",
                f"{refused} of the messages are not locked by this id (lock expired, already "
                f"acknowledged, or their partition's leader changed){gone}",
            )
        answer: Json = {done: len(ids)}
        if due_ms is not None:
            answer["available_at_ms"] = due_ms
        return json_response(HTTPStatus.OK, answer)

    def _check_held(self, ids: Sequence[MessageId]) -> None:
        """409 unless each id's member is this broker's member of its group and queue."""
        for found in ids:
            member = self.members.get((found.group, found.topic))
            if member is None or member.member_id != found.member_id:
                raise Problem(
                    HTTPStatus.CONFLICT,
                    "stale-id",
                    "the id's lock is no longer held (the member left, or the broker that "
                    "dealt it restarted)",
                )

    async def _settle_op(self, caller: Caller, args: Json) -> int:
        """Another broker's `_settle` of ids this broker's members hold: how many refused."""
        kind, due_ms = args["kind"], args["due"]
        if kind not in (ACCEPT, RELEASE, REJECT) or not (due_ms is None or type(due_ms) is int):
            raise Problem(HTTPStatus.BAD_REQUEST, "bad-request", "no such acknowledgement")
        ids = [MessageId.decode(i) for i in args["ids"]]
        if any(i.topic != args["topic"] for i in ids):
            raise Problem(HTTPStatus.BAD_REQUEST, "foreign-id", "an id of another queue")
        self._check_held(ids)
        return await self._settle_here(caller, str(args["topic"]), ids, kind, due_ms)

    async def _settle_here(
        self, caller: Caller, name: str, ids: Sequence[MessageId], kind: int, due_ms: int | None
    ) -> int:
        """Acknowledge ids of this broker's members; how many were refused."""
        topic = await self._queue(caller, name)
        refused = 0
        for group in sorted({i.group for i in ids}):
            offsets = [(i.partition, i.offset) for i in ids if i.group == group]
            member = self.members.get((group, name))
            if member is None or member.member_id not in {i.member_id for i in ids}:
                refused += len(offsets)  # forgotten meanwhile: its locks go with it
                continue
            async with member.lock:
                marked: list[tuple[int, int]] = []
                unmarked: list[tuple[int, int]] = []
                if due_ms is not None:
                    marked, unmarked = await self._at_leaders(
                        caller,
                        name,
                        offsets,
                        "delay",
                        {"group": group, "member_id": member.member_id, "due": due_ms},
                    )
                    # A release whose delay was not marked would not keep it back: not sent.
                    offsets = [o for o in offsets if o not in set(unmarked)]
                try:
                    not_taken = await member.acknowledge(
                        caller, topic.topic_id, [(p, o, kind) for p, o in offsets]
                    )
                except Problem:
                    await self._at_leaders(caller, name, marked, "undo", {"group": group})
                    raise
                undo = [o for o in marked if o in set(not_taken)]
                if undo:
                    await self._at_leaders(caller, name, undo, "undo", {"group": group})
                refused += len(not_taken) + len(unmarked)
        return refused

    async def _at_leaders(
        self, caller: Caller, name: str, records: Sequence[tuple[int, int]], op: str, args: Json
    ) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """`op` of (partition, offset) pairs at their partitions' leaders: (the pairs it
        answered for, those whose leader is unknown or did not take it)."""
        done: list[tuple[int, int]] = []
        failed: list[tuple[int, int]] = []
        partitions = {p for p, _ in records}
        for node, indexes in sorted(leaders(caller, name, partitions).items()):
            wanted = [r for r in records if r[0] in set(indexes)]
            if node < 0:
                failed += wanted
                continue
            try:
                found = await self.ops.call(
                    caller, node, op, args | {"topic": name, "records": wanted}
                )
            except (OSError, Problem):
                failed += wanted
                continue
            if op == "delay":
                taken = {(int(p), int(o)) for p, o in found}
                done += [r for r in wanted if r in taken]
                failed += [r for r in wanted if r not in taken]
            else:
                done += wanted
        return done, failed

    async def _changed_priorities(
        self, caller: Caller, group: str, name: str, delivered: Sequence[Delivered]
    ) -> dict[tuple[int, int], int]:
        """(partition, offset) -> priority of the delivered records whose priority `group`
        changed, as their leaders keep them (a priority queue's only)."""
        topic = self.services.topics.get(name)
        if (
            not delivered
            or topic is None
            or topic.config.get_str("share.delivery.order") != "priority"
        ):
            return {}
        records = [(d.record.partition, d.record.offset) for d in delivered]
        changed: dict[tuple[int, int], int] = {}
        for node, indexes in sorted(leaders(caller, name, {p for p, _ in records}).items()):
            wanted = [r for r in records if r[0] in set(indexes)]
            if node < 0:
                continue
            try:
                found = await self.ops.call(
                    caller, node, "priorities", {"group": group, "topic": name, "records": wanted}
                )
            except (OSError, Problem):
                continue  # shown by their header's priority
            changed |= {(int(p), int(o)): int(priority) for p, o, priority in found}
        return changed
