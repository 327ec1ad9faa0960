"""The `raftka` command line."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import logging
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from raftka.broker import startup_signals
from raftka.broker.admin.cli import ADMIN_COMMANDS, add_admin_commands, run_admin_command
from raftka.broker.config import BrokerConfig, ConfigError, load_config_file, parse_assignments
from raftka.broker.config.kraft_configs import COMBINED_ROLES
from raftka.broker.log_output import LOG_FORMATS, configure_logging

# The broker itself (and trio) is imported by the commands that serve: an admin command
# (`raftka topics list`) does not pay for loading it, about 40% of its start.
if TYPE_CHECKING:
    from collections.abc import Sequence

    from raftka.broker.server import Broker, Listener

logger = logging.getLogger("raftka")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raftka", description="A Kafka-wire-compatible broker with Raft-replicated logs."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run a broker until SIGTERM/SIGINT")
    serve.add_argument(
        "--listen",
        help="HOST:PORT of a PLAINTEXT listener for Kafka clients, served in addition to "
        "the `listeners` config if that is set (default: the `listeners` config, "
        "PLAINTEXT://127.0.0.1:9092)",
    )
    serve.add_argument(
        "--data-dir",
        type=Path,
        help="partition logs and metadata, one directory (default: the `log.dirs` config, "
        "else `log.dir`, ./data)",
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
        help="the brokers' --raft-listen addresses, this broker's included: the metadata"
        " voters at the cluster's first start, afterwards only where to reach them (the voter"
        " set the metadata log records wins)",
    )
    serve.add_argument(
        "--join",
        action="store_true",
        help="join a running cluster: this broker is not a voter of the --peers it names; it"
        " registers, replicates the metadata as an observer and hosts no partitions until"
        " they are reassigned to it (needs --cluster-id on its first start)",
    )
    serve.add_argument(
        "--cluster-id",
        metavar="ID",
        help="the cluster's id (`raftka cluster status` shows it) instead of one derived from"
        " --peers; a data directory of another cluster is refused",
    )
    serve.add_argument(
        "--shards",
        type=int,
        metavar="N",
        help="run N broker processes on this host as one cluster (one per core): node ids, "
        "Kafka, Raft and metrics.listen ports counted up from the given ones, data in "
        "DATA_DIR/shard-ID, broker.rack = host name; the first shard votes on the cluster "
        "metadata, the others observe it",
    )
    serve.add_argument(
        "--hosts",
        default="",
        metavar="HOST:PORT,...",
        help="with --shards: the hosts of a cluster of several, each as its first shard's Raft "
        "address, in the same order on every host, this one's (its --raft-listen) included; "
        "every host runs the same --shards and --node-id, host j's shard i is node "
        "NODE_ID + j*N + i, and each host's first shard votes on the cluster metadata",
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


async def _run_broker(broker: Broker) -> None:
    """`broker.run`, with the garbage collector settled once the broker serves."""
    import trio

    from raftka.broker.collector import settle_after_start

    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        settle_after_start()


def _stopped_while_starting(broker: Broker) -> bool:
    """Close `broker` without serving if a SIGTERM came while it was starting."""
    if not startup_signals.requested():
        return False
    logger.info("raftka: SIGTERM received while starting, shutting down")
    broker.close()
    return True


async def _serve(broker: Broker) -> None:
    import trio

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        if _stopped_while_starting(broker):
            return
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_run_broker, broker)

            async for signum in signals:
                logger.info("raftka: %s received, shutting down", signal.Signals(signum).name)
                await broker.hand_over_leadership()
                nursery.cancel_scope.cancel()
                break


# A listener's address is taken, not this host's, or a privileged port.
BIND_ERRNOS = frozenset({errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES})
RAFT_PORT_OFFSET = 10000  # --shards without --raft-listen: Raft port = Kafka port + this


def shard_commands(
    shards: int,
    listen: Listener,
    raft_listen: Listener | None,
    first_node_id: int,
    log_dirs: list[Path],
    config: BrokerConfig,
    passthrough: list[str],
    rack: str,
    hosts: Sequence[Listener] = (),
) -> list[tuple[int, list[str]]]:
    """(node id, argv) of each shard `raftka serve --shards N` starts.

    Shard i (from 0) is node `first_node_id + i` on Kafka port `listen.port + i` and Raft port
    `raft_listen.port + i` (default: Kafka port + 10000), with data in `<dir>/shard-<id>` of each
    log directory, every shard listed in `--peers` and the first the only metadata voter
    (`controller.quorum.voters`), the others its observers; `broker.rack` is `rack` unless
    configured, and a configured `metrics.listen` (and `console.listen`) port is counted up
    like the others.

    With `hosts` (`--hosts`: every host's first Raft address, this one's included, in one
    order on every host) the shards of all hosts form one cluster: host j's shard i is node
    `first_node_id + j * shards + i` at Raft address `hosts[j]` + i, every shard of every
    host is in `--peers`, and each host's first shard is a metadata voter.
    `passthrough` (configs, config file, logging options) goes to every shard. Raises
    ValueError naming what cannot be split across shards.
    """
    from raftka.broker.server import Listener

    if shards < 1:
        raise ValueError(f"--shards must be at least 1, got {shards}")
    if config.get_optional_str("controller.quorum.voters"):
        raise ValueError(
            "controller.quorum.voters cannot be given with --shards: the first shard is the "
            "metadata voter and the others observe it; start the shards one by one with "
            "--node-id and --peers to choose other voters"
        )
    advertised = _advertised_base(config.get_optional_str("advertised.listeners"))
    raft_base = raft_listen or Listener(listen.host, listen.port + RAFT_PORT_OFFSET)
    metrics = config.get_str("metrics.listen")
    metrics_base = Listener.parse(metrics) if metrics else None
    console = config.get_str("console.listen")
    console_base = Listener.parse(console) if console else None
    bases = {"--listen": listen, "--raft-listen": raft_base}
    if metrics_base is not None:
        bases["metrics.listen"] = metrics_base
    # A console on the metrics port shares each shard's metrics port.
    if console_base is not None and console_base != metrics_base:
        bases["console.listen"] = console_base
    taken: dict[int, str] = {}
    for name, base in bases.items():
        if base.port == 0 or base.port + shards - 1 > 65535:
            raise ValueError(
                f"{name} port {base.port}: --shards {shards} needs ports {base.port} to "
                f"{base.port + shards - 1}, each in 1-65535"
            )
        for port in range(base.port, base.port + shards):
            if port in taken:
                raise ValueError(
                    f"{name} and {taken[port]} would both use port {port} with --shards "
                    f"{shards}; give {name} a port range that does not overlap"
                )
            taken[port] = name
    host_bases = list(hosts) or [raft_base]
    this_host = _this_host(host_bases, raft_base, shards)
    # Host j's shard i is node first_node_id + j * shards + i: the same on every host.
    peers = ",".join(
        f"{first_node_id + j * shards + i}@{base.host}:{base.port + i}"
        for j, base in enumerate(host_bases)
        for i in range(shards)
    )
    # One metadata voter per host, its first shard; the others observe the metadata quorum.
    voters = ",".join(
        f"{first_node_id + j * shards}@{base.host}:{base.port}" for j, base in enumerate(host_bases)
    )
    node_ids = [first_node_id + this_host * shards + i for i in range(shards)]
    commands = []
    for i, node_id in enumerate(node_ids):
        argv = [sys.executable, "-m", "raftka.broker", "serve", *passthrough]
        argv += ["--node-id", str(node_id), "--peers", peers]
        argv += ["--config", f"controller.quorum.voters={voters}"]
        argv += ["--listen", f"{listen.host}:{listen.port + i}"]
        argv += ["--raft-listen", f"{raft_base.host}:{raft_base.port + i}"]
        shard_dirs = [str(d / f"shard-{node_id}") for d in log_dirs]
        if len(shard_dirs) == 1:
            argv += ["--data-dir", shard_dirs[0]]
        else:
            argv += ["--config", f"log.dirs={','.join(shard_dirs)}"]
        if config.get_optional_str("broker.rack") is None:
            argv += ["--config", f"broker.rack={rack}"]
        if advertised is not None:
            prefix, base = advertised
            argv += ["--config", f"advertised.listeners={prefix}{base.host}:{base.port + i}"]
        if metrics_base is not None:
            argv += ["--config", f"metrics.listen={metrics_base.host}:{metrics_base.port + i}"]
        if console_base is not None:
            argv += ["--config", f"console.listen={console_base.host}:{console_base.port + i}"]
        commands.append((node_id, argv))
    return commands


def _advertised_base(text: str | None) -> tuple[str, Listener] | None:
    """`advertised.listeners` as given to `--shards`: one address, whose port is counted up
    per shard like --listen's (the listener's `NAME://` kept); ValueError for several."""
    from raftka.broker.server import Listener

    entries = [e.strip() for e in (text or "").split(",") if e.strip()]
    if not entries:
        return None
    if len(entries) > 1:
        raise ValueError(
            f"advertised.listeners={text}: with --shards give one address, HOST:PORT, whose "
            "port is counted up per shard like --listen's; start the shards one by one with "
            "--node-id and --peers for several listeners"
        )
    name, sep, _address = entries[0].rpartition("://")
    return (f"{name}://" if sep else ""), Listener.parse(entries[0])


def _this_host(hosts: Sequence[Listener], raft_base: Listener, shards: int) -> int:
    """The index of this host's first Raft address in `hosts` (`--hosts`); ValueError when it
    is missing, or when two hosts' Raft port ranges are the same or overlap."""
    listed = ",".join(f"{h.host}:{h.port}" for h in hosts)
    for j, host in enumerate(hosts):
        if host.port == 0 or host.port + shards - 1 > 65535:
            raise ValueError(
                f"--hosts entry {host.host}:{host.port}: --shards {shards} needs Raft ports "
                f"{host.port} to {host.port + shards - 1}, each in 1-65535"
            )
        for other in hosts[:j]:
            if other.host == host.host and abs(other.port - host.port) < shards:
                raise ValueError(
                    f"--hosts entries {other.host}:{other.port} and {host.host}:{host.port} "
                    f"would share Raft ports with --shards {shards}; give each host its own "
                    "address or ports at least --shards apart"
                )
    matches = [j for j, host in enumerate(hosts) if host == raft_base]
    if not matches:
        raise ValueError(
            f"this host's first Raft address {raft_base.host}:{raft_base.port} (--raft-listen, "
            f"else the --listen port + {RAFT_PORT_OFFSET}) is not in --hosts {listed}: list "
            "every host's, this one's included, in the same order on every host"
        )
    return matches[0]


