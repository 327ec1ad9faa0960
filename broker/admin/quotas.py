"""`raftka quotas list|set|remove`: client quotas, through Kafka's DescribeClientQuotas and
AlterClientQuotas (KIP-546), over the raw protocol (confluent-kafka's admin client has no
quota API).

An entity is `--user NAME` or `--user-defaults`, `--client-id NAME` or `--client-defaults`,
or one of each (Kafka's kafka-configs.sh names).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import TYPE_CHECKING, TextIO

from raftka.broker.admin.common import AdminError, Document, Target, print_table
from raftka.broker.admin.wire import (
    Entity,
    WireCluster,
    alter_client_quotas,
    describe_client_quotas,
)

if TYPE_CHECKING:
    from raftka.broker.admin.common import Subcommands

USER = "user"
CLIENT_ID = "client-id"
#: Option -> Kafka's quota key.
KEY_OPTIONS = {
    "producer_byte_rate": "--producer-byte-rate",
    "consumer_byte_rate": "--consumer-byte-rate",
    "request_percentage": "--request-percentage",
    "controller_mutation_rate": "--controller-mutation-rate",
}
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def _error_name(code: object) -> str:
    return str(getattr(code, "name", code)).upper()


def _entity(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    """The entity the options name: [(type, name or None for the default)]."""
    pairs: list[tuple[str, str | None]] = []
    if args.user is not None:
        pairs.append((USER, args.user))
    elif args.user_defaults:
        pairs.append((USER, None))
    if args.client_id is not None:
        pairs.append((CLIENT_ID, args.client_id))
    elif args.client_defaults:
        pairs.append((CLIENT_ID, None))
    return pairs


def _entity_text(pairs: Iterable[tuple[str, str | None]]) -> str:
    return ", ".join(f"{kind}={'<default>' if name is None else name}" for kind, name in pairs)


def _describe(
    target: Target, components: list[tuple[str, int, str | None]], strict: bool
) -> Entity:
    with WireCluster(target) as cluster:
        response = describe_client_quotas(cluster.any_connection(), components, strict=strict)
    if response.error_code:
        raise AdminError(f"{_error_name(response.error_code)}: {response.error_message}")
    return response


def list_quotas(target: Target, args: argparse.Namespace) -> Document:
    pairs = _entity(args)
    components = [
        (kind, MATCH_DEFAULT if name is None else MATCH_EXACT, name) for kind, name in pairs
    ]
    response = _describe(target, components, strict=False)
    entries = []
    for entry in response.entries or ():
        entity = sorted((e.entity_type, e.entity_name) for e in entry.entity)
        entries.append(
            {
                "entity": [{"type": kind, "name": name} for kind, name in entity],
                "quotas": {v.key: _number(float(v.value)) for v in entry.values},
            }
        )
    entries.sort(key=lambda e: [(c["type"], c["name"] or "") for c in e["entity"]])
    return {"quotas": entries}


def _number(value: float) -> float | int:
    return int(value) if value.is_integer() else value


def print_list(document: Document, out: TextIO) -> None:
    rows = [
        (
            _entity_text((c["type"], c["name"]) for c in entry["entity"]),
            key,
            value,
        )
        for entry in document["quotas"]
        for key, value in sorted(entry["quotas"].items())
    ]
    print_table(("ENTITY", "KEY", "VALUE"), rows, out)


def _alter(
    target: Target, pairs: list[tuple[str, str | None]], ops: dict[str, float | None]
) -> None:
    with WireCluster(target) as cluster:
        response = alter_client_quotas(cluster.any_connection(), [(pairs, ops)])
    for entry in response.entries:
        if entry.error_code:
            raise AdminError(
                f"{_error_name(entry.error_code)}: {entry.error_message} ({_entity_text(pairs)})"
            )


def set_quotas(target: Target, args: argparse.Namespace) -> Document:
    pairs = _entity(args)
    ops = {key: getattr(args, key) for key in KEY_OPTIONS if getattr(args, key) is not None}
    _alter(target, pairs, ops)
    return {
        "entity": [{"type": kind, "name": name} for kind, name in pairs],
        "set": {key: _number(value) for key, value in ops.items()},
    }


def remove_quotas(target: Target, args: argparse.Namespace) -> Document:
    pairs = _entity(args)
    keys: list[str] = list(args.key or [])
    if not keys:
        components = [
            (kind, MATCH_DEFAULT if name is None else MATCH_EXACT, name) for kind, name in pairs
        ]
        response = _describe(target, components, strict=True)
        keys = sorted({v.key for entry in response.entries or () for v in entry.values})
        if not keys:
            raise AdminError(f"no quotas are set for {_entity_text(pairs)}")
    _alter(target, pairs, dict.fromkeys(keys))
    return {"entity": [{"type": kind, "name": name} for kind, name in pairs], "removed": keys}


def print_changed(document: Document, out: TextIO) -> None:
    entity = _entity_text((c["type"], c["name"]) for c in document["entity"])
    if "removed" in document:
        print(f"Removed {', '.join(document['removed'])} of {entity}.", file=out)
    else:
        values = ", ".join(f"{k}={v}" for k, v in sorted(document["set"].items()))
        print(f"Set {values} for {entity}.", file=out)


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text!r}")
    return value


def _entity_options(parser: argparse.ArgumentParser) -> None:
    users = parser.add_mutually_exclusive_group()
    users.add_argument("--user", metavar="NAME", help="a user (principal name)")
    users.add_argument("--user-defaults", action="store_true", help="the default for every user")
    clients = parser.add_mutually_exclusive_group()
    clients.add_argument("--client-id", "--client", metavar="ID", help="a client id")
    clients.add_argument(
        "--client-defaults", action="store_true", help="the default for every client id"
    )


def _check_entity(args: argparse.Namespace) -> str | None:
    if not _entity(args):
        return "name an entity: --user NAME, --user-defaults, --client-id ID or --client-defaults"
    return None


def _check_set(args: argparse.Namespace) -> str | None:
    if not any(getattr(args, key) is not None for key in KEY_OPTIONS):
        return "give at least one quota: " + ", ".join(KEY_OPTIONS.values())
    return _check_entity(args)


def add_parser(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser("quotas", help="client quotas: list, set or remove")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser(
        "list", parents=[common], help="quotas (of the entity named, or all)"
    )
    _entity_options(listing)
    listing.set_defaults(run=lambda a, t: (list_quotas(t, a), print_list))
    setting = actions.add_parser("set", parents=[common], help="set quotas of an entity")
    _entity_options(setting)
    for key, option in KEY_OPTIONS.items():
        setting.add_argument(option, dest=key, type=_rate, metavar="N")
    setting.set_defaults(
        run=lambda a, t: (set_quotas(t, a), print_changed), check=_check_set, parser=setting
    )
    removing = actions.add_parser("remove", parents=[common], help="remove quotas of an entity")
    _entity_options(removing)
    removing.add_argument(
        "--key",
        action="append",
        choices=sorted(KEY_OPTIONS),
        help="the quota to remove (repeatable; default: all of the entity's)",
    )
    removing.set_defaults(
        run=lambda a, t: (remove_quotas(t, a), print_changed),
        check=_check_entity,
        parser=removing,
    )
