"""Authenticated Raft traffic between brokers (`raft.auth.secret`): a 3-broker cluster that
shares a secret serves clients; a broker restarted without it, or with another one, is
refused by the others (no votes, no leadership, nothing appended) while the other two keep
committing acks=all writes, and catches up once restarted with the right secret. A raw TCP
client on a Raft port is dropped without effect. With `raft.security.protocol=SSL` the same
holds over TLS, and a broker without TLS on its Raft port is refused. Silent connections
from another address, however many, do not keep a restarted peer out.
"""

from __future__ import annotations

import selectors
import socket
import ssl
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from certs import make_certificates
from clients import consume, create_topic, produce, wait_until
from harness import BrokerProcess, ClusterNode, ClusterProcess
from test_cluster import partition_state, raw_metadata, segment_bytes, wait_replicas_identical

from raftka.broker.config import BrokerConfig
from raftka.broker.server import raft_tls_contexts
from raftka.consensus.codec import encode_hello, encode_messages
from raftka.consensus.types import Message, MessageType

pytestmark = pytest.mark.timeout(300)

SECRET = "6b1f0c52e3d94a7c8f2e0d1b5a9c7e31"
WRONG_SECRET = "0000000000000000000000000000beef"
PARTITIONS = 3


def secured_cluster(cluster_factory: Any, tmp_path: Path) -> tuple[ClusterProcess, Path]:
    secret_file = tmp_path / "raft-secret"
    secret_file.write_text(SECRET + "\n")
    return cluster_factory(config={"raft.auth.secret.file": str(secret_file)}), secret_file


def states(nodes: list[ClusterNode], topic: str) -> dict[int, dict[str, Any]]:
    """partition -> {leader, epoch, ...} as the first of `nodes` reports it."""
    return {p: partition_state(nodes[0].bootstrap, topic, p) for p in range(PARTITIONS)}


def produce_all(bootstrap: str, topic: str, values: list[bytes]) -> None:
    records = [{"value": v, "partition": i % PARTITIONS} for i, v in enumerate(values)]
    result = produce(bootstrap, topic, records, acks="all")
    assert not result.errors, result.errors[:3]


def controller_seen_by(node: ClusterNode) -> int:
    return int(raw_metadata(node.bootstrap, []).controller_id)


def log_text(node: BrokerProcess) -> str:
    return node.log_path.read_text(errors="replace")


