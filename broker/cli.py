"""The `raftka` command line."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

import trio

from raftka.broker.admin.cli import ADMIN_COMMANDS, add_admin_commands, run_admin_command
from raftka.broker.cluster.controller import MetadataApplyError
from raftka.broker.config import BrokerConfig, ConfigError, load_config_file, parse_assignments
from raftka.broker.http_endpoint import EndpointBindError
from raftka.broker.log_output import LOG_FORMATS, configure_logging
from raftka.broker.server import Broker, ClusterSpec, Listener

logger = logging.getLogger("raftka")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raftka", description="A Kafka-wire-compatible broker with Raft-replicated logs."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run a broker until SIGTERM/SIGINT")
    serve.add_argument(
        "--listen",
        default="127.0.0.1:9092",
        help="HOST:PORT for Kafka clients (default %(default)s)",
    )
    serve.add_argument(
        "--data-dir", default="./data", type=Path, help="partition logs and metadata"
    )
    serve.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a Kafka broker config, e.g. log.segment.bytes=1048576 (repeatable)",
    )
    serve.add_argument(
        "--config-file", type=Path, help="a Kafka-style .properties file or a .toml file"
    )
    serve.add_argument("--node-id", type=int, help="this broker's id (Kafka's node.id, default 1)")
    serve.add_argument(
        "--raft-listen", metavar="HOST:PORT", help="address for Raft traffic from other brokers"
    )
    serve.add_argument(
        "--peers",
        default="",
        metavar="ID@HOST:PORT,...",
        help="every voter's --raft-listen address, this broker's included",
    )
    serve.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (default INFO)")
    serve.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="text lines, or one JSON object per line with the node, partition, group or "
        "peer an event concerns (default %(default)s)",
    )
    commands.add_parser("configs", help="list every broker and topic config with its default")
    add_admin_commands(commands)
    return parser


async def _serve(broker: Broker) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(broker.run)

            async for signum in signals:
                logger.info("raftka: %s received, shutting down", signal.Signals(signum).name)
                await broker.hand_over_leadership()
                nursery.cancel_scope.cancel()
                break


def _print_configs() -> None:
    from raftka.broker.config import BROKER_CONFIGS, TOPIC_CONFIGS

    for title, table in (("broker configs", BROKER_CONFIGS), ("topic configs", TOPIC_CONFIGS)):
        print(f"# {title}")
        for definition in table.values():
            default = definition.render(definition.default)
            print(f"{definition.name}={'' if default is None else default}  # {definition.doc}")


def _first(group: BaseExceptionGroup[EndpointBindError]) -> BaseException:
    first: BaseException = group
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "configs":
        _print_configs()
        return 0
    if args.command in ADMIN_COMMANDS:
        return run_admin_command(args)
    try:
        file_values = load_config_file(args.config_file) if args.config_file else None
        overrides = parse_assignments(args.config)
        if args.node_id is not None:
            overrides["node.id"] = str(args.node_id)
        config = BrokerConfig(overrides, file_values=file_values)
        listener = Listener.parse(args.listen)
        peers = ClusterSpec.parse_peers(args.peers)
        raft_listen = Listener.parse(args.raft_listen) if args.raft_listen else None
        node_id = config.get_int("node.id")
        if peers and node_id not in peers:
            raise ValueError(f"--peers must include this broker's node id {node_id}")
        if peers and raft_listen is None:
            raft_listen = peers[node_id]
        cluster = ClusterSpec(raft_listen=raft_listen, peers=peers)
    except (ConfigError, ValueError, OSError) as exc:
        print(f"raftka: {exc}", file=sys.stderr)
        return 2
    try:
        configure_logging(args.log_level, args.log_format, node_id)
    except ValueError as exc:  # an unknown --log-level
        print(f"raftka: --log-level: {exc}", file=sys.stderr)
        return 2
    json_logs = args.log_format == "json"
    try:
        broker = Broker(config, listener, args.data_dir, cluster)
    except ValueError as exc:
        print(f"raftka: {exc}", file=sys.stderr)
        return 2
    try:
        trio.run(_serve, broker)
    except OSError as exc:
        return _stopped(f"cannot serve on {args.listen}: {exc}", json_logs)
    except BaseExceptionGroup as group:
        bind_errors = group.subgroup(EndpointBindError)
        if bind_errors is not None:
            return _stopped(f"metrics.listen: {_first(bind_errors)}", json_logs)
        if group.subgroup(MetadataApplyError) is None:
            if json_logs:
                # A traceback printed by the interpreter would be the one line not in JSON.
                logger.critical("raftka: stopped by an unexpected error", exc_info=group)
                return 1
            raise
        # The controller logged the record, its offset and the cause as critical.
        return _stopped("stopped: a metadata record could not be applied", json_logs)
    return 0


def _stopped(reason: str, json_logs: bool) -> int:
    """Report why the broker stopped; with JSON logs as a log line, so stderr stays JSON."""
    if json_logs:
        logger.error("raftka: %s", reason)
    else:
        print(f"raftka: {reason}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
