"""Broker configs of the server itself: identity, listeners, TLS and SASL, authorization,
Raft connection security, the data directory, metrics, topic creation, request and
connection limits, and quotas."""

from __future__ import annotations

from raftka.broker.config.types import INT, INT_MAX, LIST, B, ConfigDef, L, P, S

SERVER_CONFIGS: tuple[ConfigDef, ...] = (
    ConfigDef("node.id", INT, 1, "This broker's id.", minimum=0, read_only=True),
    ConfigDef(
        "broker.id", INT, -1, "Alias of node.id (Kafka's ZooKeeper-era name).", read_only=True
    ),
    ConfigDef(
        "broker.rack", S, None, "Rack (host) of this broker, for replica placement.", read_only=True
    ),
    ConfigDef(
        "listeners",
        S,
        "PLAINTEXT://127.0.0.1:9092",
        "NAME://HOST:PORT,... the broker listens on (after --listen, if given); each name's "
        "protocol is in listener.security.protocol.map.",
        read_only=True,
    ),
    ConfigDef(
        "advertised.listeners",
        S,
        None,
        "NAME://HOST:PORT per listener given to clients in Metadata, if it differs from "
        "listeners (an entry without NAME:// is the first listener's).",
        read_only=True,
    ),
    ConfigDef(
        "listener.security.protocol.map",
        S,
        "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "LISTENER_NAME:SECURITY_PROTOCOL pairs for named listeners.",
        read_only=True,
    ),
    ConfigDef(
        "ssl.keystore.type",
        S,
        "PEM",
        "Only PEM keystores are supported.",
        choices=("PEM",),
        read_only=True,
    ),
    ConfigDef(
        "ssl.keystore.location",
        S,
        None,
        "PEM file with the broker's private key and certificate chain.",
        read_only=True,
    ),
    ConfigDef(
        "ssl.key.password",
        P,
        None,
        "Password of the private key, if it is encrypted.",
        read_only=True,
    ),
    ConfigDef(
        "ssl.keystore.certificate.chain",
        P,
        None,
        "The broker's certificate chain in PEM, inline (instead of ssl.keystore.location).",
        read_only=True,
    ),
    ConfigDef(
        "ssl.keystore.key",
        P,
        None,
        "The broker's private key in PEM, inline (instead of ssl.keystore.location).",
        read_only=True,
    ),
    ConfigDef(
        "ssl.truststore.type",
        S,
        "PEM",
        "Only PEM truststores are supported.",
        choices=("PEM",),
        read_only=True,
    ),
    ConfigDef(
        "ssl.truststore.location",
        S,
        None,
        "PEM file with the CA certificates client certificates are checked against.",
        read_only=True,
    ),
    ConfigDef(
        "ssl.truststore.certificates",
        P,
        None,
        "CA certificates in PEM, inline (instead of ssl.truststore.location).",
        read_only=True,
    ),
    ConfigDef(
        "ssl.client.auth",
        S,
        "none",
        "Client certificates: none, requested (checked if sent) or required (mTLS).",
        choices=("none", "requested", "required"),
        read_only=True,
    ),
    ConfigDef(
        "sasl.enabled.mechanisms",
        LIST,
        "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "SASL mechanisms offered on SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512.",
        read_only=True,
    ),
    ConfigDef(
        "sasl.plain.users",
        P,
        None,
        "USER:PASSWORD,... accepted by SASL/PLAIN (raftka's own; PLAIN also accepts users "
        "with SCRAM credentials).",
        read_only=True,
    ),
    ConfigDef(
        "sasl.jaas.config",
        P,
        None,
        "Kafka's JAAS login module config: PlainLoginModule's user_NAME=\"PASSWORD\" options "
        "are PLAIN users (beside sasl.plain.users); per listener and mechanism as "
        "listener.name.<listener>.<mechanism>.sasl.jaas.config.",
        read_only=True,
    ),
    ConfigDef(
        "connection.failed.authentication.delay.ms",
        INT,
        100,
        "Delay before a failed authentication is answered; it doubles with each further "
        "failure from the same host (at most 32 times this).",
        minimum=0,
        read_only=True,
    ),
    ConfigDef(
        "sasl.server.max.receive.size",
        INT,
        524288,
        "Largest request frame before SASL authentication completes on a SASL listener; "
        "a larger one closes the connection without its body being read.",
        minimum=1,
        read_only=True,
    ),
    ConfigDef(
        "authorizer.class.name",
        S,
        "",
        "Empty: no authorization. org.apache.kafka.metadata.authorizer.StandardAuthorizer "
        "(or kafka.security.authorizer.AclAuthorizer): every request is checked against "
        "the cluster's ACLs.",
        read_only=True,
    ),
    ConfigDef(
        "super.users",
        S,
        None,
        "Principals allowed everything, separated by ';' (User:admin;User:CN=ops).",
        read_only=True,
    ),
    ConfigDef(
        "allow.everyone.if.no.acl.found",
        B,
        False,
        "Whether a resource no ACL names is open to every principal.",
        read_only=True,
    ),
    ConfigDef(
        "raft.auth.secret",
        P,
        None,
        "The secret every broker of the cluster shares to authenticate Raft connections "
        "between brokers (at least 16 characters; several separated by ',' are all accepted "
        "and the first is used). Unset: Raft connections are not authenticated.",
        read_only=True,
    ),
    ConfigDef(
        "raft.security.protocol",
        S,
        "PLAINTEXT",
        "PLAINTEXT or SSL: TLS between brokers' Raft ports with the broker's keystore and "
        "truststore, both certificates checked (needs raft.auth.secret too).",
        choices=("PLAINTEXT", "SSL"),
        read_only=True,
    ),
    ConfigDef(
        "raft.auth.secret.file",
        S,
        None,
        "A file holding raft.auth.secret (one secret a line), instead of raft.auth.secret.",
        read_only=True,
    ),
    ConfigDef(
        "log.dirs",
        S,
        None,
        "Comma-separated log directories (JBOD): each new replica goes to the one with the "
        "fewest partitions; the metadata log and Raft state stay in the first. Unset: log.dir.",
        read_only=True,
    ),
    ConfigDef(
        "log.dir",
        S,
        "./data",
        "The log directory when log.dirs is not set.",
        read_only=True,
    ),
    ConfigDef(
        "metrics.listen",
        S,
        "",
        "HOST:PORT of the HTTP endpoint for /metrics (Prometheus), /healthz and /readyz, "
        "and the queue API (/queues, /openapi.json, /docs); empty: no endpoint.",
        read_only=True,
    ),
    ConfigDef(
        "http.security.protocol",
        S,
        "PLAINTEXT",
        "PLAINTEXT or SSL: HTTPS on metrics.listen and console.listen, with the broker's "
        "keystore (listener.name.http.ssl.* overrides it; ssl.client.auth there asks for "
        "client certificates).",
        choices=("PLAINTEXT", "SSL"),
        read_only=True,
    ),
    ConfigDef(
        "console.listen",
        S,
        "",
        "HOST:PORT of the web console (overview, topics, messages, groups); the same as "
        "metrics.listen to serve both on one port; empty: no console.",
        read_only=True,
    ),
    ConfigDef(
        "num.partitions", INT, 1, "Partitions of an auto-created topic.", minimum=1, read_only=True
    ),
    ConfigDef(
        "default.replication.factor",
        INT,
        1,
        "Replication factor of auto-created topics.",
        minimum=1,
        read_only=True,
    ),
    ConfigDef(
        "auto.create.topics.enable",
        B,
        True,
        "Create a topic when a client asks for its metadata or produces to it.",
        read_only=True,
    ),
    ConfigDef("delete.topic.enable", B, True, "Allow DeleteTopics.", read_only=True),
    ConfigDef(
        "message.max.bytes", INT, 1048588, "Largest record batch the broker accepts.", minimum=0
    ),
    ConfigDef(
        "socket.request.max.bytes",
        INT,
        104857600,
        "Largest request frame; larger frames close the connection.",
        minimum=1,
        read_only=True,
    ),
    ConfigDef(
        "queued.max.requests",
        INT,
        500,
        "Requests a connection may have in flight before the broker stops reading it.",
        minimum=1,
        read_only=True,
    ),
    ConfigDef(
        "max.incremental.fetch.session.cache.slots",
        INT,
        1000,
        "Incremental fetch sessions (KIP-227) the broker keeps; 0 answers every consumer "
        "Fetch in full.",
        minimum=0,
        read_only=True,
    ),
    ConfigDef(
        "connections.max.idle.ms",
        L,
        600000,
        "Idle connections are closed after this.",
        minimum=-1,
        read_only=True,
    ),
    ConfigDef(
        "request.linger.us",
        INT,
        100,
        "While requests from several connections come less than this many microseconds "
        "apart, the broker waits this long before it looks for the next ones, so that one "
        "wake-up serves all that came meanwhile (less CPU per request, each request "
        "answered up to about this much later); 0: every request is served as it comes.",
        minimum=0,
        maximum=10_000,
        read_only=True,
    ),
    ConfigDef(
        "quota.window.num",
        INT,
        11,
        "Samples kept to measure a client's rate against its quota.",
        minimum=1,
        read_only=True,
    ),
    ConfigDef(
        "quota.window.size.seconds",
        INT,
        1,
        "Time span of each quota sample.",
        minimum=1,
        read_only=True,
    ),
    ConfigDef(
        "max.connections",
        INT,
        INT_MAX,
        "Client connections the broker holds at once; past it, accepting waits for one to close.",
        minimum=0,
    ),
    ConfigDef(
        "max.connections.per.ip",
        INT,
        INT_MAX,
        "Client connections from one address; a further one is closed at once.",
        minimum=0,
    ),
    ConfigDef(
        "max.connections.per.ip.overrides",
        S,
        "",
        "Per-address limits overriding max.connections.per.ip: HOST:COUNT,...",
        read_only=True,
    ),
)