def test_a_broker_without_the_cluster_secret_cannot_rejoin(
    cluster_factory: Any, tmp_path: Path
) -> None:
    cluster, secret_file = secured_cluster(cluster_factory, tmp_path)
    topic = f"raft-auth-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, partitions=PARTITIONS, replication_factor=3)
    wait_until(
        lambda: all(len(s["isr"]) == 3 for s in states(cluster.nodes, topic).values()),
        30,
        "ISR of 3 on every partition",
    )
    acked = [b"before-%d" % i for i in range(300)]
    produce_all(cluster.bootstrap, topic, acked)

    victim = cluster.node(3)
    survivors = [n for n in cluster.nodes if n is not victim]
    survivors_bootstrap = ",".join(n.bootstrap for n in survivors)
    victim.stop()
    settled = wait_until(
        lambda: (
            (s := states(survivors, topic)) and all(p["leader"] in (1, 2) for p in s.values()) and s
        ),
        30,
        "every partition led by node 1 or 2",
    )
    controller = controller_seen_by(survivors[0])
    victim_segments = {p: segment_bytes(victim, topic, p) for p in range(PARTITIONS)}

    right_config = dict(victim.config)
    phases = [
        # (name, victim's config, what the survivors log, what the victim logs)
        (
            "no secret",
            {k: v for k, v in right_config.items() if k != "raft.auth.secret.file"},
            "(claiming node 3) sent raft traffic without authenticating: it has no"
            " raft.auth.secret",
            "this broker has no raft.auth.secret",
        ),
        (
            "wrong secret",
            {
                **{k: v for k, v in right_config.items() if k != "raft.auth.secret.file"},
                "raft.auth.secret": WRONG_SECRET,
            },
            "(claiming node 3) did not prove this cluster's secret: its raft.auth.secret"
            " differs from this broker's",
            "did not prove this cluster's secret: its raft.auth.secret differs",
        ),
    ]
    for name, config, survivors_say, victim_says in phases:
        victim.config = config
        victim.spawn()
        wait_until(
            lambda sv=survivors_say, vs=victim_says: (
                all(sv in log_text(n) for n in survivors) and vs in log_text(victim)
            ),
            30,
            f"{name}: the refusal in every broker's log",
        )
        values = [b"%s-%d" % (name.encode(), i) for i in range(300)]
        produce_all(survivors_bootstrap, topic, values)  # acks=all on the other two
        acked += values
        time.sleep(3)  # several election timeouts in which the victim could campaign
        assert victim.is_running(), victim.log_tail(40)
        now = states(survivors, topic)
        for p, state in now.items():
            assert (state["leader"], state["epoch"]) == (
                settled[p]["leader"],
                settled[p]["epoch"],
            ), f"{name}: partition {p} was {settled[p]}, now {state}"
        assert [controller_seen_by(n) for n in survivors] == [controller, controller]
        # Cut off from the controller, the refused broker never registers, so it answers no
        # client at all rather than from metadata older than the cluster's.
        with pytest.raises(OSError):  # socket.timeout (TimeoutError) or a refused connection
            raw_metadata(victim.bootstrap, [topic], timeout=2.0)
        assert "registered with the cluster" not in log_text(victim).split("=== harness")[-1]
        for p in range(PARTITIONS):
            assert segment_bytes(victim, topic, p) == victim_segments[p], (
                f"{name}: the refused broker appended to {topic}-{p}"
            )
        victim.stop()
        print(f"\n{name}: refused; {len(values)} acks=all records committed on nodes 1 and 2")

    victim.config = right_config
    victim.start()
    for p in range(PARTITIONS):
        wait_until(
            lambda p=p: len(partition_state(survivors[0].bootstrap, topic, p)["isr"]) == 3,
            30,
            f"node 3 back in the ISR of {topic}-{p}",
        )
        wait_replicas_identical(cluster, topic, p)
    got = consume(victim.bootstrap, topic, range(PARTITIONS), timeout=60)
    values = {m.value() for msgs in got.values() for m in msgs}
    missing = [v for v in acked if v not in values]
    assert not missing, f"{len(missing)} acked records missing, e.g. {missing[:3]}"
    assert secret_file.read_text().strip() == SECRET


def test_raw_tcp_on_a_raft_port_is_dropped_without_effect(
    cluster_factory: Any, tmp_path: Path
) -> None:
    cluster, _ = secured_cluster(cluster_factory, tmp_path)
    topic = f"raft-raw-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, partitions=PARTITIONS, replication_factor=3)
    before = wait_until(
        lambda: (
            (s := states(cluster.nodes, topic))
            and all(len(p["isr"]) == 3 for p in s.values())
            and s
        ),
        30,
        "ISR of 3 on every partition",
    )
    controller = controller_seen_by(cluster.nodes[0])
    huge_term = 10**9
    groups = ["__cluster_metadata-0", *(f"{topic}-{p}" for p in range(PARTITIONS))]
    for target in cluster.nodes:
        sender = 1 if target.node_id != 1 else 2
        # What a forged peer would say: take over every group with a huge term.
        forged = encode_hello(sender) + b"".join(
            encode_messages(
                [
                    Message(g, MessageType.HEARTBEAT, sender, target.node_id, huge_term)
                    for g in groups
                ]
                + [
                    Message(g, MessageType.TIMEOUT_NOW, sender, target.node_id, huge_term)
                    for g in groups
                ]
            )
        )
        for attack in (bytes(range(256)) * 64, forged):
            with socket.create_connection(("127.0.0.1", target.raft_port), timeout=5) as raw:
                raw.settimeout(10)
                try:
                    raw.sendall(attack)
                    while raw.recv(65536):
                        pass  # the broker's handshake opening, then the close
                except ConnectionResetError:
                    pass  # closed with our bytes unread
    values = [b"after-%d" % i for i in range(300)]
    produce_all(cluster.bootstrap, topic, values)
    after = states(cluster.nodes, topic)
    for p, state in after.items():
        assert (state["leader"], state["epoch"]) == (before[p]["leader"], before[p]["epoch"])
    assert [controller_seen_by(n) for n in cluster.nodes] == [controller] * 3
    for node in cluster.nodes:
        text = log_text(node)
        assert "refused inbound connection" in text, node.log_tail(40)
        assert "sent raft traffic without authenticating" in text, node.log_tail(40)
    got = consume(cluster.bootstrap, topic, range(PARTITIONS), timeout=60)
    assert sum(len(m) for m in got.values()) == len(values)


