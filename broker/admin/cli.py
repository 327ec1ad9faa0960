"""The admin subcommands of `raftka`: argument parsing and output, one place for all.

Every command takes --bootstrap-servers, --output table|json and --timeout; bad arguments
exit 2 (argparse), a broker that refuses or does not answer exits 1 with one message.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from raftka.broker.admin import (
    acls,
    backup,
    cluster,
    elect,
    groups,
    membership,
    queues,
    quotas,
    reassign,
    restore,
    topics,
    transactions,
    users,
)
from raftka.broker.admin.backup_format import MANIFEST
from raftka.broker.admin.common import (
    DEFAULT_TIMEOUT_S,
    AdminError,
    Document,
    Target,
    print_json,
    read_command_config,
)

if TYPE_CHECKING:
    from raftka.broker.admin.common import Subcommands

ADMIN_COMMANDS = (
    "topics",
    "groups",
    "cluster",
    "partitions",
    "backup",
    "restore",
    "users",
    "transactions",
    "acls",
    "quotas",
    "queues",
)

# A command: (parsed arguments, target) -> (JSON document, table printer).
Printer = Callable[[Document, TextIO], None]
Command = Callable[[argparse.Namespace, Target], tuple[Document, Printer]]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _replication_factor(text: str) -> int:
    value = int(text) if text.lstrip("-").isdigit() else None
    if value is None or (value < 1 and value != -1):
        raise argparse.ArgumentTypeError(
            f"expected a number >= 1 (or -1: broker default), got {text!r}"
        )
    return value


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"must be between 0 and 3600 seconds, got {value:g}")
    return value


def _assignment(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip(), value.strip()


def _topic_partitions(text: str) -> tuple[str, tuple[int, ...]]:
    topic, _, listed = text.partition(":")
    try:
        partitions = tuple(int(p) for p in listed.split(",")) if listed else ()
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected TOPIC or TOPIC:P,P..., got {text!r}") from None
    if not topic or any(p < 0 for p in partitions):
        raise argparse.ArgumentTypeError(f"expected TOPIC or TOPIC:P,P..., got {text!r}")
    return topic, partitions


def _datetime(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an ISO 8601 time such as 2026-01-31T12:00:00Z, got {text!r}"
        ) from None
    # Kafka's tool reads a time without a zone as local time.
    return moment if moment.tzinfo else moment.astimezone()


def _common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--bootstrap-servers",
        "--bootstrap",
        dest="bootstrap_servers",
        default="127.0.0.1:9092",
        metavar="HOST:PORT[,...]",
        help="brokers to ask first (default %(default)s)",
    )
    common.add_argument(
        "--output",
        choices=("table", "json"),
        default="table",
        help="table (default): aligned columns; json: one JSON document on stdout",
    )
    common.add_argument(
        "--timeout",
        type=_timeout,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help="give up when no broker answers within this time (default %(default)g)",
    )
    secured = common.add_argument_group("secured listeners")
    secured.add_argument(
        "--command-config",
        type=Path,
        metavar="FILE",
        help="client security properties (security.protocol, sasl.mechanism, "
        "sasl.username, sasl.password or sasl.jaas.config, ssl.ca.location, ...)",
    )
    secured.add_argument(
        "--security-protocol",
        type=str.upper,
        choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
        help="the listener's protocol (default PLAINTEXT)",
    )
    secured.add_argument(
        "--sasl-mechanism",
        type=str.upper,
        choices=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
    )
    secured.add_argument("--sasl-username", metavar="USER")
    secured.add_argument("--sasl-password", metavar="PASSWORD")
    secured.add_argument("--ssl-ca", metavar="PEM_FILE", help="CA certificates to trust")
    secured.add_argument("--ssl-cert", metavar="PEM_FILE", help="client certificate (mTLS)")
    secured.add_argument("--ssl-key", metavar="PEM_FILE", help="client private key (mTLS)")
    return common


def _security(args: argparse.Namespace) -> dict[str, str]:
    """Client security properties: --command-config, then the options over it."""
    found = read_command_config(args.command_config) if args.command_config else {}
    for option, name in (
        ("security_protocol", "security.protocol"),
        ("sasl_mechanism", "sasl.mechanism"),
        ("sasl_username", "sasl.username"),
        ("sasl_password", "sasl.password"),
        ("ssl_ca", "ssl.ca.location"),
        ("ssl_cert", "ssl.certificate.location"),
        ("ssl_key", "ssl.key.location"),
    ):
        value = getattr(args, option, None)
        if value is not None:
            found[name] = value
    if "sasl.mechanisms" in found:
        found.setdefault("sasl.mechanism", found.pop("sasl.mechanisms"))
    return found


def _topics_parser(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser("topics", help="list, describe, create, alter or delete topics")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser("list", parents=[common], help="topics with their sizes")
    listing.add_argument("--include-internal", action="store_true", help="also __ topics")
    listing.set_defaults(
        run=lambda a, t: (topics.list_topics(t, a.include_internal), topics.print_list)
    )

    describe = actions.add_parser(
        "describe", parents=[common], help="partitions, leaders, ISR and configs"
    )
    describe.add_argument("topics", nargs="*", metavar="TOPIC", help="default: every topic")
    describe.add_argument("--include-internal", action="store_true", help="also __ topics")
    describe.set_defaults(
        run=lambda a, t: (
            topics.describe_topics(t, a.topics, a.include_internal),
            topics.print_describe,
        )
    )

    create = actions.add_parser("create", parents=[common], help="create a topic")
    create.add_argument("topic", metavar="TOPIC")
    create.add_argument(
        "--partitions",
        type=_positive_int,
        default=-1,
        metavar="N",
        help="default: the broker's num.partitions",
    )
    create.add_argument(
        "--replication-factor",
        type=_replication_factor,
        default=-1,
        metavar="R",
        help="default: the broker's default.replication.factor",
    )
    create.add_argument(
        "--config", type=_assignment, action="append", default=[], metavar="NAME=VALUE"
    )
    create.set_defaults(
        run=lambda a, t: (
            topics.create_topic(t, a.topic, a.partitions, a.replication_factor, dict(a.config)),
            topics.print_done,
        )
    )

    alter = actions.add_parser(
        "alter", parents=[common], help="add partitions, set or reset configs"
    )
    alter.add_argument("topic", metavar="TOPIC")
    alter.add_argument(
        "--partitions", type=_positive_int, metavar="N", help="the new partition count"
    )
    alter.add_argument(
        "--config", type=_assignment, action="append", default=[], metavar="NAME=VALUE"
    )
    alter.add_argument(
        "--delete-config", action="append", default=[], metavar="NAME", help="back to default"
    )
    alter.set_defaults(
        run=lambda a, t: (
            topics.alter_topic(t, a.topic, a.partitions, dict(a.config), a.delete_config),
            topics.print_done,
        ),
        parser=alter,
        check=lambda a: (
            None
            if a.partitions is not None or a.config or a.delete_config
            else "nothing to alter: give --partitions, --config or --delete-config"
        ),
    )

    delete = actions.add_parser("delete", parents=[common], help="delete topics")
    delete.add_argument("topics", nargs="+", metavar="TOPIC")
    delete.set_defaults(run=lambda a, t: (topics.delete_topics(t, a.topics), topics.print_done))


def _priority(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not -(2**63) <= value < 2**63:
        raise argparse.ArgumentTypeError(f"must be a 64-bit integer, got {value}")
    return value


def _fair_key(text: str) -> str:
    if text == "key" or (text.startswith("header:") and len(text) > len("header:")):
        return text
    raise argparse.ArgumentTypeError(f"expected key or header:NAME, got {text!r}")


_HTTP_HELP = (
    "a broker's HTTP queue API (http://HOST:PORT, its http.listen): a share group's lag, "
    "available, delayed and acquired records of the partitions that broker leads"
)


def _queues_parser(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "queues", help="list, create, describe or delete queues (topics with a delivery order)"
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser("list", parents=[common], help="queues and their orders")
    listing.set_defaults(run=lambda a, t: (queues.list_queues(t), queues.print_list))

    create = actions.add_parser("create", parents=[common], help="create a queue")
    create.add_argument("queue", metavar="QUEUE")
    create.add_argument(
        "--order",
        choices=queues.ORDERS,
        default="fifo",
        help="fifo (default): offset order; priority: the lowest `priority` header first; "
        "fair: round robin across keys",
    )
    create.add_argument("--partitions", type=_positive_int, default=1, metavar="N")
    create.add_argument(
        "--replication-factor",
        type=_replication_factor,
        default=-1,
        metavar="R",
        help="default: the broker's default.replication.factor",
    )
    create.add_argument(
        "--default-priority",
        type=_priority,
        metavar="P",
        help="a priority queue's priority for messages without one (default 0)",
    )
    create.add_argument(
        "--fair-key",
        type=_fair_key,
        metavar="key|header:NAME",
        help="what a fair queue rotates across (default: the record key)",
    )
    create.add_argument(
        "--delays",
        action="store_true",
        help="a fifo queue honours deliver-at-ms headers and delayed nacks (the other "
        "orders always do)",
    )
    create.set_defaults(
        run=lambda a, t: (
            queues.create_queue(
                t,
                a.queue,
                a.partitions,
                a.replication_factor,
                a.order,
                a.default_priority,
                a.fair_key,
                a.delays,
            ),
            queues.print_created,
        ),
        parser=create,
        check=lambda a: (
            "--default-priority is for --order priority"
            if a.default_priority is not None and a.order != "priority"
            else "--fair-key is for --order fair"
            if a.fair_key is not None and a.order != "fair"
            else "--delays is for --order fifo (the other orders always honour delays)"
            if a.delays and a.order != "fifo"
            else None
        ),
    )

    describe = actions.add_parser(
        "describe",
        parents=[common],
        help="its order, and each share group's progress through it",
    )
    describe.add_argument("queue", metavar="QUEUE")
    describe.add_argument("--http", metavar="URL", help=_HTTP_HELP)
    describe.set_defaults(
        run=lambda a, t: (queues.describe_queue(t, a.queue, a.http), queues.print_describe)
    )

    delete = actions.add_parser("delete", parents=[common], help="delete queues and messages")
    delete.add_argument("queues", nargs="+", metavar="QUEUE")
    delete.set_defaults(run=lambda a, t: (queues.delete_queues(t, a.queues), queues.print_deleted))


def _groups_parser(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser("groups", help="list, describe, delete or reset consumer groups")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser("list", parents=[common], help="groups and their states")
    listing.set_defaults(run=lambda a, t: (groups.list_groups(t), groups.print_list))

    describe = actions.add_parser(
        "describe", parents=[common], help="members, committed offsets and lag"
    )
    describe.add_argument("group", metavar="GROUP")
    describe.add_argument("--http", metavar="URL", help=_HTTP_HELP)
    describe.set_defaults(
        run=lambda a, t: (groups.describe_group(t, a.group, a.http), groups.print_describe)
    )

    delete = actions.add_parser("delete", parents=[common], help="delete empty groups")
    delete.add_argument("groups", nargs="+", metavar="GROUP")
    delete.set_defaults(run=lambda a, t: (groups.delete_groups(t, a.groups), groups.print_deleted))

    reset = actions.add_parser(
        "reset-offsets",
        parents=[common],
        help="plan (default) or --execute new committed offsets for an inactive group",
    )
    reset.add_argument("group", metavar="GROUP")
    reset.add_argument(
        "--topic",
        type=_topic_partitions,
        action="append",
        required=True,
        metavar="TOPIC[:P,...]",
        help="a topic, or some of its partitions (repeatable)",
    )
    scenario = reset.add_mutually_exclusive_group(required=True)
    scenario.add_argument("--to-earliest", action="store_true")
    scenario.add_argument("--to-latest", action="store_true")
    scenario.add_argument("--to-datetime", type=_datetime, metavar="ISO8601")
    scenario.add_argument("--shift-by", type=int, metavar="N")
    reset.add_argument(
        "--execute", action="store_true", help="commit the new offsets (default: dry run)"
    )
    reset.set_defaults(
        run=lambda a, t: (
            groups.reset_offsets(
                t,
                a.group,
                a.topic,
                groups.ResetSpec(a.to_earliest, a.to_latest, a.to_datetime, a.shift_by),
                a.execute,
            ),
            groups.print_reset,
        )
    )


def _transactions_parser(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser("transactions", help="list or describe transactional ids")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser(
        "list", parents=[common], help="transactional ids, their coordinators and states"
    )
    listing.set_defaults(
        run=lambda a, t: (transactions.list_transactions(t), transactions.print_list)
    )
    describe = actions.add_parser(
        "describe", parents=[common], help="one transactional id and its ongoing transaction"
    )
    describe.add_argument("transactional_id", metavar="TRANSACTIONAL_ID")
    describe.set_defaults(
        run=lambda a, t: (
            transactions.describe_transaction(t, a.transactional_id),
            transactions.print_describe,
        )
    )


def _cluster_parser(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "cluster",
        help="cluster status, preferred-leader elections, the metadata quorum, decommissioning",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    status = actions.add_parser(
        "status", parents=[common], help="brokers, controller, leaders, ISR, problems"
    )
    status.add_argument(
        "--include-internal", action="store_true", help="also the partitions of __ topics"
    )
    status.set_defaults(
        run=lambda a, t: (cluster.cluster_status(t, a.include_internal), cluster.print_status)
    )
    elect.add_parser(actions, common)
    membership.add_parsers(actions, common)


def _topic_list(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected TOPIC[,TOPIC...], got {text!r}")
    return names


def _backup_target(text: str) -> Path:
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} exists and is not a directory")
    return path


def _backup_source(text: str) -> Path:
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"backup directory {text} does not exist")
    if not (path / MANIFEST).is_file():
        raise argparse.ArgumentTypeError(
            f"{text} is not a raftka backup: it has no {MANIFEST} (made by raftka backup DIR)"
        )
    return path


def _backup_parsers(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    saved = commands.add_parser(
        "backup",
        parents=[common],
        help="copy topics, group offsets and topic configs into DIR (incremental after the first)",
    )
    saved.add_argument("directory", type=_backup_target, metavar="DIR")
    saved.add_argument(
        "--topics",
        type=_topic_list,
        metavar="TOPIC[,...]",
        help="default: every non-internal topic",
    )
    saved.add_argument(
        "--full", action="store_true", help="copy everything again, not only what is new"
    )
    saved.set_defaults(
        run=lambda a, t: (
            backup.run_backup(t, a.directory, a.topics, a.full),
            backup.print_summary,
        )
    )
    loaded = commands.add_parser(
        "restore", parents=[common], help="recreate a backup's topics and group offsets"
    )
    loaded.add_argument("directory", type=_backup_source, metavar="DIR")
    loaded.add_argument(
        "--topics", type=_topic_list, metavar="TOPIC[,...]", help="default: every backed-up topic"
    )
    loaded.add_argument(
        "--replication-factor",
        type=_positive_int,
        metavar="R",
        help="default: the original, at most the number of brokers",
    )
    loaded.set_defaults(
        run=lambda a, t: (
            restore.run_restore(t, a.directory, a.topics, a.replication_factor),
            restore.print_summary,
        )
    )


def add_admin_commands(commands: Subcommands) -> None:
    """Adds `topics`, `groups`, `transactions`, `cluster`, `partitions`, `backup`, `restore`,
    `users` and `acls`, `quotas`, `queues` to the `raftka` subcommands."""
    common = _common_options()
    _topics_parser(commands, common)
    _groups_parser(commands, common)
    _transactions_parser(commands, common)
    _cluster_parser(commands, common)
    reassign.add_parser(commands, common)
    _backup_parsers(commands, common)
    users.add_parser(commands, common)
    acls.add_parser(commands, common)
    quotas.add_parser(commands, common)
    _queues_parser(commands, common)


def run_admin_command(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Runs a parsed admin command; its exit code (0, 1 refused or unreachable, 2 usage)."""
    action = getattr(args, "action", None)
    name = f"raftka {args.command}" + (f" {action}" if action else "")
    check = getattr(args, "check", None)
    problem = check(args) if check else None
    if problem:
        args.parser.error(problem)  # exits 2 with the usage line, as argparse does
    run: Command = args.run
    try:
        target = Target(args.bootstrap_servers, args.timeout, _security(args))
        document, printer = run(args, target)
    except AdminError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 1
    try:
        if args.output == "json":
            print_json(document, out)
        else:
            printer(document, out)
        out.flush()
    except BrokenPipeError:
        # The reader had enough (`| head`): what is still buffered goes nowhere, quietly.
        if out is sys.stdout:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    if document.get("executed") is False:
        print(
            "Dry run: nothing was committed; add --execute to commit these offsets.",
            file=sys.stderr,
        )
    return 0
