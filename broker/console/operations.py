"""Two read-only pages of what an operator checks besides topics and groups: `/security`
(ACL bindings, SCRAM users, client quotas) and `/operations` (partition reassignments in
progress, open transactions). Each table is what the matching describe API answers the
console's principal; a refusal shows Kafka's error instead of the table."""

from __future__ import annotations

import dataclasses
import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from raftka.broker.console.html import Html, Row, join, link, quote, section, table, tag
from raftka.broker.console.security_actions import security_forms
from raftka.broker.console.topics import leader_progress
from raftka.broker.security.acl import AclOperation, AclPermission, PatternType, ResourceType

if TYPE_CHECKING:
    from raftka.broker.console.view import View
    from raftka.broker.http_endpoint import HttpResponse

#: SCRAM mechanism numbers of DescribeUserScramCredentials.
SCRAM_MECHANISMS = MappingProxyType({1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"})


def _refused(response: Any) -> Html | None:
    """Kafka's error of a response, as a line; None when it answered."""
    if response.error_code == ErrorCode.none:
        return None
    name = ErrorCode(response.error_code).name.upper()
    message = getattr(response, "error_message", None)
    return tag("p", name + (f": {message}" if message else ""), class_="error")


def _enum_name(kind: type[Any], value: int) -> str:
    try:
        return str(kind(value).name)
    except ValueError:
        return str(value)


async def security_page(view: View) -> HttpResponse:
    acls = await view.caller.acls()
    acl_rows: list[Row] = [
        [
            _enum_name(ResourceType, resource.resource_type),
            resource.resource_name,
            _enum_name(PatternType, resource.pattern_type),
            acl.principal,
            acl.host,
            _enum_name(AclOperation, acl.operation),
            _enum_name(AclPermission, acl.permission_type),
        ]
        for resource in acls.resources
        for acl in resource.acls
    ]
    users = await view.caller.scram_users()
    user_rows: list[Row] = [
        [
            result.user,
            ", ".join(
                f"{SCRAM_MECHANISMS.get(int(info.mechanism), info.mechanism)} "
                f"({info.iterations} iterations)"
                for info in result.credential_infos
            ),
        ]
        for result in users.results
        if result.error_code == ErrorCode.none
    ]
    quotas = await view.caller.client_quotas()
    quota_rows: list[Row] = [
        [
            ", ".join(f"{e.entity_type}={e.entity_name or '(default)'}" for e in entry.entity),
            ", ".join(f"{v.key}={v.value:g}" for v in entry.values),
        ]
        for entry in quotas.entries or ()
    ]
    body = join(
        [
            section(
                "ACLs",
                _refused(acls)
                or (
                    table(
                        (
                            "resource type",
                            "name",
                            "pattern",
                            "principal",
                            "host",
                            "operation",
                            "permission",
                        ),
                        acl_rows,
                        id="acls",
                    )
                    if acl_rows
                    else tag("p", "No ACL bindings.")
                ),
            ),
            section(
                "SCRAM users",
                _refused(users)
                or (
                    table(("user", "credentials"), user_rows, id="users")
                    if user_rows
                    else tag("p", "No SCRAM users.")
                ),
            ),
            section(
                "Client quotas",
                _refused(quotas)
                or (
                    table(("entity", "quotas"), quota_rows, id="quotas")
                    if quota_rows
                    else tag("p", "No client quotas.")
                ),
            ),
            security_forms(view),
        ]
    )
    return view.page("Security", body)


async def copy_progress(view: View, topic: str, index: int, adding: list[int]) -> str:
    """How much of the log each new replica holds, as the partition's leader knows it: "4:
    1,200 of 5,000 offsets (24%)"."""
    progress = await leader_progress(view, topic, index)
    if progress is None:
        return "unknown (no leader answered)"
    total = max(progress.log_end - progress.log_start, 0)
    parts = []
    for node in adding:
        have = max(total - progress.lags.get(node, total), 0)
        share = 100 * have // total if total else 100
        parts.append(f"{node}: {have:,} of {total:,} offsets ({share}%)")
    return ", ".join(parts)


#: Transaction states of a transaction not yet ended.
OPEN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort"})


async def _open_for(view: View, transactional_ids: list[str]) -> dict[str, Html | str]:
    """How long each open transaction has been open, beside its timeout; one open past its
    timeout (the coordinator aborts it at its next check) is marked. `view` asks the
    transactions' coordinator."""
    described = await view.caller.describe_transactions(transactional_ids)
    now = datetime.datetime.fromtimestamp(view.services.clock.wall_ms() / 1000, datetime.UTC)
    ages: dict[str, Html | str] = {}
    for state in described.transaction_states:
        if state.error_code != ErrorCode.none or state.transaction_start_time is None:
            continue
        open_s = max((now - state.transaction_start_time).total_seconds(), 0.0)
        timeout_s = state.transaction_timeout.total_seconds()
        text = f"{open_s:,.0f} s of its {timeout_s:,.0f} s timeout"
        late = open_s > timeout_s
        ages[state.transactional_id] = (
            tag("span", text + " (past it)", class_="bad") if late else text
        )
    return ages


def hanging_verdict(idle_ms: int, max_timeout_ms: int, coordinator_open: bool) -> Html | str:
    """Whether a transaction a partition holds open is hanging, as `kafka-transactions.sh
    find-hanging` decides: a candidate once its producer wrote nothing for longer than the
    longest transaction timeout (`transaction.max.timeout.ms`), hanging unless a
    coordinator still has a transaction of that producer open."""
    if idle_ms <= max_timeout_ms:
        return "open"
    if coordinator_open:
        return "open past transaction.max.timeout.ms (its coordinator has it open)"
    return tag(
        "span",
        "hanging: no coordinator has it open; it holds the last stable offset back",
        class_="bad",
    )


async def _transaction_rows(view: View) -> tuple[list[Row], set[int], list[Html]]:
    """Every live broker's transactions (each coordinates its own share of the ids): the
    rows, the producer ids of the open ones, and notes on brokers that did not answer."""
    own = view.services.identity.node_id
    rows: dict[str, Row] = {}
    open_producers: set[int] = set()
    notes: list[Html] = []
    for node in sorted({own, *view.services.controller.live_brokers()}):
        caller = view.caller.at(node)
        try:
            listed = await caller.transactions()
        except OSError as exc:
            notes.append(tag("li", f"transactions of broker {node} not shown: {exc}"))
            continue
        if listed.error_code != ErrorCode.none:
            notes.append(tag("li", f"broker {node}: {ErrorCode(listed.error_code).name.upper()}"))
            continue
        states = listed.transaction_states
        open_ids = [t.transactional_id for t in states if t.transaction_state in OPEN_STATES]
        open_producers |= {int(t.producer_id) for t in states if t.transaction_state in OPEN_STATES}
        ages = (
            await _open_for(dataclasses.replace(view, caller=caller), open_ids) if open_ids else {}
        )
        for t in states:
            rows[t.transactional_id] = [
                t.transactional_id,
                int(t.producer_id),
                t.transaction_state,
                ages.get(t.transactional_id, ""),
                node,
            ]
    return [rows[name] for name in sorted(rows)], open_producers, notes


async def _open_on_partitions(view: View, open_producers: set[int]) -> tuple[list[Row], list[Html]]:
    """The transactions each partition's leader holds open (DescribeProducers), with the
    first offset of each (which the partition's last stable offset cannot pass) and whether
    it is hanging."""
    metadata = await view.caller.metadata()
    by_leader: dict[int, dict[str, list[int]]] = {}
    for topic in metadata.topics:
        for p in topic.partitions:
            if p.leader_id >= 0:
                wanted = by_leader.setdefault(int(p.leader_id), {})
                wanted.setdefault(topic.name, []).append(int(p.partition_index))
    now_ms = view.services.clock.wall_ms()
    max_timeout_ms = view.services.config.get_int("transaction.max.timeout.ms")
    rows: list[Row] = []
    notes: list[Html] = []
    for node, partitions in sorted(by_leader.items()):
        try:
            answer = await view.caller.at(node).describe_producers(partitions)
        except OSError as exc:
            notes.append(tag("li", f"partitions broker {node} leads not shown: {exc}"))
            continue
        for topic in answer.topics:
            for p in topic.partitions:
                if p.error_code != ErrorCode.none:
                    continue  # not readable by this principal, or no longer led there
                for producer in p.active_producers:
                    first = int(producer.current_txn_start_offset)
                    if first < 0:
                        continue
                    idle_ms = max(now_ms - int(producer.last_timestamp), 0)
                    pid = int(producer.producer_id)
                    rows.append(
                        [
                            link(f"/topics/{quote(topic.name)}", topic.name),
                            int(p.partition_index),
                            pid,
                            int(producer.producer_epoch),
                            first,
                            f"{idle_ms / 1000:,.0f} s ago",
                            hanging_verdict(idle_ms, max_timeout_ms, pid in open_producers),
                        ]
                    )
    rows.sort(key=lambda row: (str(row[0]), int(str(row[1])), int(str(row[2]))))
    return rows, notes


async def operations_page(view: View) -> HttpResponse:
    moving = await view.caller.reassignments()
    moving_rows: list[Row] = [
        [
            link(f"/topics/{quote(topic.name)}", topic.name),
            int(p.partition_index),
            ", ".join(str(r) for r in p.replicas),
            ", ".join(str(r) for r in p.adding_replicas),
            ", ".join(str(r) for r in p.removing_replicas),
            await copy_progress(view, topic.name, int(p.partition_index), list(p.adding_replicas)),
        ]
        for topic in moving.topics
        for p in topic.partitions
    ]
    transaction_rows, open_producers, notes = await _transaction_rows(view)
    open_rows, more_notes = await _open_on_partitions(view, open_producers)
    notes += more_notes
    body = join(
        [
            section(
                "Reassignments in progress",
                _refused(moving)
                or (
                    table(
                        ("topic", "partition", "replicas", "adding", "removing", "copied"),
                        moving_rows,
                        id="reassignments",
                        data_live="1",
                    )
                    if moving_rows
                    else tag("p", "None.", id="reassignments", data_live="1")
                ),
            ),
            section(
                "Transactions",
                tag(
                    "p",
                    "The transactional ids each broker coordinates (those this principal "
                    "may describe).",
                    class_="note",
                ),
                tag("ul", *notes, class_="notes") if notes else None,
                table(
                    ("transactional id", "producer id", "state", "open for", "coordinator"),
                    transaction_rows,
                    id="transactions",
                    data_live="1",
                )
                if transaction_rows
                else tag("p", "None.", id="transactions", data_live="1"),
            ),
            section(
                "Open transactions on partitions",
                tag(
                    "p",
                    "The transactions each partition's leader holds open (DescribeProducers): "
                    "a read_committed consumer reads no further than the first offset of the "
                    "oldest. One whose producer wrote nothing for longer than "
                    "transaction.max.timeout.ms while no coordinator has it open is hanging, "
                    "as kafka-transactions.sh find-hanging judges it.",
                    class_="note",
                ),
                table(
                    (
                        "topic",
                        "partition",
                        "producer id",
                        "epoch",
                        "first offset",
                        "last write",
                        "",
                    ),
                    open_rows,
                    id="open-transactions",
                    data_live="1",
                )
                if open_rows
                else tag("p", "None.", id="open-transactions", data_live="1"),
            ),
        ]
    )
    return view.page("Operations", body)