def test_raft_over_tls_serves_and_refuses_plaintext_peers(
    cluster_factory: Any, tmp_path: Path
) -> None:
    certs = make_certificates(tmp_path)
    secret_file = tmp_path / "raft-secret"
    secret_file.write_text(SECRET)
    tls_config = {
        "raft.security.protocol": "SSL",
        "ssl.keystore.location": str(certs.broker_keystore),
        "ssl.truststore.location": str(certs.ca),
        "raft.auth.secret.file": str(secret_file),
    }
    cluster = cluster_factory(config=tls_config)
    topic = f"raft-tls-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, partitions=PARTITIONS, replication_factor=3)
    wait_until(
        lambda: all(len(s["isr"]) == 3 for s in states(cluster.nodes, topic).values()),
        30,
        "ISR of 3 on every partition",
    )
    acked = [b"tls-%d" % i for i in range(300)]
    produce_all(cluster.bootstrap, topic, acked)

    target = cluster.node(1)
    # Plaintext Raft bytes to a TLS Raft port: dropped.
    with socket.create_connection(("127.0.0.1", target.raft_port), timeout=5) as raw:
        raw.settimeout(10)
        try:
            raw.sendall(encode_hello(2))
            while raw.recv(65536):
                pass
        except ConnectionResetError:
            pass
    # TLS with a certificate the truststore accepts, but no secret: still refused.
    client = ssl.create_default_context(cafile=str(certs.ca))
    client.load_cert_chain(str(certs.client_cert), str(certs.client_key))
    with (
        socket.create_connection(("127.0.0.1", target.raft_port), timeout=5) as raw,
        client.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.settimeout(10)
        tls.sendall(encode_hello(2))
        try:
            while tls.recv(65536):
                pass  # the broker's AUTH_HELLO, then the close
        except (ConnectionResetError, ssl.SSLError):
            pass
    # TLS without a client certificate: the handshake fails, nothing of Raft is heard.
    anonymous = ssl.create_default_context(cafile=str(certs.ca))
    heard = b""
    with socket.create_connection(("127.0.0.1", target.raft_port), timeout=5) as raw:
        try:
            with anonymous.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                tls.settimeout(10)
                while chunk := tls.recv(65536):
                    heard += chunk
        except (ConnectionResetError, ssl.SSLError):
            pass
    assert heard == b""
    # The dialling side checks the peer's host name, and both sides want a certificate.
    server, client = raft_tls_contexts(BrokerConfig(tls_config, environ={})) or (None, None)
    assert server is not None and client is not None
    assert server.verify_mode == client.verify_mode == ssl.CERT_REQUIRED
    assert client.check_hostname
    text = log_text(target)
    assert "TLS handshake with 127.0.0.1:" in text, target.log_tail(40)
    assert "(claiming node 2) sent raft traffic without authenticating" in text

    victim = cluster.node(3)
    survivors = [n for n in cluster.nodes if n is not victim]
    victim.stop()
    victim.config = {**tls_config, "raft.security.protocol": "PLAINTEXT"}
    victim.spawn()
    wait_until(
        lambda: (
            "refused inbound connection: TLS handshake with" in log_text(cluster.node(2))
            and "not the raft authentication handshake" in log_text(victim)
        ),
        30,
        "the TLS refusal in node 2's log and node 3's",
    )
    values = [b"plaintext-peer-%d" % i for i in range(300)]
    produce_all(",".join(n.bootstrap for n in survivors), topic, values)
    acked += values
    victim.stop()
    victim.config = tls_config
    victim.start()
    for p in range(PARTITIONS):
        wait_until(
            lambda p=p: len(partition_state(survivors[0].bootstrap, topic, p)["isr"]) == 3,
            30,
            f"node 3 back in the ISR of {topic}-{p}",
        )
        wait_replicas_identical(cluster, topic, p)
    got = consume(cluster.bootstrap, topic, range(PARTITIONS), timeout=60)
    values_read = {m.value() for msgs in got.values() for m in msgs}
    assert not [v for v in acked if v not in values_read]


def test_describe_configs_never_shows_the_secret(broker_factory: Any) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource

    plain_users = f"admin:{SECRET}-plain"
    broker = broker_factory(config={"raft.auth.secret": SECRET, "sasl.plain.users": plain_users})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource("broker", "1")
    entries = admin.describe_configs([resource])[resource].result(timeout=10)
    entry = entries["raft.auth.secret"]
    assert entry.is_sensitive and entry.value is None
    # Nor does any synonym (librdkafka asks for them) or any other entry.
    assert entry.synonyms and all(s.value is None for s in entry.synonyms.values())
    shown = [
        value
        for e in entries.values()
        for value in (e.value, *(s.value for s in e.synonyms.values()))
        if value is not None
    ]
    assert not [v for v in shown if SECRET in v], "a secret config's value was described"
    assert entries["raft.security.protocol"].value == "PLAINTEXT"
    logged = log_text(broker).split("\n", 1)[1]  # past the harness's command line
    assert SECRET not in logged


class SilentFlood:
    """`count` connections from `source` to `address` that never say a word; each one the
    broker closes is opened again (at most every 0.1 s), as an attacker would."""

    def __init__(self, address: tuple[str, int], source: str, count: int) -> None:
        self.address, self.source, self.count = address, source, count
        self.closed_by_broker = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> SilentFlood:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        with selectors.DefaultSelector() as selector:

            def open_one() -> None:
                raw = socket.create_connection(self.address, 5, (self.source, 0))
                raw.setblocking(False)
                selector.register(raw, selectors.EVENT_READ)

            for _ in range(self.count):
                open_one()
            while not self._stop.is_set():
                closed = 0
                for key, _ in selector.select(0.2):
                    raw = key.fileobj
                    assert isinstance(raw, socket.socket)
                    try:
                        data = raw.recv(65536)  # the broker's handshake opening, or the close
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if not data:
                        selector.unregister(raw)
                        raw.close()
                        closed += 1
                if closed:
                    self.closed_by_broker += closed
                    time.sleep(0.1)
                    for _ in range(closed):
                        open_one()
            for key in list(selector.get_map().values()):
                key.fileobj.close()  # type: ignore[union-attr]


def test_silent_connections_from_another_address_do_not_keep_a_peer_out(
    cluster_factory: Any, tmp_path: Path
) -> None:
    cluster, _ = secured_cluster(cluster_factory, tmp_path)
    topic = f"raft-flood-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, partitions=PARTITIONS, replication_factor=3)
    wait_until(
        lambda: all(len(s["isr"]) == 3 for s in states(cluster.nodes, topic).values()),
        30,
        "ISR of 3 on every partition",
    )
    target, peer = cluster.node(1), cluster.node(2)
    with SilentFlood(("127.0.0.1", target.raft_port), "127.0.0.2", 100) as flood:
        peer.stop()
        peer.start()
        for p in range(PARTITIONS):
            wait_until(
                lambda p=p: len(partition_state(target.bootstrap, topic, p)["isr"]) == 3,
                60,
                f"node 2 back in the ISR of {topic}-{p}",
            )
        values = [b"flooded-%d" % i for i in range(300)]
        produce_all(cluster.bootstrap, topic, values)
        assert flood.closed_by_broker > 0
    assert "refused inbound connection from 127.0.0.2:" in log_text(target)
    assert "already 8 from that address" in log_text(target), target.log_tail(40)
    got = consume(peer.bootstrap, topic, range(PARTITIONS), timeout=60)
    assert sum(len(m) for m in got.values()) == len(values)
