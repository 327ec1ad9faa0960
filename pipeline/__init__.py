"""Spark on raftka: `format("raftka")`, a PySpark data source with the options, schema and
offsets of Spark's Kafka source (`pipeline.source`), and the click-stream pipeline that
`scripts/pipeline` runs (`pipeline.clicks`, `pipeline.page_counts`)."""

import sys

try:  # every reader and writer needs it: say so where Spark's Python workers report it
    import confluent_kafka  # noqa: F401
except ModuleNotFoundError as exc:
    raise ModuleNotFoundError(
        f"No module named {exc.name!r} in {sys.executable}, the Python running raftka's "
        "Spark source here: set spark.pyspark.python (or PYSPARK_PYTHON) to an interpreter "
        "with raftka's dependencies, such as the virtualenv scripts/setup makes or a packed "
        "environment shipped with spark.archives (see docs/spark.md)",
        name=exc.name,
    ) from None
