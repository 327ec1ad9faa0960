"""The Spark tests' shared local SparkSession (one JVM per test session: starting one takes
10-20 s). Test modules import the `spark` fixture from here; `getOrCreate` hands every
importing module the same session."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from required import missing_client

SPARK_TEST_CONF = {
    # Small data: few tasks, quick no-data batches, no progress bars on the console.
    "spark.default.parallelism": "2",
    "spark.sql.streaming.pollingDelay": "100ms",
    "spark.sql.adaptive.enabled": "false",
}


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local[2] SparkSession with format("raftka") registered, shared by all Spark tests."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        missing_client("pyspark not installed: run scripts/setup")
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        missing_client("java not found: Spark needs Java 17")
    from raftka.pipeline.session import local_session

    session = local_session("raftka-compat", master="local[2]", conf=SPARK_TEST_CONF)
    try:
        yield session
    finally:
        session.stop()
