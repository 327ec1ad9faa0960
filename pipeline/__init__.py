"""Spark on raftka: `format("raftka")`, a PySpark data source with the options, schema and
offsets of Spark's Kafka source (`pipeline.source`), and the click-stream pipeline that
`scripts/pipeline` runs (`pipeline.clicks`, `pipeline.page_counts`)."""
