"""Broker configs of a Kafka KRaft node's server.properties, so one starts raftka unchanged
apart from its paths: its roles, controller listener and quorum voters (which raftka reads as
its Raft listener and `--peers`), and the thread, buffer and inter-broker settings raftka has
no use for (its brokers reach each other over their Raft listener), accepted and unused."""

from __future__ import annotations

from raftka.broker.config.types import INT, ConfigDef, S

#: The roles raftka's nodes have: every node is a broker and a metadata voter (or observer).
COMBINED_ROLES = frozenset({"broker", "controller"})

KRAFT_CONFIGS: tuple[ConfigDef, ...] = (
    ConfigDef(
        "process.roles",
        S,
        "broker,controller",
        "Kafka's node roles; raftka's nodes are always broker and controller in one.",
        read_only=True,
    ),
    ConfigDef(
        "controller.listener.names",
        S,
        None,
        "Listeners (of `listeners`) that are the node's Raft listener, not served to "
        "clients: the first one's address is --raft-listen when that is not given.",
        read_only=True,
    ),
    ConfigDef(
        "controller.quorum.voters",
        S,
        None,
        "ID@HOST:PORT,... the metadata voters' controller listeners: --peers when that is not "
        "given (one voter, this node, is a single broker).",
        read_only=True,
    ),
    *(
        ConfigDef(
            name, kind, None, f"Kafka's {name}; accepted, not used by raftka.", read_only=True
        )
        for name, kind in (
            ("num.network.threads", INT),
            ("num.io.threads", INT),
            ("num.recovery.threads.per.data.dir", INT),
            ("socket.send.buffer.bytes", INT),
            ("socket.receive.buffer.bytes", INT),
            ("inter.broker.listener.name", S),
            ("sasl.mechanism.inter.broker.protocol", S),
            ("sasl.mechanism.controller.protocol", S),
            ("transaction.state.log.min.isr", INT),
            ("share.coordinator.state.topic.min.isr", INT),
        )
    ),
)
