"""A consumer-protocol group's own consumer.session.timeout.ms and
consumer.heartbeat.interval.ms (Kafka 4's group configs) replace the broker-wide values for
that group alone."""

from __future__ import annotations

from test_consumer_protocol_machine import SESSION_MS, Group


def test_a_groups_own_timeouts_replace_the_brokers() -> None:
    g = Group(session_timeout_ms=SESSION_MS)
    own = {"consumer.session.timeout.ms": "60000", "consumer.heartbeat.interval.ms": "9000"}
    g.machine.group_configs = lambda group_id: own if group_id == "g" else {}
    assert g.join("a").heartbeat_interval_ms == 9000
    g.tick(SESSION_MS)
    assert "a" in g.state.members  # the group's 60 s, not the broker's 45 s
    g.tick(60000 - SESSION_MS)
    assert "a" not in g.state.members
    other = g.beat("b", 0, group_id="other")
    assert other.heartbeat_interval_ms == 5000
