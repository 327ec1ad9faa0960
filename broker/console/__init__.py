"""The web console (`console.listen`): server-rendered pages of the cluster, its topics,
their messages and the consumer groups, read through this broker's own API handlers."""
