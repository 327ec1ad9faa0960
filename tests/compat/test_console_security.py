"""The console's security forms on a SASL broker with an authorizer: the super user adds and
removes an ACL binding, sets and removes a SCRAM credential and a client quota from
`/security`; each change shows in the page's tables and acts on the cluster as the same
admin API call from a client would (a user given DESCRIBE sees the topic, a SCRAM user signs
in with the password set, a removed one cannot); a user without ALTER on the cluster is
refused and changes nothing; an unconfirmed removal changes nothing."""

from __future__ import annotations

import uuid

from brokers import Brokers
from clients import wait_until
from confluent_kafka.admin import AdminClient, NewTopic
from harness import free_port
from secured import password, start_sasl_broker
from test_console import Page, SignedIn, csrf_token, http_get, outcome

ACL_FIELDS = {
    "resource_type": "TOPIC",
    "pattern_type": "LITERAL",
    "principal": "User:alice",
    "host": "*",
    "operation": "DESCRIBE",
    "permission": "ALLOW",
}


def signed_in(base: str, user: str, secret: str) -> SignedIn | None:
    """A session of `user`, or None when the console refuses the password."""
    client = SignedIn()
    token = csrf_token(client.get(base + "/login")[1])
    status, _, at = client.post(
        base + "/login", {"csrf": token, "username": user, "password": secret}
    )
    return client if (status, at) == (200, base + "/") else None


def test_the_super_user_changes_acls_users_and_quotas_from_the_security_page(
    module_brokers: Brokers,
) -> None:
    address = f"127.0.0.1:{free_port()}"
    secured = start_sasl_broker(
        module_brokers,
        ("admin", "alice"),
        config={"console.listen": address, "connection.failed.authentication.delay.ms": "50"},
        name="console-security",
    )
    base = f"http://{address}"
    wait_until(lambda: http_get(base + "/login")[0] == 200, 30, "the console answers /login")
    topic = f"guarded-{uuid.uuid4().hex[:6]}"
    admin_client = AdminClient(secured.client("admin"))
    admin_client.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)

    admin = signed_in(base, "admin", password("admin"))
    alice = signed_in(base, "alice", password("alice"))
    assert admin is not None and alice is not None

    def post(session: SignedIn, path: str, fields: dict[str, str]) -> tuple[int, str]:
        token = csrf_token(session.get(base + "/security")[1])
        status, body, _ = session.post(base + path, {"csrf": token, **fields})
        return status, outcome(body)

    def security(table: str) -> list[list[str]]:
        return Page(admin.get(base + "/security")[1]).rows(table)

    def alice_sees_topic() -> bool:
        rows = Page(alice.get(base + "/topics")[1]).rows("topics")
        return topic in [row[0] for row in rows]

    # An ACL binding: added, seen by alice, refused to alice herself, removed once confirmed.
    assert not alice_sees_topic()
    acl = ACL_FIELDS | {"resource_name": topic}
    status, said = post(alice, "/security/acls", acl)
    assert status == 403 and said.startswith("CLUSTER_AUTHORIZATION_FAILED"), said
    assert post(admin, "/security/acls", acl) == (200, "Done.")
    assert [topic, "User:alice", "DESCRIBE", "ALLOW"] in [
        [row[1], row[3], row[5], row[6]] for row in security("acls")
    ]
    wait_until(alice_sees_topic, 10, "alice to see the topic she may describe")
    status, said = post(admin, "/security/acls/delete", acl | {"confirm": "User:bob"})
    assert status == 400 and "not confirmed" in said, said
    assert alice_sees_topic()
    assert post(admin, "/security/acls/delete", acl | {"confirm": "User:alice"}) == (200, "Done.")
    wait_until(lambda: not alice_sees_topic(), 10, "alice to lose sight of the topic")
    status, said = post(admin, "/security/acls/delete", acl | {"confirm": "User:alice"})
    assert status == 404 and "no ACL binding" in said, said

    # A SCRAM credential: set, listed, good for a sign-in, then removed.
    carol_secret = "carol-" + uuid.uuid4().hex[:8]
    user = {"user": "carol", "mechanism": "SCRAM-SHA-512"}
    status, said = post(alice, "/security/users", user | {"password": carol_secret})
    assert status == 403 and said.startswith("CLUSTER_AUTHORIZATION_FAILED"), said
    assert post(admin, "/security/users", user | {"password": carol_secret}) == (200, "Done.")
    assert ["carol", "SCRAM-SHA-512 (4096 iterations)"] in security("users")
    assert signed_in(base, "carol", carol_secret) is not None
    assert signed_in(base, "carol", "not-" + carol_secret) is None
    status, said = post(admin, "/security/users/delete", user | {"confirm": "carl"})
    assert status == 400 and "not confirmed" in said, said
    assert post(admin, "/security/users/delete", user | {"confirm": "carol"}) == (200, "Done.")
    assert "carol" not in [row[0] for row in security("users")]
    assert signed_in(base, "carol", carol_secret) is None

    # A client quota: set on alice, then removed by an empty value.
    quota = {"entity_type": "user", "entity_name": "alice", "key": "producer_byte_rate"}
    assert post(admin, "/security/quotas", quota | {"value": "1024"}) == (200, "Done.")
    assert ["user=alice", "producer_byte_rate=1024"] in security("quotas")
    status, said = post(admin, "/security/quotas", quota | {"value": "fast"})
    assert status == 400 and "not a number" in said, said
    assert post(admin, "/security/quotas", quota | {"value": ""}) == (200, "Done.")
    assert "user=alice" not in [row[0] for row in security("quotas")]
