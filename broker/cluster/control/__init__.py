"""The controller's decisions, one module per area, as Kafka's control managers are.

Each function takes the metadata image (and what else it needs: a new topic's id, the
quorum's members) and a command, and returns a `ControllerResult`: the records to append and
the answer, with Kafka's error code when the command is refused. They do no I/O and need no
trio; `cluster.controller.Controller` appends the records through the metadata Raft group
and applies them to the image.

- `topics`: CreateTopics, DeleteTopics, CreatePartitions (ReplicationControlManager)
- `configs`: topic overrides and dynamic broker configs (ConfigurationControlManager)
- `reassignment`: starting, cancelling and completing partition moves
- `brokers`: registering and unregistering brokers (ClusterControlManager)
- `voters`: the metadata quorum's voter changes, as membership steps
- `acls`, `scram`, `quotas`, `producer_ids`: ACL bindings, SCRAM credentials, client quotas,
  the producer-id floor
"""
