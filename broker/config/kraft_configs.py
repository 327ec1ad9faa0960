"""Broker configs of a Kafka KRaft node's server.properties, so one starts raftka unchanged
apart from its paths: its roles, controller listener and quorum voters (which raftka reads as
its Raft listener and `--peers`), and the thread, buffer and inter-broker settings raftka has
no use for (its brokers reach each other over their Raft listener), accepted and unused."""

from __future__ import annotations

from raftka.broker.config.types import INT, LIST, ConfigDef, S

#: The roles raftka's nodes have: every node is a broker and a metadata voter (or observer).
COMBINED_ROLES = frozenset({"broker", "controller"})

KRAFT_CONFIGS: tuple[ConfigDef, ...] = (
    ConfigDef(
        "process.roles",
        LIST,
        "broker,controller",
        "Kafka's node roles; raftka's nodes are always broker and controller in one.",
        choices=("broker", "controller"),
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
        LIST,
        "",
        "ID@HOST:PORT,... the metadata voters' controller listeners: --peers when that is not "
        "given (one voter, this node, is a single broker); with --peers, which of them vote on "
        "the metadata at the cluster's first start, the others observing it.",
        read_only=True,
    ),
    *(
        ConfigDef(
            name,
            kind,
            default,
            f"Kafka's {name}; accepted, not used by raftka.",
            minimum=minimum,
            read_only=True,
        )
        # Kafka's type, default and lower bound of each.
        for name, kind, default, minimum in (
            ("num.network.threads", INT, 3, 1),
            ("num.io.threads", INT, 8, 1),
            ("num.recovery.threads.per.data.dir", INT, 1, 1),
            ("socket.send.buffer.bytes", INT, 102400, None),
            ("socket.receive.buffer.bytes", INT, 102400, None),
            ("inter.broker.listener.name", S, None, None),
            ("sasl.mechanism.inter.broker.protocol", S, "GSSAPI", None),
            ("sasl.mechanism.controller.protocol", S, "GSSAPI", None),
            ("transaction.state.log.min.isr", INT, 2, 1),
            ("share.coordinator.state.topic.min.isr", INT, 2, 1),
        )
    ),
)
