"""SCRAM (RFC 5802/7677) server exchange, credentials, and the security helpers around it:
listener parsing, per-listener configs, certificate principals, failure delays, and SCRAM
credentials in the cluster metadata image and its snapshots."""

from __future__ import annotations

import base64

import pytest

from raftka.broker.cluster.image import MetadataImage
from raftka.broker.cluster.records import (
    DeleteScramCredential,
    UpsertScramCredential,
    decode_metadata_batch,
    encode_batch,
)
from raftka.broker.cluster.snapshot import image_from_dict, image_to_dict
from raftka.broker.config import BrokerConfig, ConfigError
from raftka.broker.security.listeners import (
    SecurityProtocol,
    advertised_addresses,
    resolve_listeners,
)
from raftka.broker.security.scram import (
    ScramError,
    ScramMechanism,
    ScramServer,
    credential_from_salted,
    make_credential,
    password_matches,
    salted_password,
)
from raftka.broker.security.session import FailureDelays, parse_plain_users
from raftka.broker.security.tls import certificate_principal

SHA256 = ScramMechanism.SCRAM_SHA_256


def rfc7677_credential() -> object:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    return credential_from_salted(SHA256, salt, 4096, salted_password(SHA256, "pencil", salt, 4096))


def test_rfc7677_exchange_gives_the_rfc_server_signature() -> None:
    server = ScramServer(SHA256, server_nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    assert server.parse_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == "user"
    first = server.respond_first(rfc7677_credential())  # type: ignore[arg-type]
    assert first == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = server.final(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_wrong_proof_and_unknown_user_fail_alike() -> None:
    for credential in (rfc7677_credential(), None):
        server = ScramServer(SHA256, server_nonce=lambda: "srv")
        server.parse_first(b"n,,n=user,r=cli")
        server.respond_first(credential)  # type: ignore[arg-type]
        with pytest.raises(ScramError, match="invalid credentials"):
            server.final(b"c=biws,r=clisrv,p=" + base64.b64encode(b"\0" * 32))


@pytest.mark.parametrize(
    "token",
    [b"", b"\xff", b"x", b"n,,", b"n,,r=abc", b"p=tls-unique,,n=u,r=x", b"n,a=other,n=u,r=x"],
)
def test_malformed_client_first_is_a_scram_error(token: bytes) -> None:
    with pytest.raises(ScramError):
        ScramServer(SHA256).parse_first(token)


def test_final_with_a_foreign_nonce_or_binding_fails() -> None:
    server = ScramServer(SHA256, server_nonce=lambda: "srv")
    server.parse_first(b"n,,n=user,r=cli")
    server.respond_first(rfc7677_credential())  # type: ignore[arg-type]
    with pytest.raises(ScramError, match="nonce"):
        server.final(b"c=biws,r=clisrv-other,p=AAAA")
    with pytest.raises(ScramError, match="binding"):
        server.final(b"c=eSws,r=clisrv,p=AAAA")


def test_user_names_are_unescaped() -> None:
    assert ScramServer(SHA256).parse_first(b"n,,n=a=2Cb=3Dc,r=x") == "a,b=c"


def test_credentials_keep_no_password_and_verify_it() -> None:
    credential = make_credential(ScramMechanism.SCRAM_SHA_512, "secret", 4096)
    assert b"secret" not in credential.stored_key + credential.server_key + credential.salt
    assert password_matches(credential, "secret")
    assert not password_matches(credential, "Secret")


def test_plain_users_allow_colons_in_passwords() -> None:
    assert parse_plain_users("alice:a:b, bob:pw") == {"alice": "a:b", "bob": "pw"}
    with pytest.raises(ConfigError, match="sasl.plain.users"):
        parse_plain_users("alice")


def test_failure_delays_double_and_are_bounded() -> None:
    now = [0.0]
    delays = FailureDelays(0.1, clock=lambda: now[0])
    assert [delays.record_failure("h") for _ in range(8)] == pytest.approx(
        [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 3.2, 3.2]
    )
    assert delays.record_failure("other") == pytest.approx(0.1)
    now[0] = 1000.0  # forgotten after a quiet minute
    assert delays.record_failure("h") == pytest.approx(0.1)
    delays.record_success("h")
    assert delays.record_failure("h") == pytest.approx(0.1)


# -- listeners and per-listener configs ---------------------------------------------------


def test_listen_address_is_plaintext_and_listeners_are_named() -> None:
    config = BrokerConfig(
        {
            "listeners": "CLIENT://0.0.0.0:9094,SASL_SSL://:9095",
            "listener.security.protocol.map": "CLIENT:SASL_SSL,SASL_SSL:SASL_SSL",
        },
        environ={},
    )
    found = resolve_listeners(config, ("127.0.0.1", 9092))
    assert [(s.name, s.protocol, s.host, s.port) for s in found] == [
        ("PLAINTEXT", SecurityProtocol.PLAINTEXT, "127.0.0.1", 9092),
        ("CLIENT", SecurityProtocol.SASL_SSL, "0.0.0.0", 9094),
        ("SASL_SSL", SecurityProtocol.SASL_SSL, "0.0.0.0", 9095),
    ]
    # Without --listen: the listeners config, by default PLAINTEXT://127.0.0.1:9092.
    default = resolve_listeners(BrokerConfig(environ={}), None)
    assert [(s.name, s.port) for s in default] == [("PLAINTEXT", 9092)]


def test_listener_errors_name_the_problem() -> None:
    with pytest.raises(ConfigError, match="CLIENT has no security protocol"):
        resolve_listeners(BrokerConfig({"listeners": "CLIENT://:1"}, environ={}), None)
    with pytest.raises(ConfigError, match="PLAINTEXT is used twice"):
        resolve_listeners(
            BrokerConfig({"listeners": "PLAINTEXT://:1"}, environ={}), ("127.0.0.1", 2)
        )
    with pytest.raises(ConfigError, match="NAME://HOST:PORT"):
        resolve_listeners(BrokerConfig({"listeners": "SSL://nohost"}, environ={}), None)


def test_advertised_listeners_by_name() -> None:
    config = BrokerConfig(
        {
            "listeners": "PLAINTEXT://:9092,SSL://:9093",
            "advertised.listeners": "SSL://kafka.example.com:443",
        },
        environ={},
    )
    listeners = resolve_listeners(config, None)
    bound = {"PLAINTEXT": ("0.0.0.0", 9092), "SSL": ("0.0.0.0", 9093)}
    assert advertised_addresses(config, listeners, bound) == {
        "PLAINTEXT": ("0.0.0.0", 9092),
        "SSL": ("kafka.example.com", 443),
    }


def test_per_listener_configs_override_the_broker_wide_ones() -> None:
    config = BrokerConfig(
        {"ssl.client.auth": "none", "listener.name.mtls.ssl.client.auth": "required"},
        environ={},
    )
    assert config.listener_value("MTLS", "ssl.client.auth") == "required"
    assert config.listener_value("SSL", "ssl.client.auth") == "none"
    with pytest.raises(ConfigError, match="listener.name.x.log.dirs"):
        BrokerConfig({"listener.name.x.log.dirs": "/tmp"}, environ={})
    with pytest.raises(ConfigError, match="ssl.client.auth"):
        BrokerConfig({"ssl.client.auth": "sometimes"}, environ={})


def test_certificate_subject_as_kafka_renders_it() -> None:
    peer = {
        "subject": (
            (("countryName", "US"),),
            (("organizationName", "Acme, Inc."),),
            (("commonName", "alice"),),
        )
    }
    assert certificate_principal(peer) == "CN=alice,O=Acme\\, Inc.,C=US"
    assert certificate_principal({}) is None
    assert certificate_principal(None) is None


# -- replicated credentials ---------------------------------------------------------------


def _upsert(user: str, mechanism: int = 2) -> UpsertScramCredential:
    credential = make_credential(ScramMechanism(mechanism), "pw", 4096)
    return UpsertScramCredential(
        user,
        mechanism,
        4096,
        base64.b64encode(credential.salt).decode(),
        base64.b64encode(credential.stored_key).decode(),
        base64.b64encode(credential.server_key).decode(),
    )


def test_credential_records_round_trip_and_apply() -> None:
    records = [_upsert("alice"), _upsert("alice", 1), DeleteScramCredential("alice", 1)]
    decoded = decode_metadata_batch(encode_batch(records))
    assert decoded == records
    image = MetadataImage()
    for offset, record in enumerate(decoded):
        assert image.apply(record, offset) == []
    assert list(image.scram_credentials) == [("alice", 2)]
    assert password_matches(image.scram_credentials["alice", 2], "pw")
    # Unknown mechanisms are skipped, not applied.
    image.apply(_upsert("bob", 2).__class__("bob", 7, 4096, "", "", ""), 10)
    assert ("bob", 7) not in image.scram_credentials


def test_snapshot_keeps_credentials_and_old_snapshots_still_load() -> None:
    image = MetadataImage()
    image.apply(_upsert("alice"), 0)
    restored = image_from_dict(image_to_dict(image))
    assert restored == image
    assert password_matches(restored.scram_credentials["alice", 2], "pw")
    old = image_to_dict(image)
    del old["scram_credentials"]
    assert image_from_dict(old).scram_credentials == {}


def test_broker_registration_carries_listener_addresses_and_old_records_still_decode() -> None:
    from raftka.broker.cluster.records import RegisterBroker

    record = RegisterBroker(1, "h", 9092, None, "i", {"SASL_SSL": ("h", 9095)})
    assert decode_metadata_batch(encode_batch([record])) == [record]
    old = RegisterBroker.from_bytes(
        b'{"version":1,"node_id":1,"host":"h","port":9092,"rack":null,"incarnation_id":"i"}'
    )
    assert old.listeners == {}
    image = MetadataImage()
    image.apply(record, 0)
    snapshot = image_to_dict(image)
    assert image_from_dict(snapshot).brokers[1].listeners == {"SASL_SSL": ("h", 9095)}
    del snapshot["brokers"][0]["listeners"]
    assert image_from_dict(snapshot).brokers[1].listeners == {}


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
def test_raftka_client_and_server_agree(mechanism: ScramMechanism) -> None:
    from raftka.broker.security.scram import ScramClient

    credential = make_credential(mechanism, "pw", 4096)
    client = ScramClient(mechanism, "a,b=c", "pw")
    server = ScramServer(mechanism)
    assert server.parse_first(client.first()) == "a,b=c"
    client.verify(server.final(client.final(server.respond_first(credential))))
    wrong = ScramClient(mechanism, "a,b=c", "nope")
    server = ScramServer(mechanism)
    server.parse_first(wrong.first())
    with pytest.raises(ScramError):
        server.final(wrong.final(server.respond_first(credential)))
