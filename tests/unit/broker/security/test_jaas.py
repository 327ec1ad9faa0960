"""Kafka's JAAS config syntax, its PLAIN users, and a Kafka server.properties that holds them
(continued lines and all) read into a broker's PLAIN users per listener."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftka.broker.config import BrokerConfig, ConfigError, load_config_file
from raftka.broker.security.jaas import parse_jaas_config, plain_users_of
from raftka.broker.security.session import Authenticator

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def test_a_plain_login_module_gives_its_user_options_as_users() -> None:
    (module,) = parse_jaas_config(
        f'{PLAIN} required username="admin" password="admin-secret"\n'
        '  user_admin="admin-secret" user_alice="alice secret";'
    )
    assert (module.class_name, module.control_flag) == (PLAIN, "required")
    assert plain_users_of(module) == {"admin": "admin-secret", "alice": "alice secret"}


def test_quotes_escapes_comments_and_unquoted_values() -> None:
    (module,) = parse_jaas_config(
        f"{PLAIN} REQUIRED /* the admin */ user_a='it\\'s' // a comment\n"
        r' user_b="say \"hi\" \\ done" user_c=plain-word_1.2$;'
    )
    assert module.control_flag == "required"
    assert plain_users_of(module) == {"a": "it's", "b": 'say "hi" \\ done', "c": "plain-word_1.2$"}


def test_two_entries_are_two_login_modules() -> None:
    modules = parse_jaas_config(f'{PLAIN} required user_a="x"; {SCRAM} optional;')
    assert [m.class_name for m in modules] == [PLAIN, SCRAM]


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        (f'{PLAIN} required user_a="x"', "does not end with ';'"),
        (f'{PLAIN} user_a="x";', "expected a control flag"),
        (f"{PLAIN} required user_a=;", "option user_a has no value"),
        (f'{PLAIN} required user_a="x;', "no closing"),
        ("", "no login module"),
        (f"{PLAIN} required /* open", "comment is not closed"),
    ],
)
def test_errors_name_the_config_and_what_is_wrong(text: str, complaint: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_jaas_config(text, "listener.name.sasl_plaintext.plain.sasl.jaas.config")
    assert str(error.value).startswith("listener.name.sasl_plaintext.plain.sasl.jaas.config: ")
    assert complaint in str(error.value)


def authenticator(values: dict[str, str]) -> Authenticator:
    return Authenticator(BrokerConfig(values, environ={}), dict)


def test_a_kafka_server_properties_file_gives_plain_users_per_listener(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "listeners=SASL_PLAINTEXT://:9092\n"
        "sasl.enabled.mechanisms=PLAIN\n"
        "listener.name.sasl_plaintext.plain.sasl.jaas.config="
        f"{PLAIN} required \\\n"
        '    username="admin" \\\n'
        '    password="admin-secret" \\\n'
        '    user_admin="admin-secret" \\\n'
        '    user_alice="alice-secret";\n'
    )
    values = load_config_file(path)
    auth = authenticator({k: v for k, v in values.items() if k != "listeners"})
    auth.validate("SASL_PLAINTEXT")
    assert auth.plain_users("SASL_PLAINTEXT") == {
        "admin": "admin-secret",
        "alice": "alice-secret",
    }
    assert auth.plain_users("OTHER") == {}


def test_broker_wide_jaas_config_serves_the_mechanism_of_its_module() -> None:
    auth = authenticator(
        {"sasl.jaas.config": f'{PLAIN} required user_bob="pw";', "sasl.plain.users": "carol:c"}
    )
    auth.validate("SASL_PLAINTEXT")
    assert auth.plain_users("SASL_PLAINTEXT") == {"bob": "pw", "carol": "c"}
    assert auth.login_module("SASL_PLAINTEXT", "SCRAM-SHA-256") is None


def test_a_listener_jaas_config_with_another_mechanisms_module_is_refused() -> None:
    auth = authenticator(
        {"listener.name.sasl_plaintext.plain.sasl.jaas.config": f"{SCRAM} required;"}
    )
    with pytest.raises(ConfigError, match=f"plain.sasl.jaas.config: PLAIN takes {PLAIN}"):
        auth.validate("SASL_PLAINTEXT")


def test_a_jaas_config_of_a_mechanism_not_served_is_refused() -> None:
    with pytest.raises(ConfigError, match="gssapi.sasl.jaas.config: SASL mechanism 'gssapi'"):
        BrokerConfig(
            {"listener.name.sasl_plaintext.gssapi.sasl.jaas.config": "x required;"}, environ={}
        )
