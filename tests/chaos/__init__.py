"""Jepsen-style fault tests for a raftka cluster.

Brokers run in their own network namespaces on a private bridge (`netns`); nemeses kill,
pause, partition, fill the disk of and restart them (`nemesis`) while idempotent producers
and consumers record every operation in a history (`workload`, `history`); the checker
(`checker`) looks for the anomalies Jepsen looks for in Kafka, and `plot` draws throughput
and latency with the fault windows shaded. `runner.run_chaos` ties one run together;
`python -m tests.chaos` (`scripts/chaos`) is the command line.
"""
