"""A local SparkSession set up for the raftka source: Python workers that can import this
package, every socket on 127.0.0.1, Spark's own logs at WARN."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from raftka.pipeline.source import RaftkaDataSource


class SparkSetupError(RuntimeError):
    """Spark cannot start here (no Java)."""


def _prepare_environment() -> None:
    # Spark starts Python workers with PYSPARK_PYTHON (default: `python3` on PATH, which
    # lacks this virtualenv's packages); this interpreter imports raftka as installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Otherwise Spark binds the machine's outward address and says so in a warning.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    java_home = os.environ.get("JAVA_HOME")
    if not (java_home and Path(java_home, "bin", "java").exists()) and not shutil.which("java"):
        raise SparkSetupError(
            "Spark needs Java 17 or newer: install it (e.g. apt-get install -y "
            "openjdk-17-jdk-headless) or set JAVA_HOME"
        )


def local_session(
    app_name: str,
    *,
    master: str = "local[2]",
    shuffle_partitions: int = 2,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession on this machine with `format("raftka")` registered (an existing one is
    reused, as `getOrCreate` does). Times are in UTC; the web UI is off."""
    _prepare_environment()
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stopTimeout", "30s")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(RaftkaDataSource)
    return spark
