"""`raftka topics|groups|cluster`: admin commands that are Kafka clients (confluent-kafka), so
they work against any Kafka-compatible broker, in the spirit of kafka-topics.sh,
kafka-consumer-groups.sh and rpk."""