def _die_with_parent() -> None:
    """Runs in a shard before exec: SIGTERM it if the launcher dies (Linux; else nothing)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _run_shards(commands: list[tuple[int, list[str]]]) -> int:
    """Start every shard and wait; SIGTERM/SIGINT, or one shard exiting, stops them all.

    Shards run in their own process group, so a terminal's Ctrl-C reaches only the launcher,
    which sends each shard one SIGTERM (each hands over its leaderships and exits).
    """
    stop_signal: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda received, _frame: stop_signal.append(received))
    if startup_signals.requested():
        return 0  # no shard started yet
    shards: list[tuple[int, subprocess.Popen[bytes]]] = []
    for node_id, argv in commands:
        process = subprocess.Popen(argv, process_group=0, preexec_fn=_die_with_parent)
        shards.append((node_id, process))
        print(f"raftka: shard node {node_id} started (pid {process.pid})", file=sys.stderr)
    failed: tuple[int, int] | None = None
    while not stop_signal and failed is None:
        time.sleep(0.2)
        failed = next(
            ((node_id, p.returncode) for node_id, p in shards if p.poll() is not None), None
        )
    if failed is not None:
        print(
            f"raftka: shard node {failed[0]} exited with code {failed[1]}; "
            "stopping the other shards",
            file=sys.stderr,
        )
    for _node_id, process in shards:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    codes = {node_id: process.wait() for node_id, process in shards}
    if failed is None and all(code == 0 for code in codes.values()):
        return 0
    if failed is None:
        print(f"raftka: shards exited with codes {codes}", file=sys.stderr)
    return 1


def _serve_shards(args: argparse.Namespace) -> int:
    from raftka.broker.server import Listener

    try:
        if args.peers:
            raise ValueError(
                "--peers cannot be combined with --shards: the shards form a cluster of "
                "their own on this host, or with --hosts of the hosts named there; list every "
                "broker in --peers and start each one with --node-id instead"
            )
        file_values = load_config_file(args.config_file) if args.config_file else None
        overrides = parse_assignments(args.config)
        if args.node_id is not None:
            overrides["node.id"] = str(args.node_id)
        config = BrokerConfig(overrides, file_values=file_values)
        passthrough = [arg for item in args.config for arg in ("--config", item)]
        if args.config_file:
            passthrough += ["--config-file", str(args.config_file)]
        passthrough += ["--log-level", args.log_level, "--log-format", args.log_format]
        commands = shard_commands(
            args.shards,
            Listener.parse(args.listen),
            Listener.parse(args.raft_listen) if args.raft_listen else None,
            config.get_int("node.id"),
            _log_dirs(args, config),
            config,
            passthrough,
            socket.gethostname(),
            [Listener.parse(h) for h in filter(None, map(str.strip, args.hosts.split(",")))],
        )
    except (ConfigError, ValueError, OSError) as exc:
        print(f"raftka: {exc}", file=sys.stderr)
        return 2
    return _run_shards(commands)


def _log_dirs(args: argparse.Namespace, config: BrokerConfig) -> list[Path]:
    """--data-dir (one directory), else Kafka's `log.dirs` (comma-separated), else `log.dir`.
    The first holds the metadata log and the Raft state (Kafka's metadata.log.dir default).
    ConfigError for an empty list or one naming a directory twice (as Kafka refuses it)."""
    if args.data_dir is not None:
        return [Path(args.data_dir)]
    text = config.get_optional_str("log.dirs")
    name = "log.dirs"
    if text is None:
        name, text = "log.dir", config.get_str("log.dir")
    dirs = [Path(d.strip()) for d in text.split(",") if d.strip()]
    if not dirs:
        raise ConfigError(f"{name}={text!r}: at least one log directory is needed")
    seen: dict[Path, Path] = {}
    for directory in dirs:
        resolved = directory.resolve()
        if resolved in seen:
            raise ConfigError(
                f"{name}={text}: {seen[resolved]} and {directory} are the same directory "
                "(each log directory may be listed once)"
            )
        seen[resolved] = directory
    return dirs


def _check_process_roles(config: BrokerConfig) -> None:
    roles = {r.strip() for r in config.get_str("process.roles").split(",") if r.strip()}
    if roles != COMBINED_ROLES:
        raise ConfigError(
            f"process.roles={config.get_str('process.roles')}: raftka's nodes are broker and "
            "controller in one (process.roles=broker,controller); a node that is not a voter "
            "joins with --join"
        )


def _quorum_voters(config: BrokerConfig) -> dict[int, Listener] | None:
    """Kafka's `controller.quorum.voters` parsed (None when not given); ConfigError when it
    is not ID@HOST:PORT,..."""
    from raftka.broker.server import ClusterSpec

    text = config.get_optional_str("controller.quorum.voters")
    if not text:
        return None
    try:
        return ClusterSpec.parse_peers(text)
    except ValueError:
        raise ConfigError(
            f"controller.quorum.voters: expected ID@HOST:PORT,..., got {text!r}"
        ) from None


def _kraft_voters(config: BrokerConfig, node_id: int) -> dict[int, Listener]:
    """Kafka's `controller.quorum.voters` as --peers; none for a single voter that is this
    node (a single broker needs no Raft listener)."""
    voters = _quorum_voters(config)
    if voters is None:
        return {}
    if node_id not in voters:
        raise ConfigError(
            f"controller.quorum.voters: node.id {node_id} is not one of the voters "
            f"({', '.join(str(n) for n in sorted(voters))})"
        )
    return {} if set(voters) == {node_id} else voters


def _metadata_voters(config: BrokerConfig, peers: dict[int, Listener]) -> frozenset[int] | None:
    """Kafka's `controller.quorum.voters` given with --peers: which of the peers vote on the
    cluster metadata at its first start (the others are observers, as Kafka's brokers are
    of its controllers); None if it is not given (every peer votes). ConfigError naming a
    voter that is not one of the peers, or is there at another address."""
    voters = _quorum_voters(config)
    if voters is None:
        return None
    for node, address in sorted(voters.items()):
        if node not in peers:
            raise ConfigError(
                f"controller.quorum.voters: voter {node} is not one of the --peers "
                f"({', '.join(str(n) for n in sorted(peers))}); every voter must be a peer"
            )
        if peers[node] != address:
            raise ConfigError(
                f"controller.quorum.voters: voter {node} is at {address.host}:{address.port} "
                f"but --peers has it at {peers[node].host}:{peers[node].port}"
            )
    return frozenset(voters)


def _print_configs() -> None:
    from raftka.broker.config import BROKER_CONFIGS, TOPIC_CONFIGS

    for title, table in (("broker configs", BROKER_CONFIGS), ("topic configs", TOPIC_CONFIGS)):
        print(f"# {title}")
        for definition in table.values():
            default = definition.render(definition.default)
            print(f"{definition.name}={'' if default is None else default}  # {definition.doc}")


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    first: BaseException = group
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first


def _attach_cluster_id(argv: list[str]) -> list[str]:
    """`--cluster-id ID` as `--cluster-id=ID`: a cluster id is URL-safe base64 and may start
    with "-", which argparse would otherwise take for an option."""
    out: list[str] = []
    args = iter(argv)
    for arg in args:
        if arg == "--cluster-id":
            value = next(args, None)
            out.append(arg if value is None else f"{arg}={value}")
        else:
            out.append(arg)
    return out


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(_attach_cluster_id(sys.argv[1:] if argv is None else argv))
    if args.command == "configs":
        _print_configs()
        return 0
    if args.command in ADMIN_COMMANDS:
        return run_admin_command(args)
    return _serve_command(args)


def _serve_command(args: argparse.Namespace) -> int:
    """`raftka serve`: a broker (or `--shards` of them) until SIGTERM/SIGINT."""
    import trio

    from raftka.broker.cluster.controller import MetadataApplyError
    from raftka.broker.http_endpoint import EndpointBindError
    from raftka.broker.security.listeners import controller_listener
    from raftka.broker.server import Broker, ClusterSpec, Listener

    if args.shards is not None:
        return _serve_shards(args)
    if args.hosts:
        print("raftka: --hosts needs --shards (the shards each host runs)", file=sys.stderr)
        return 2
    try:
        file_values = load_config_file(args.config_file) if args.config_file else None
        overrides = parse_assignments(args.config)
        if args.node_id is not None:
            overrides["node.id"] = str(args.node_id)
        config = BrokerConfig(overrides, file_values=file_values)
        listener = Listener.parse(args.listen) if args.listen else None
        node_id = config.get_int("node.id")
        _check_process_roles(config)
        peers = ClusterSpec.parse_peers(args.peers)
        metadata_voters = _metadata_voters(config, peers) if peers else None
        peers = peers or _kraft_voters(config, node_id)
        raft_listen = Listener.parse(args.raft_listen) if args.raft_listen else None
        if peers and node_id not in peers:
            raise ValueError(f"--peers must include this broker's node id {node_id}")
        if peers and raft_listen is None:
            controller = controller_listener(config)
            raft_listen = peers[node_id] if controller is None else Listener(*controller)
        if args.join and not peers:
            raise ValueError("--join needs --peers: the running cluster's brokers and this one")
        cluster = ClusterSpec(
            raft_listen=raft_listen,
            peers=peers,
            join=args.join,
            given_cluster_id=args.cluster_id,
            metadata_voters=metadata_voters,
        )
        log_dirs = _log_dirs(args, config)
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
        broker = Broker(config, listener, log_dirs[0], cluster, more_log_dirs=log_dirs[1:])
    except ValueError as exc:
        print(f"raftka: {exc}", file=sys.stderr)
        return 2
    if _stopped_while_starting(broker):
        return 0
    try:
        trio.run(_serve, broker)
    except OSError as exc:
        where = args.listen or config.get_str("listeners")
        return _stopped(f"cannot serve on {where}: {exc}", json_logs)
    except BaseExceptionGroup as group:
        bind_errors = group.subgroup(EndpointBindError)
        if bind_errors is not None:
            # The error names its config (metrics.listen or console.listen).
            return _stopped(str(_first(bind_errors)), json_logs)
        os_errors, others = group.split(
            lambda exc: isinstance(exc, OSError) and exc.errno in BIND_ERRNOS
        )
        if os_errors is not None and others is None:
            raft = cluster.raft_listen
            where = args.listen + (f" or Raft address {raft.host}:{raft.port}" if raft else "")
            return _stopped(f"cannot serve on {where}: {_first(os_errors)}", json_logs)
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
