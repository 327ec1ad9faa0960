"""Operator and developer tools shipped with raftka, each run as
`python -m raftka.broker.tools.<name>` (`scripts/` has a wrapper for each):

- `bench`: producer and consumer throughput, and end-to-end latency, against any
  Kafka-compatible broker (`bench_workers`, `bench_runs` and `bench_report` are its parts);
- `shards_experiment`: one broker process against a 2-node cluster on one machine;
- `startup_time`: how long a broker with many partitions takes to start.

`processes` starts broker processes for them, `procfs` reads a process's CPU and memory.
Nothing here is imported by the broker itself.
"""
