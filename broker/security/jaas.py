"""Kafka's JAAS config values (`sasl.jaas.config`), as its brokers read them.

A value is one or more entries `<login module class> <control flag> (<name>=<value>)* ;`.
Names and unquoted values are words (letters, digits, `.`, `_`, `-`, `$`); a quoted value
(`"..."` or `'...'`) takes backslash escapes (`\\"`, `\\\\`, `\\n`, ...); `//` and `/* */`
comments are skipped, as by the StreamTokenizer Kafka's JaasConfig uses.

For PLAIN, the broker's users are the `user_<name>="<password>"` options of Kafka's
PlainLoginModule. SCRAM's credentials live in the cluster metadata; ScramLoginModule's
options are checked for syntax and otherwise unused here.
"""

from __future__ import annotations

from dataclasses import dataclass

from raftka.broker.config import ConfigError

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
#: The login module Kafka's broker uses for each mechanism raftka serves.
LOGIN_MODULES = {
    "PLAIN": PLAIN_LOGIN_MODULE,
    "SCRAM-SHA-256": SCRAM_LOGIN_MODULE,
    "SCRAM-SHA-512": SCRAM_LOGIN_MODULE,
}
CONTROL_FLAGS = frozenset({"required", "requisite", "sufficient", "optional"})
PLAIN_USER_PREFIX = "user_"
_WORD_PUNCTUATION = frozenset("._-$")
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


@dataclass(frozen=True, slots=True)
class LoginModule:
    """One entry of a JAAS config: its class, control flag and options."""

    class_name: str
    control_flag: str
    options: dict[str, str]


def _is_word_char(char: str) -> bool:
    return char.isalnum() or char in _WORD_PUNCTUATION


class _Tokens:
    """The words, quoted strings and `=`/`;` of a JAAS config, in order."""

    def __init__(self, text: str, config_name: str) -> None:
        self.text = text
        self.config_name = config_name
        self.at = 0

    def error(self, what: str) -> ConfigError:
        return ConfigError(f"{self.config_name}: {what}")

    def _skip_blanks_and_comments(self) -> None:
        text = self.text
        while self.at < len(text):
            if text[self.at].isspace():
                self.at += 1
            elif text.startswith("//", self.at):
                end = text.find("\n", self.at)
                self.at = len(text) if end < 0 else end + 1
            elif text.startswith("/*", self.at):
                end = text.find("*/", self.at + 2)
                if end < 0:
                    raise self.error("a /* comment is not closed")
                self.at = end + 2
            else:
                return

    def next(self) -> tuple[str, str] | None:
        """("word" | "quoted" | "=" | ";", text); None at the end."""
        self._skip_blanks_and_comments()
        text = self.text
        if self.at >= len(text):
            return None
        char = text[self.at]
        if char in "=;":
            self.at += 1
            return char, char
        if char in "\"'":
            return "quoted", self._quoted(char)
        if _is_word_char(char):
            start = self.at
            while self.at < len(text) and _is_word_char(text[self.at]):
                self.at += 1
            return "word", text[start : self.at]
        raise self.error(f"unexpected {char!r} at character {self.at + 1}")

    def _quoted(self, quote: str) -> str:
        text = self.text
        start = self.at
        self.at += 1
        value: list[str] = []
        while self.at < len(text):
            char = text[self.at]
            if char == quote:
                self.at += 1
                return "".join(value)
            if char == "\\" and self.at + 1 < len(text):
                escaped = text[self.at + 1]
                value.append(_ESCAPES.get(escaped, escaped))
                self.at += 2
                continue
            value.append(char)
            self.at += 1
        raise self.error(f"the value quoted at character {start + 1} has no closing {quote}")


def parse_jaas_config(text: str, config_name: str = "sasl.jaas.config") -> list[LoginModule]:
    """The login modules of a JAAS config value; ConfigError naming `config_name` and what
    is wrong (a missing control flag, value or closing `;`, an unclosed quote)."""
    tokens = _Tokens(text, config_name)
    modules: list[LoginModule] = []
    while (token := tokens.next()) is not None:
        kind, class_name = token
        if kind != "word":
            raise tokens.error(f"expected a login module class name, got {class_name!r}")
        flag = tokens.next()
        if flag is None or flag[0] != "word" or flag[1].lower() not in CONTROL_FLAGS:
            found = "nothing" if flag is None else repr(flag[1])
            raise tokens.error(
                f"expected a control flag ({', '.join(sorted(CONTROL_FLAGS))}) after "
                f"{class_name}, got {found}"
            )
        options: dict[str, str] = {}
        while True:
            token = tokens.next()
            if token is None:
                raise tokens.error(f"the entry of {class_name} does not end with ';'")
            if token[0] == ";":
                break
            if token[0] != "word":
                raise tokens.error(f"expected an option name, got {token[1]!r}")
            name = token[1]
            equals, value = tokens.next(), tokens.next()
            if (
                equals is None
                or equals[0] != "="
                or value is None
                or value[0] not in ("word", "quoted")
            ):
                raise tokens.error(f'option {name} has no value (name="value")')
            options[name] = value[1]
        modules.append(LoginModule(class_name, flag[1].lower(), options))
    if not modules:
        raise tokens.error("no login module is given")
    return modules


def login_module_for(text: str, config_name: str, mechanism: str) -> LoginModule:
    """The one login module of a broker's JAAS config for `mechanism` (Kafka's brokers
    take exactly one); ConfigError naming `config_name` when there are more, or when it
    is not the module Kafka uses for the mechanism."""
    modules = parse_jaas_config(text, config_name)
    if len(modules) != 1:
        raise ConfigError(
            f"{config_name}: holds {len(modules)} login modules; a broker's takes exactly one"
        )
    (module,) = modules
    expected = LOGIN_MODULES.get(mechanism)
    if expected is not None and module.class_name != expected:
        raise ConfigError(f"{config_name}: {mechanism} takes {expected}, not {module.class_name}")
    return module


def plain_users_of(module: LoginModule) -> dict[str, str]:
    """User -> password from PlainLoginModule's `user_<name>` options."""
    return {
        name[len(PLAIN_USER_PREFIX) :]: password
        for name, password in module.options.items()
        if name.startswith(PLAIN_USER_PREFIX) and len(name) > len(PLAIN_USER_PREFIX)
    }
