"""Every config raftka declares against Apache Kafka 3.9's own declarations: type, default,
validator (range, accepted values) and, for broker configs, whether Kafka lets it change at
run time and whether only per broker.

Kafka's declarations are in kafka_reference/kafka39_configs.json, printed by
kafka_reference/KafkaConfigDump.java run against a Kafka 3.9.0 build's jars (its header says
how); the test needs neither Java nor the build. A config Kafka lacks is raftka's own and
must be listed with a reason; a difference kept on purpose is in DELIBERATE with its reason.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from raftka.broker.config import BROKER_CONFIGS, TOPIC_CONFIGS, TOPIC_SYNONYMS, ConfigDef
from raftka.broker.config.types import ConfigType

KAFKA = json.loads((Path(__file__).parent / "kafka_reference" / "kafka39_configs.json").read_text())
# The broker quotas (replication throttles) are broker configs too, dynamic ones.
KAFKA["broker"] = {**KAFKA["broker"], **KAFKA["broker_quota"]}

#: raftka's own configs, which Kafka 3.9 does not declare, and why each exists.
_KAFKA_4 = "Kafka 4.0's name for a share-group setting (KIP-932); Kafka 3.9 has none"
_AUTHORIZER = "Kafka's StandardAuthorizer config (not a KafkaConfig one); raftka's ACLs read it"
RAFTKA_ONLY: dict[tuple[str, str], str] = {
    ("broker", "sasl.plain.users"): "PLAIN users without a JAAS file (sasl.jaas.config works too)",
    ("broker", "super.users"): _AUTHORIZER,
    ("broker", "allow.everyone.if.no.acl.found"): _AUTHORIZER,
    ("broker", "raft.auth.secret"): "securing raftka's own Raft connections between brokers",
    ("broker", "raft.auth.secret.file"): "securing raftka's own Raft connections between brokers",
    ("broker", "raft.security.protocol"): "securing raftka's own Raft connections between brokers",
    ("broker", "metrics.listen"): "raftka's HTTP endpoint (metrics, health, the queue API)",
    ("broker", "request.linger.us"): "fewer wake-ups of raftka's one event loop under many "
    "small requests (Kafka's threads have no such wait)",
    ("broker", "http.security.protocol"): "raftka's HTTP endpoint (metrics, health, the queue API)",
    ("broker", "console.listen"): "raftka's web console",
    ("broker", "group.share.max.share.sessions"): _KAFKA_4,
    ("broker", "share.auto.offset.reset"): "the broker-wide default of Kafka 4's group config",
    ("broker", "share.coordinator.state.topic.num.partitions"): _KAFKA_4,
    ("broker", "share.coordinator.state.topic.replication.factor"): _KAFKA_4,
    ("broker", "share.coordinator.state.topic.segment.bytes"): _KAFKA_4,
    ("broker", "share.coordinator.state.topic.min.isr"): _KAFKA_4,
    ("broker", "share.coordinator.snapshot.update.records.per.snapshot"): _KAFKA_4,
    ("topic", "raftka.restore.in.progress"): "`raftka restore` writes records at their offsets",
    ("topic", "share.delivery.order"): "raftka's priority and fair queues",
    ("topic", "share.delivery.default.priority"): "raftka's priority and fair queues",
    ("topic", "share.delivery.delay.enable"): "raftka's priority and fair queues",
    ("topic", "share.fair.key"): "raftka's priority and fair queues",
    ("topic", "share.fair.records.per.turn"): "raftka's priority and fair queues",
}


def _each(kind: str, aspect: str, *names: str) -> set[tuple[str, str, str]]:
    return {(kind, name, aspect) for name in names}


#: Differences raftka keeps on purpose, by reason; each entry is (kind, config, aspect), the
#: aspects being type, default, validator and dynamic. A difference fixed since is an error
#: (see test_deliberate_differences_are_real_differences).
DELIBERATE_BY_REASON: dict[str, set[tuple[str, str, str]]] = {
    # Kafka reconfigures listeners, TLS stores, SASL and its thread pools at run time (per
    # broker); raftka reads these at start-up, and has no such thread pools.
    "read at start-up only: a change needs a restart": _each(
        "broker",
        "dynamic",
        "listeners",
        "advertised.listeners",
        "listener.security.protocol.map",
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.key.password",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.certificates",
        "ssl.client.auth",
        "sasl.enabled.mechanisms",
        "sasl.jaas.config",
        "sasl.mechanism.inter.broker.protocol",
        "max.connections.per.ip.overrides",
        "num.network.threads",
        "num.io.threads",
        "num.recovery.threads.per.data.dir",
    ),
    # raftka's TLS takes PEM keys and certificates only (no JKS/PKCS12 keystores).
    "PEM stores only": _each("broker", "default", "ssl.keystore.type", "ssl.truststore.type")
    | _each("broker", "validator", "ssl.keystore.type", "ssl.truststore.type"),
    # A raftka broker starts with no configuration at all: a node id, a loopback listener, a
    # data directory, both roles; SASL offers what raftka has (no GSSAPI); the assignors by
    # Kafka 4's short names; share partitions hold more records in flight by default.
    "starts without configuration / raftka's own defaults": _each(
        "broker",
        "default",
        "node.id",
        "listeners",
        "log.dir",
        "process.roles",
        "sasl.enabled.mechanisms",
        "group.consumer.assignors",
        "group.share.partition.max.record.locks",
    ),
    # Kafka's ConfigDef declares no bound (or a looser one) for these; raftka refuses values
    # that mean nothing (a negative id, size, interval or rate, a retention below -1, a
    # metadata segment too small to hold a snapshot's records).
    "raftka refuses meaningless values when parsing": _each(
        "broker",
        "validator",
        "node.id",
        "sasl.server.max.receive.size",
        "default.replication.factor",
        "connections.max.idle.ms",
        "log.roll.ms",
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
        "leader.replication.throttled.rate",
        "follower.replication.throttled.rate",
        "metadata.log.segment.bytes",
        "leader.imbalance.per.broker.percentage",
        "log.flush.interval.ms",
        "log.flush.scheduler.interval.ms",
        "log.cleaner.io.max.bytes.per.second",
        "log.cleaner.dedupe.buffer.size",
        "group.initial.rebalance.delay.ms",
    ),
}
DELIBERATE = {entry for entries in DELIBERATE_BY_REASON.values() for entry in entries}


def _number(text: str) -> float:
    return float(text)


def kafka_default(kafka: dict[str, Any]) -> Any:
    """Kafka's default as raftka would hold it (None: no default or null)."""
    default = kafka["default"]
    if isinstance(default, dict):  # NO_DEFAULT_VALUE: a required config
        return None
    if default is None:
        return None
    if kafka["type"] == "DOUBLE":
        return float(default)
    return default


