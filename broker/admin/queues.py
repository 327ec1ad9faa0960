"""`raftka queues list|create|describe|delete`: queues are topics, their delivery order
is the topic configs `share.delivery.order` and its companions (see docs/queues.md).

`describe` shows, beside the order, each share group's state of each partition as last
persisted in `__share_group_state` (as `raftka groups describe` does for one group): the
start offset, the records acknowledged and archived (cancelled ones included) past it, and
the messages whose priority the group changed or whose release it delayed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from raftka.broker.admin.common import AdminError, Document, Target, print_table
from raftka.broker.admin.queue_live import LIVE, add_live, live_states
from raftka.broker.admin.topics import create_topic, delete_topics
from raftka.broker.share.partition import RecordState

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

ORDERS = ("fifo", "priority", "fair")
#: The topic configs that make a queue's order: (config, the name a queue shows it as).
ORDER_CONFIGS = (
    ("share.delivery.order", "order"),
    ("share.delivery.default.priority", "default_priority"),
    ("share.fair.key", "fair_key"),
    ("share.delivery.delay.enable", "delays"),
)


def _orders(target: Target, admin: AdminClient, names: Sequence[str]) -> dict[str, Document]:
    """Topic -> its order configs as a queue shows them."""
    from confluent_kafka.admin import ConfigResource

    if not names:
        return {}
    resources = [ConfigResource("topic", name) for name in names]
    futures = admin.describe_configs(resources, request_timeout=target.timeout_s)
    found: dict[str, Document] = {}
    for resource, future in futures.items():
        entries = target.result(
            future,
            f"describe configs of topic {resource.name}",
            f"DESCRIBE_CONFIGS on topic {resource.name}",
        )
        shown: Document = {}
        for config, field in ORDER_CONFIGS:
            entry = entries.get(config)
            shown[field] = None if entry is None else entry.value
        found[resource.name] = shown
    return found


def _row(name: str, partitions: int, order: Document) -> Document:
    return {
        "name": name,
        "partitions": partitions,
        "order": order.get("order") or "fifo",
        "default_priority": int(order.get("default_priority") or 0),
        "fair_key": order.get("fair_key") or "key",
        "delays": order.get("order") != "fifo" or order.get("delays") == "true",
    }


def list_queues(target: Target) -> Document:
    admin = target.admin()
    metadata = target.metadata(admin)
    names = sorted(n for n in metadata.topics if not n.startswith("__"))
    orders = _orders(target, admin, names)
    return {
        "queues": [_row(n, len(metadata.topics[n].partitions), orders.get(n, {})) for n in names]
    }


def _order_text(queue: Document) -> str:
    order = str(queue["order"])
    if order == "priority":
        return f"priority (default {queue['default_priority']})"
    if order == "fair":
        return f"fair ({queue['fair_key']})"
    return "fifo with delays" if queue["delays"] else "fifo"


def print_list(document: Document, out: TextIO) -> None:
    print_table(
        ["QUEUE", "PARTITIONS", "ORDER"],
        [[q["name"], q["partitions"], _order_text(q)] for q in document["queues"]],
        out,
    )


def create_queue(
    target: Target,
    name: str,
    partitions: int,
    replication_factor: int,
    order: str,
    default_priority: int | None,
    fair_key: str | None,
    delays: bool,
) -> Document:
    config = {"share.delivery.order": order}
    if default_priority is not None:
        config["share.delivery.default.priority"] = str(default_priority)
    if fair_key is not None:
        config["share.fair.key"] = fair_key
    if delays:
        config["share.delivery.delay.enable"] = "true"
    create_topic(target, name, partitions, replication_factor, config)
    return {"created": name, "order": order, "configs": config}


def print_created(document: Document, out: TextIO) -> None:
    print(f"Created queue {document['created']} ({document['order']}).", file=out)


def describe_queue(target: Target, name: str, http: str | None = None) -> Document:
    from raftka.broker.admin.offsets import log_end_offsets
    from raftka.broker.admin.share_groups import canonical_topic_id, persisted_states
    from raftka.broker.admin.topics import topic_descriptions

    admin = target.admin()
    metadata = target.metadata(admin)
    if name not in metadata.topics or name.startswith("__"):
        raise AdminError(f"UNKNOWN_TOPIC_OR_PARTITION: no such queue: {name}")
    count = len(metadata.topics[name].partitions)
    queue = _row(name, count, _orders(target, admin, [name]).get(name, {}))
    description = topic_descriptions(target, admin, [name]).get(name)
    if description is None:
        raise AdminError(f"UNKNOWN_TOPIC_OR_PARTITION: no such queue: {name}")
    topic_id = canonical_topic_id(description.topic_id)
    ends = log_end_offsets(target, admin, [(name, p) for p in range(count)])
    states = persisted_states(target, lambda _group, found, _partition: found == topic_id)
    groups = []
    for (group, _topic_id, partition), state in sorted(states.items()):
        done = dict.fromkeys(RecordState, 0)
        for batch in state.batches:
            done[batch.state] += batch.last - batch.first + 1
        end = ends.get((name, partition), -1)
        groups.append(
            {
                "group": group,
                "partition": partition,
                "start_offset": state.start_offset,
                "log_end_offset": end,
                # Past the start: not yet acknowledged, archived or cancelled.
                "waiting": max(
                    0,
                    end
                    - state.start_offset
                    - done[RecordState.ACKNOWLEDGED]
                    - done[RecordState.ARCHIVED],
                ),
                "acknowledged": done[RecordState.ACKNOWLEDGED],
                "archived": done[RecordState.ARCHIVED],
                "priorities_changed": len(state.priorities),
                "releases_delayed": len(state.delays),
            }
        )
    if http is not None:
        for group in sorted({str(g["group"]) for g in groups}):
            add_live(
                [g for g in groups if g["group"] == group], live_states(target, http, name, group)
            )
    queue["log_end_offsets"] = [ends.get((name, p), -1) for p in range(count)]
    queue["live"] = http is not None
    queue["groups"] = groups
    return queue


def print_describe(document: Document, out: TextIO) -> None:
    ends = ",".join(map(str, document["log_end_offsets"]))
    print(
        f"Queue: {document['name']}  Partitions: {document['partitions']}  "
        f"Order: {_order_text(document)}  LogEndOffsets: {ends}",
        file=out,
    )
    if not document["groups"]:
        print("No share group has read it yet.", file=out)
        return
    print(file=out)
    live = list(LIVE) if document.get("live") else []
    print_table(
        [
            "GROUP",
            "PARTITION",
            "START-OFFSET",
            "LOG-END-OFFSET",
            "WAITING",
            "ACKNOWLEDGED",
            "ARCHIVED",
            "PRIORITIES-CHANGED",
            "RELEASES-DELAYED",
            *(c.upper() for c in live),
        ],
        [
            [
                g["group"],
                g["partition"],
                g["start_offset"],
                g["log_end_offset"],
                g["waiting"],
                g["acknowledged"],
                g["archived"],
                g["priorities_changed"],
                g["releases_delayed"],
                *("-" if g[c] is None else g[c] for c in live),
            ]
            for g in document["groups"]
        ],
        out,
    )


def delete_queues(target: Target, names: Sequence[str]) -> Document:
    return delete_topics(target, names)


def print_deleted(document: Document, out: TextIO) -> None:
    for name in document["deleted"]:
        print(f"Deleted queue {name}.", file=out)
