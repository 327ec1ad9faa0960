"""`raftka users list|add|change|remove`: SCRAM credentials, through Kafka's
DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554).

The client salts the password (PBKDF2 with a random salt); the broker stores only the
stored key and server key derived from it, replicated in the cluster metadata.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, TextIO

from raftka.broker.admin.common import AdminError, Document, Target, print_table
from raftka.broker.admin.wire import WireCluster

if TYPE_CHECKING:
    from confluent_kafka.admin import ScramMechanism, UserScramCredentialAlteration

    from raftka.broker.admin.common import Subcommands

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
ITERATIONS_DEFAULT = 8192
PASSWORD_ENV = "RAFTKA_USER_PASSWORD"
DESCRIBE_SCRAM_KEY = 50
# KIP-554's mechanism numbers.
_MECHANISM_NAMES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}


def _mechanism(name: str) -> ScramMechanism:
    from confluent_kafka.admin import ScramMechanism

    return ScramMechanism[name.replace("-", "_")]


def _describe_all(target: Target) -> dict[str, list[tuple[str, int]]]:
    """User -> [(mechanism, iterations)] of every user with SCRAM credentials.

    Asked over the wire client: librdkafka frees memory it does not own when the answer
    carries a request-level error (as a CLUSTER_AUTHORIZATION_FAILED one does) and aborts."""
    with WireCluster(target) as cluster:
        response = cluster.any_connection().request(DESCRIBE_SCRAM_KEY, {"users": None})
    if response.error_code:
        name = str(getattr(response.error_code, "name", response.error_code)).upper()
        raise AdminError(f"describe SCRAM users: {name}: {response.error_message or ''}".strip())
    return {
        result.user: sorted(
            (_MECHANISM_NAMES.get(int(info.mechanism), str(info.mechanism)), int(info.iterations))
            for info in result.credential_infos
        )
        for result in response.results
        if not result.error_code
    }


def list_users(target: Target) -> Document:
    users = _describe_all(target)
    return {
        "users": [
            {
                "user": user,
                "credentials": [{"mechanism": m, "iterations": i} for m, i in users[user]],
            }
            for user in sorted(users)
        ]
    }


def print_list(document: Document, out: TextIO) -> None:
    rows = [
        (u["user"], c["mechanism"], c["iterations"])
        for u in document["users"]
        for c in u["credentials"]
    ]
    print_table(("USER", "MECHANISM", "ITERATIONS"), rows, out)


def _password(args: argparse.Namespace) -> str:
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    elif args.password is not None:
        password = args.password
    else:
        password = os.environ.get(PASSWORD_ENV, "")
    if not password:
        raise AdminError(
            f"no password: give --password PASSWORD, --password-stdin or {PASSWORD_ENV}"
        )
    return password


def _alter(
    target: Target, alterations: list[UserScramCredentialAlteration], user: str, what: str
) -> None:
    admin = target.admin()
    futures = admin.alter_user_scram_credentials(alterations, request_timeout=target.timeout_s)
    target.result(futures[user], f"{what} user {user}")


def set_password(target: Target, args: argparse.Namespace, *, creating: bool) -> Document:
    """`add` (the user must not have these credentials yet) or `change` (must have)."""
    from confluent_kafka.admin import ScramCredentialInfo, UserScramCredentialUpsertion

    user: str = args.user
    mechanisms: list[str] = list(MECHANISMS) if args.mechanism == "both" else [args.mechanism]
    password = _password(args)
    existing = {m for m, _ in _describe_all(target).get(user, [])}
    if creating and existing & set(mechanisms):
        raise AdminError(
            f"user {user} already has {', '.join(sorted(existing & set(mechanisms)))} "
            "credentials; use `raftka users change` to set a new password"
        )
    if not creating and not set(mechanisms) <= existing:
        missing = sorted(set(mechanisms) - existing)
        raise AdminError(
            f"user {user} has no {', '.join(missing)} credential; use `raftka users add`"
        )
    alterations: list[UserScramCredentialAlteration] = [
        UserScramCredentialUpsertion(
            user,
            ScramCredentialInfo(_mechanism(m), args.iterations),
            password.encode(),
        )
        for m in mechanisms
    ]
    _alter(target, alterations, user, "add" if creating else "change")
    return {"user": user, "mechanisms": mechanisms, "iterations": args.iterations}


def remove_user(target: Target, args: argparse.Namespace) -> Document:
    from confluent_kafka.admin import UserScramCredentialDeletion

    user: str = args.user
    existing = [m for m, _ in _describe_all(target).get(user, [])]
    mechanisms = existing if args.mechanism == "both" else [args.mechanism]
    if not existing or not set(mechanisms) <= set(existing):
        raise AdminError(f"user {user} has no {' or '.join(mechanisms or MECHANISMS)} credential")
    deletions: list[UserScramCredentialAlteration] = [
        UserScramCredentialDeletion(user, _mechanism(m)) for m in mechanisms
    ]
    _alter(target, deletions, user, "remove")
    return {"user": user, "removed": mechanisms}


def print_changed(document: Document, out: TextIO) -> None:
    if "removed" in document:
        print(
            f"Removed {', '.join(document['removed'])} credentials of {document['user']}.", file=out
        )
    else:
        print(
            f"Set {', '.join(document['mechanisms'])} credentials of {document['user']} "
            f"({document['iterations']} iterations).",
            file=out,
        )


def _iterations(text: str) -> int:
    value = int(text) if text.isdigit() else 0
    if not 4096 <= value <= 16384:
        raise argparse.ArgumentTypeError(f"expected 4096..16384 iterations, got {text!r}")
    return value


def add_parser(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "users", help="SCRAM users: list, add, change (password) or remove"
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", parents=[common], help="users and their mechanisms")
    listing.set_defaults(run=lambda a, t: (list_users(t), print_list))
    for name, creating, text in (
        ("add", True, "give a new user SCRAM credentials"),
        ("change", False, "set a user's password"),
    ):
        sub = actions.add_parser(name, parents=[common], help=text)
        sub.add_argument("user", metavar="USER")
        sub.add_argument("--password", help=f"the password (or --password-stdin, {PASSWORD_ENV})")
        sub.add_argument(
            "--password-stdin", action="store_true", help="read the password from stdin"
        )
        sub.add_argument(
            "--mechanism",
            choices=(*MECHANISMS, "both"),
            default="both",
            help="which SCRAM credential(s) (default both)",
        )
        sub.add_argument(
            "--iterations",
            type=_iterations,
            default=ITERATIONS_DEFAULT,
            help="PBKDF2 iterations (default %(default)s)",
        )
        sub.set_defaults(
            run=lambda a, t, c=creating: (set_password(t, a, creating=c), print_changed)
        )
    removing = actions.add_parser("remove", parents=[common], help="delete a user's credentials")
    removing.add_argument("user", metavar="USER")
    removing.add_argument("--mechanism", choices=(*MECHANISMS, "both"), default="both")
    removing.set_defaults(run=lambda a, t: (remove_user(t, a), print_changed))
