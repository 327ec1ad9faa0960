"""`python -m raftka.pipeline generate|run ...`, which `scripts/pipeline` runs."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import tempfile

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/pipeline",
        description="Click events into raftka, and a Spark job counting page views per minute.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    gen = commands.add_parser("generate", help="produce JSON click events to topic 'events'")
    gen.add_argument("--rate", type=float, required=True, help="events per second (wall time)")
    gen.add_argument("--duration", type=float, required=True, help="seconds to run")
    gen.add_argument(
        "--speedup", type=float, default=1.0, help="event time runs this many times faster"
    )
    gen.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT")
    gen.add_argument("--users", type=int, default=50, help="distinct users (default 50)")
    gen.add_argument("--seed", type=int, help="random seed, for a reproducible stream")
    gen.add_argument(
        "--start",
        help="event time of the first event (ISO 8601, UTC); default: now, or after the "
        "newest event already in the topic",
    )

    run = commands.add_parser("run", help="the Structured Streaming job (Ctrl-C stops it)")
    run.add_argument("--checkpoint", required=True, metavar="DIR", help="Spark checkpoint")
    run.add_argument("--source", choices=("raftka", "kafka"), default="raftka")
    run.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT")
    bounded = run.add_mutually_exclusive_group()
    bounded.add_argument(
        "--available-now",
        "--once",
        action="store_true",
        help="process the events present now, emit what that finishes, and stop",
    )
    bounded.add_argument(
        "--duration",
        type=float,
        help="stop this many seconds after the first micro-batch finished",
    )
    run.add_argument(
        "--trigger-interval", default="5 seconds", help="micro-batch interval (default 5 s)"
    )
    run.add_argument(
        "--master",
        default="local[2]",
        help="Spark master (default local[2]); with a cluster's (spark://HOST:PORT, yarn, "
        "k8s://…) the raftka source is shipped to the executors as a zip (--py-files)",
    )
    run.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting, as spark-submit's --conf (repeatable), e.g. "
        "spark.executor.memory=1g or spark.pyspark.python=./environment/bin/python",
    )
    run.add_argument(
        "--packages",
        help="Maven coordinates for spark.jars.packages, e.g. Spark's Kafka connector "
        "for --source kafka",
    )
    run.add_argument("--jars", help="comma-separated jars for spark.jars")
    run.add_argument(
        "--log-file",
        metavar="FILE",
        help="where Spark's, py4j's and the job's own log goes (default: the checkpoint "
        "directory's path plus .log)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "generate":
        from raftka.pipeline.clicks import generate, parse_ts

        try:
            result = generate(
                args.bootstrap,
                rate=args.rate,
                duration_s=args.duration,
                speedup=args.speedup,
                users=args.users,
                seed=args.seed,
                start_ms=parse_ts(args.start) if args.start else None,
            )
        except KeyboardInterrupt:
            print("generate: interrupted", file=sys.stderr)
            return 130
        return 0 if result.failed == 0 else 1

    return run(args)


def run(args: argparse.Namespace) -> int:
    """`run`: the job's own lines on stdout; a stop prints one line and returns 0, a failure
    prints one line naming it and the log file to the terminal's stderr and returns non-zero.
    Everything else written to stderr (Spark, py4j, Python workers) lands in the log file."""
    from raftka.pipeline.clicks import EVENTS_PARTITIONS, EVENTS_TOPIC, ensure_topic
    from raftka.pipeline.page_counts import COUNTS_TOPIC, PageCountsJob, PipelineError
    from raftka.pipeline.run_log import default_log_path, divert_stderr, first_line
    from raftka.pipeline.session import SparkSetupError, local_session, package_zip

    conf = {}
    for setting in args.conf:
        key, sep, value = setting.partition("=")
        if not sep or not key.strip():
            print(f"run: --conf {setting!r} is not KEY=VALUE", file=sys.stderr)
            return 2
        conf[key.strip()] = value
    if args.packages:
        conf["spark.jars.packages"] = args.packages
    if args.jars:
        conf["spark.jars"] = args.jars
    checkpoint = os.path.abspath(args.checkpoint)
    log_path = os.path.abspath(args.log_file or default_log_path(checkpoint))
    terminal = divert_stderr(log_path)
    log = logging.getLogger("raftka.pipeline")

    def fail(what: str, code: int) -> int:
        log.error("run failed: %s", what)
        print(f"run: {what} (log: {log_path})", file=terminal)
        return code

    # Until the job's own handler is in place, a SIGTERM stops the run as Ctrl-C does.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    spark = None
    ship = None if args.master.startswith("local") else tempfile.TemporaryDirectory()
    try:
        # The broker first: no point starting Spark for a broker that is not there.
        ensure_topic(args.bootstrap, EVENTS_TOPIC, EVENTS_PARTITIONS)
        ensure_topic(args.bootstrap, COUNTS_TOPIC, 1)
        # On a cluster, the executors run the driver's version of the source: a zip of it,
        # shipped as spark-submit's --py-files ships one.
        py_files = [package_zip(ship.name)] if ship else []
        spark = local_session(
            "raftka-page-counts", master=args.master, conf=conf, py_files=py_files
        )
        job = PageCountsJob(spark, args.bootstrap, checkpoint, source=args.source)
        job.run(
            available_now=args.available_now,
            duration_s=args.duration,
            interval=args.trigger_interval,
        )
    except KeyboardInterrupt:
        print("run: interrupted before the query started", flush=True)
    except SystemExit as exc:
        if isinstance(exc.code, int | None):
            raise
        return fail(first_line(str(exc.code)), 1)
    except (PipelineError, SparkSetupError) as exc:
        return fail(first_line(str(exc)), 2)
    except Exception as exc:
        log.exception("run failed")
        return fail(f"{type(exc).__name__}: {first_line(str(exc))}", 1)
    finally:
        if spark is not None:
            try:
                spark.stop()
            except Exception:
                log.warning("while stopping Spark", exc_info=True)
        if ship is not None:
            ship.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
