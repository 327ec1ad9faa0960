"""`raftka topics list|describe|create|alter|delete`, in the spirit of kafka-topics.sh."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from raftka.broker.admin.common import AdminError, Document, Target, print_table
from raftka.broker.admin.partitions import leader_epochs, partition_states, with_leader_epochs
from raftka.broker.admin.wire import WireCluster

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient, TopicDescription


def topic_descriptions(
    target: Target, admin: AdminClient, names: Sequence[str]
) -> dict[str, TopicDescription]:
    """Topic name -> TopicDescription (topic id, is_internal); a topic gone meanwhile is
    left out."""
    from confluent_kafka import TopicCollection

    if not names:
        return {}
    futures = admin.describe_topics(TopicCollection(list(names)), request_timeout=target.timeout_s)
    descriptions: dict[str, TopicDescription] = {}
    for name, future in futures.items():
        try:
            descriptions[name] = target.result(future, f"describe topic {name}")
        except AdminError:
            continue
    return descriptions


def _internal_flags(descriptions: dict[str, TopicDescription]) -> dict[str, bool]:
    return {name: bool(d.is_internal) for name, d in descriptions.items()}


def list_topics(target: Target, include_internal: bool) -> Document:
    admin = target.admin()  # kept referenced: a collected client cancels its requests
    metadata = target.metadata(admin)
    internal = _internal_flags(topic_descriptions(target, admin, sorted(metadata.topics)))
    topics = []
    for name in sorted(metadata.topics):
        if internal.get(name, name.startswith("__")) and not include_internal:
            continue
        partitions = metadata.topics[name].partitions.values()
        topics.append(
            {
                "name": name,
                "partitions": len(partitions),
                "replication_factor": max((len(p.replicas) for p in partitions), default=0),
                "internal": internal.get(name, False),
            }
        )
    return {"topics": topics}


def print_list(document: Document, out: TextIO) -> None:
    print_table(
        ["TOPIC", "PARTITIONS", "REPLICATION-FACTOR", "INTERNAL"],
        [
            [t["name"], t["partitions"], t["replication_factor"], str(t["internal"]).lower()]
            for t in document["topics"]
        ],
        out,
    )


def non_default_configs(
    target: Target, admin: AdminClient, names: Sequence[str]
) -> dict[str, dict[str, str | None]]:
    from confluent_kafka.admin import ConfigResource

    resources = [ConfigResource("topic", name) for name in names]
    if not resources:
        return {}
    futures = admin.describe_configs(resources, request_timeout=target.timeout_s)
    configs: dict[str, dict[str, str | None]] = {}
    for resource, future in futures.items():
        entries = target.result(
            future,
            f"describe configs of topic {resource.name}",
            f"DESCRIBE_CONFIGS on topic {resource.name}",
        )
        configs[resource.name] = {
            key: entry.value
            for key, entry in sorted(entries.items())
            if not entry.is_default and not entry.is_sensitive
        }
    return configs


def describe_topics(target: Target, names: Sequence[str], include_internal: bool) -> Document:
    admin = target.admin()
    metadata = target.metadata(admin)
    missing = [n for n in names if n not in metadata.topics]
    if missing:
        raise AdminError("UNKNOWN_TOPIC_OR_PARTITION: no such topic: " + ", ".join(sorted(missing)))
    descriptions = topic_descriptions(target, admin, sorted(metadata.topics))
    internal = _internal_flags(descriptions)
    chosen = sorted(names) if names else sorted(metadata.topics)
    if not names and not include_internal:
        chosen = [n for n in chosen if not internal.get(n, n.startswith("__"))]
    states = partition_states(metadata)
    if chosen:
        with WireCluster(target) as wire:
            # Epochs come from a Metadata answer of our own: the Python client lacks them.
            states = with_leader_epochs(states, leader_epochs(wire.metadata(chosen)))
    configs = non_default_configs(target, admin, chosen)
    topics = []
    for name in chosen:
        partitions = [s for (topic, _), s in states.items() if topic == name]
        topic_id = getattr(descriptions.get(name), "topic_id", None)
        topics.append(
            {
                "name": name,
                "topic_id": None if topic_id is None else str(topic_id),
                "internal": internal.get(name, False),
                "partition_count": len(partitions),
                "replication_factor": max((len(p.replicas) for p in partitions), default=0),
                "configs": configs.get(name, {}),
                "partitions": [
                    {k: v for k, v in p.as_json().items() if k != "topic"} for p in partitions
                ],
            }
        )
    return {"topics": topics}


def print_describe(document: Document, out: TextIO) -> None:
    for i, topic in enumerate(document["topics"]):
        if i:
            print(file=out)
        configs = ",".join(f"{k}={v}" for k, v in topic["configs"].items()) or "-"
        print(
            f"Topic: {topic['name']}  PartitionCount: {topic['partition_count']}  "
            f"ReplicationFactor: {topic['replication_factor']}  Configs: {configs}",
            file=out,
        )
        print_table(
            ["PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "STATUS"],
            [
                [
                    p["partition"],
                    p["leader"] if p["leader"] >= 0 else "none",
                    p["leader_epoch"],
                    ",".join(map(str, p["replicas"])),
                    ",".join(map(str, p["isr"])),
                    p["status"],
                ]
                for p in topic["partitions"]
            ],
            out,
        )


def create_topic(
    target: Target, name: str, partitions: int, replication_factor: int, config: dict[str, str]
) -> Document:
    from confluent_kafka.admin import NewTopic

    admin = target.admin()
    target.metadata(admin)  # fails with the bootstrap address when nothing answers
    new = NewTopic(
        name,
        num_partitions=partitions,
        replication_factor=replication_factor,
        config=config,
    )
    futures = admin.create_topics(
        [new], request_timeout=target.timeout_s, operation_timeout=target.timeout_s
    )
    target.result(futures[name], f"create topic {name}", f"CREATE on topic {name} or the cluster")
    return {"created": name, "partitions": partitions, "replication_factor": replication_factor}


def alter_topic(
    target: Target,
    name: str,
    partitions: int | None,
    set_configs: dict[str, str],
    delete_configs: Sequence[str],
) -> Document:
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
    )

    admin = target.admin()
    metadata = target.metadata(admin)
    if name not in metadata.topics:
        raise AdminError(f"UNKNOWN_TOPIC_OR_PARTITION: no such topic: {name}")
    document: Document = {"altered": name}
    if partitions is not None:
        futures = admin.create_partitions(
            [NewPartitions(name, partitions)],
            request_timeout=target.timeout_s,
            operation_timeout=target.timeout_s,
        )
        target.result(futures[name], f"add partitions to topic {name}", f"ALTER on topic {name}")
        document["partitions"] = partitions
    if set_configs or delete_configs:
        entries = [
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in set_configs.items()
        ] + [
            ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
            for k in delete_configs
        ]
        resource = ConfigResource("topic", name, incremental_configs=entries)
        altered = admin.incremental_alter_configs([resource], request_timeout=target.timeout_s)
        target.result(
            altered[resource], f"alter configs of topic {name}", f"ALTER_CONFIGS on topic {name}"
        )
        document["set_configs"] = dict(set_configs)
        document["deleted_configs"] = list(delete_configs)
    return document


def delete_topics(target: Target, names: Sequence[str]) -> Document:
    admin = target.admin()
    target.metadata(admin)
    futures = admin.delete_topics(
        list(names), request_timeout=target.timeout_s, operation_timeout=target.timeout_s
    )
    return target.deleted(futures, names, "topic", "DELETE")


def print_done(document: Document, out: TextIO) -> None:
    if "created" in document:
        print(f"Created topic {document['created']}.", file=out)
    elif "altered" in document:
        changes = []
        if "partitions" in document:
            changes.append(f"partitions now {document['partitions']}")
        changes += [f"{k}={v}" for k, v in document.get("set_configs", {}).items()]
        changes += [f"{k} reset to default" for k in document.get("deleted_configs", [])]
        print(f"Altered topic {document['altered']}: {', '.join(changes)}.", file=out)
    else:
        for name in document["deleted"]:
            print(f"Deleted topic {name}.", file=out)
