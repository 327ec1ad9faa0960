"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554).

Describe reads this broker's metadata image. Alter derives each credential's stored and
server keys from the salted password the client sent (the salted password goes no
further) and sends one command per user to the controller, which replicates the change.

With an authorizer, as Kafka: describing needs DESCRIBE on the cluster and altering ALTER on
the cluster; without it the whole request is answered CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import base64
from collections import Counter
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import AlterScramCredentialsCommand
from raftka.broker.cluster.validation import (
    TopicError,
    check_scram_iterations,
    check_scram_mechanism,
)
from raftka.broker.handlers.common import (
    NO_THROTTLE,
    denied_message,
    response_entity,
    response_module,
)
from raftka.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from raftka.broker.security.scram import credential_from_salted
from raftka.protocol.api import build

if TYPE_CHECKING:
    from raftka.broker.handlers.context import RequestContext
    from raftka.protocol.messages.requests import (
        AlterUserScramCredentialsRequest,
        DescribeUserScramCredentialsRequest,
    )
    from raftka.protocol.messages.responses import (
        AlterUserScramCredentialsResponse,
        DescribeUserScramCredentialsResponse,
    )


def _cluster_denial(context: RequestContext, operation: AclOperation) -> str | None:
    """The message when the principal may not do `operation` on the cluster, else None."""
    if context.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME):
        return None
    return denied_message(context, operation, ResourceType.CLUSTER, CLUSTER_NAME)


async def handle_describe_user_scram_credentials(
    context: RequestContext, request: DescribeUserScramCredentialsRequest
) -> DescribeUserScramCredentialsResponse:
    entity: type[DescribeUserScramCredentialsResponse] = response_entity(context)
    module = response_module(context)
    denial = _cluster_denial(context, AclOperation.DESCRIBE)
    if denial is not None:
        code = ErrorCode.cluster_authorization_failed
        return build(
            entity,
            throttle_time=NO_THROTTLE,
            error_code=code,
            error_message=denial,
            results=tuple(
                build(
                    module.DescribeUserScramCredentialsResult,
                    user=u.name,
                    error_code=code,
                    error_message=denial,
                    credential_infos=(),
                )
                for u in request.users or ()
            ),
        )
    credentials = context.services.controller.image.scram_credentials
    by_user: dict[str, list[tuple[int, int]]] = {}
    for (user, mechanism), credential in sorted(credentials.items()):
        by_user.setdefault(user, []).append((mechanism, credential.iterations))
    # Null or empty: every user (KIP-554).
    wanted = list(by_user) if not request.users else [u.name for u in request.users]
    counts = Counter(wanted)
    results = []
    for user in dict.fromkeys(wanted):
        code, message = ErrorCode.none, None
        if counts[user] > 1:
            code, message = ErrorCode.duplicate_resource, "Cannot describe the same user twice"
        elif user not in by_user:
            code, message = (
                ErrorCode.resource_not_found,
                f"Attempt to describe a user credential that does not exist: {user}",
            )
        results.append(
            build(
                module.DescribeUserScramCredentialsResult,
                user=user,
                error_code=code,
                error_message=message,
                credential_infos=tuple(
                    build(module.CredentialInfo, mechanism=m, iterations=i)
                    for m, i in (by_user.get(user, []) if code == ErrorCode.none else [])
                ),
            )
        )
    return build(
        entity,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        results=tuple(results),
    )


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


async def handle_alter_user_scram_credentials(
    context: RequestContext, request: AlterUserScramCredentialsRequest
) -> AlterUserScramCredentialsResponse:
    entity: type[AlterUserScramCredentialsResponse] = response_entity(context)
    module = response_module(context)
    controller = context.services.controller
    users = list(
        dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions])
    )
    denial = _cluster_denial(context, AclOperation.ALTER)
    if denial is not None:
        return build(
            entity,
            throttle_time=NO_THROTTLE,
            results=tuple(
                build(
                    module.AlterUserScramCredentialsResult,
                    user=user,
                    error_code=ErrorCode.cluster_authorization_failed,
                    error_message=denial,
                )
                for user in users
            ),
        )
    seen = Counter(
        [(d.name, int(d.mechanism)) for d in request.deletions]
        + [(u.name, int(u.mechanism)) for u in request.upsertions]
    )
    results = []
    for user in users:
        code, message = ErrorCode.none, None
        try:
            if not user:
                raise TopicError(ErrorCode.unacceptable_credential, "Username must not be empty")
            if any(count > 1 for (name, _), count in seen.items() if name == user):
                raise TopicError(
                    ErrorCode.duplicate_resource,
                    f"A user credential cannot be altered twice in the same request: {user}",
                )
            deletions = tuple(
                int(check_scram_mechanism(d.mechanism)) for d in request.deletions if d.name == user
            )
            upsertions = []
            for u in request.upsertions:
                if u.name != user:
                    continue
                mechanism = check_scram_mechanism(u.mechanism)
                check_scram_iterations(u.iterations)
                if not u.salt or not u.salted_password:
                    raise TopicError(
                        ErrorCode.unacceptable_credential,
                        f"Empty salt or salted password for user {user}",
                    )
                credential = credential_from_salted(
                    mechanism, u.salt, u.iterations, u.salted_password
                )
                upsertions.append(
                    (
                        int(mechanism),
                        u.iterations,
                        _b64(credential.salt),
                        _b64(credential.stored_key),
                        _b64(credential.server_key),
                    )
                )
            result = await controller.execute(
                AlterScramCredentialsCommand(user, deletions, tuple(upsertions))
            )
            code, message = result.error_code, result.error_message
        except TopicError as exc:
            code, message = exc.error_code, exc.message
        results.append(
            build(
                module.AlterUserScramCredentialsResult,
                user=user,
                error_code=code,
                error_message=message,
            )
        )
    return build(entity, throttle_time=NO_THROTTLE, results=tuple(results))
