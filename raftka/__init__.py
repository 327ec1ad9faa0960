"""raftka, a Kafka-wire-compatible broker with Raft-replicated partition logs."""
