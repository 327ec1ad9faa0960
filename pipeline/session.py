"""A SparkSession set up for the raftka source: Python workers that can import this package,
on this machine (`local[N]`) or on a Spark cluster (`spark://HOST:PORT`, with raftka's
pipeline package shipped to the executors as a zip), Spark's own logs at WARN."""

from __future__ import annotations

import os
import shutil
import sys
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from pyspark.sql import SparkSession

from raftka.pipeline.source import RaftkaDataSource

PYSPARK_PYTHON_CONF = "spark.pyspark.python"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


class SparkSetupError(RuntimeError):
    """Spark cannot start here (no Java)."""


def is_loopback_master(master: str) -> bool:
    """A master whose executors run on this machine: `local…`, or a cluster master on a
    loopback address (a test's or a developer's own standalone cluster)."""
    if master.startswith("local"):
        return True
    host = urlsplit(master.split(",")[0]).hostname
    return host in LOOPBACK_HOSTS


def _prepare_environment(master: str, conf: Mapping[str, str]) -> None:
    # Spark starts Python workers with PYSPARK_PYTHON (default: `python3` on PATH, which
    # lacks this virtualenv's packages); this interpreter imports raftka as installed, unless
    # the caller named another one with spark.pyspark.python (a packed environment's).
    os.environ.setdefault("PYSPARK_PYTHON", conf.get(PYSPARK_PYTHON_CONF, sys.executable))
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Otherwise Spark binds the machine's outward address and says so in a warning. Executors
    # on other machines must reach the driver, so only a loopback master binds 127.0.0.1.
    if is_loopback_master(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    java_home = os.environ.get("JAVA_HOME")
    if not (java_home and Path(java_home, "bin", "java").exists()) and not shutil.which("java"):
        raise SparkSetupError(
            "Spark needs Java 17 or newer: install it (e.g. apt-get install -y "
            "openjdk-17-jdk-headless) or set JAVA_HOME"
        )


def package_zip(directory: str) -> str:
    """`raftka-pipeline.zip` in `directory`: the `raftka.pipeline` package as installed here,
    for `addPyFile`/`--py-files`, so every executor runs the driver's version of the source.
    Its dependencies (confluent-kafka, a compiled extension) come from the workers' Python."""
    import raftka
    import raftka.pipeline

    path = os.path.join(directory, "raftka-pipeline.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.write(Path(raftka.__file__), "raftka/__init__.py")
        for module in sorted(Path(raftka.pipeline.__file__).parent.glob("*.py")):
            archive.write(module, f"raftka/pipeline/{module.name}")
    return path


def local_session(
    app_name: str,
    *,
    master: str = "local[2]",
    shuffle_partitions: int = 2,
    conf: Mapping[str, str] | None = None,
    py_files: Sequence[str] = (),
) -> SparkSession:
    """A SparkSession with `format("raftka")` registered (an existing one is reused, as
    `getOrCreate` does), on this machine by default or on the cluster `master` names, with
    `py_files` shipped to its executors. Times are in UTC; the web UI is off."""
    conf = dict(conf or {})
    _prepare_environment(master, conf)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stopTimeout", "30s")
    )
    if is_loopback_master(master):
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    for path in py_files:  # before registering: a registered source carries the includes
        spark.sparkContext.addPyFile(path)
    spark.dataSource.register(RaftkaDataSource)
    return spark