def defaults_match(ours: ConfigDef, kafka: dict[str, Any]) -> bool:
    theirs = kafka_default(kafka)
    if ours.type == ConfigType.PASSWORD:
        return (ours.default is None) == (theirs is None)
    if isinstance(theirs, float) and isinstance(ours.default, int | float):
        return math.isclose(ours.default, theirs)
    return ours.default == theirs


_COMPARED_VALIDATORS = ("Range", "ValidString", "ValidList", "CaseInsensitiveValidString")


def kafka_validator(kafka: dict[str, Any]) -> tuple[Any, Any, tuple[str, ...] | None]:
    """(minimum, maximum, accepted values) of Kafka's validator; None where it has none."""
    validator = kafka["validator"]
    if validator is None:
        return None, None, None
    kind = validator["kind"]
    if kind == "Range":
        low = None if validator["min"] is None else _number(validator["min"])
        high = None if validator["max"] is None else _number(validator["max"])
        return low, high, None
    return None, None, tuple(sorted(validator["values"]))


def our_validator(ours: ConfigDef) -> tuple[Any, Any, tuple[str, ...] | None]:
    low = None if ours.minimum is None else float(ours.minimum)
    high = None if ours.maximum is None else float(ours.maximum)
    choices = None if ours.choices is None else tuple(sorted(ours.choices))
    return low, high, choices


def mismatches(kind: str, ours: ConfigDef, kafka: dict[str, Any]) -> list[str]:
    found = []
    if ours.type.name != kafka["type"]:
        found.append(f"type: raftka {ours.type.name}, Kafka {kafka['type']}")
    if not defaults_match(ours, kafka):
        found.append(f"default: raftka {ours.default!r}, Kafka {kafka_default(kafka)!r}")
    # Validators that check something else (non-empty, non-null, a lambda) are not compared.
    comparable = kafka["validator"] is None or kafka["validator"]["kind"] in _COMPARED_VALIDATORS
    if comparable and our_validator(ours) != kafka_validator(kafka):
        found.append(
            f"validator: raftka {our_validator(ours)}, Kafka {kafka_validator(kafka)} "
            f"({kafka['validator'] and kafka['validator']['text']})"
        )
    if kind == "broker":
        dynamic = not ours.read_only
        if dynamic != kafka["dynamic"]:
            found.append(f"dynamic: raftka {dynamic}, Kafka {kafka['dynamic']}")
        elif dynamic and kafka["per_broker_only"]:
            found.append("dynamic: Kafka changes it per broker only, raftka cluster-wide too")
    return found


def _aspect(text: str) -> str:
    return text.split(":", 1)[0]


CASES = [("broker", name) for name in BROKER_CONFIGS] + [("topic", name) for name in TOPIC_CONFIGS]


@pytest.mark.parametrize(("kind", "name"), CASES, ids=lambda value: value)
def test_config_is_declared_as_kafka_declares_it(kind: str, name: str) -> None:
    ours = (BROKER_CONFIGS if kind == "broker" else TOPIC_CONFIGS)[name]
    theirs = KAFKA[kind].get(name)
    if theirs is None:
        assert (kind, name) in RAFTKA_ONLY, f"{kind} config {name} is not Kafka's: list it"
        return
    assert (kind, name) not in RAFTKA_ONLY, f"{kind} config {name} is Kafka's too"
    found = [
        text
        for text in mismatches(kind, ours, theirs)
        if (kind, name, _aspect(text)) not in DELIBERATE
    ]
    assert not found, f"{kind} config {name}: " + "; ".join(found)


def test_deliberate_differences_are_real_differences() -> None:
    """Every listed exception still differs from Kafka (a fixed one is taken off the list)."""
    for kind, name, aspect in DELIBERATE:
        ours = (BROKER_CONFIGS if kind == "broker" else TOPIC_CONFIGS)[name]
        aspects = {_aspect(text) for text in mismatches(kind, ours, KAFKA[kind][name])}
        assert aspect in aspects, f"{kind} config {name}: its {aspect} matches Kafka's now"


def test_raftka_only_configs_are_declared() -> None:
    for kind, name in RAFTKA_ONLY:
        assert name in (BROKER_CONFIGS if kind == "broker" else TOPIC_CONFIGS), name


def test_topic_configs_fall_back_to_kafkas_broker_configs() -> None:
    for topic_name, broker_name in TOPIC_SYNONYMS.items():
        assert KAFKA["topic_synonyms"].get(topic_name) == broker_name, topic_name


def test_the_fixture_is_kafka_3_9() -> None:
    assert KAFKA["kafka_version"] == "3.9.0"
    assert len(KAFKA["broker"]) > 300 and len(KAFKA["topic"]) > 30
