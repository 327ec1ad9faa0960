"""TLS for SSL and SASL_SSL listeners: an `ssl.SSLContext` built from Kafka's PEM keystore
and truststore configs, and the principal a client certificate names."""

from __future__ import annotations

import os
import ssl
import tempfile
from pathlib import Path
from typing import Any

from raftka.broker.config import BrokerConfig, ConfigError


def _str(config: BrokerConfig, listener: str, name: str) -> str | None:
    value = config.listener_value(listener, name)
    return value if isinstance(value, str) and value else None


def _load_inline_chain(context: ssl.SSLContext, chain: str, key: str, password: str | None) -> None:
    # The ssl module loads key material from files only: a private temporary file, removed
    # at once.
    fd, path = tempfile.mkstemp(suffix=".pem")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(key.strip() + "\n" + chain.strip() + "\n")
        context.load_cert_chain(path, password=password)
    finally:
        os.unlink(path)


def server_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """The TLS context of `listener`; ConfigError naming the config and file if the
    keystore or truststore is missing or unreadable."""
    prefix = f"listener.name.{listener.lower()}."
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    password = _str(config, listener, "ssl.key.password")
    location = _str(config, listener, "ssl.keystore.location")
    chain = _str(config, listener, "ssl.keystore.certificate.chain")
    key = _str(config, listener, "ssl.keystore.key")
    try:
        if location is not None:
            if not Path(location).is_file():
                raise ConfigError(
                    f"ssl.keystore.location: {location} does not exist (listener {listener})"
                )
            context.load_cert_chain(location, password=password)
        elif chain is not None and key is not None:
            _load_inline_chain(context, chain, key, password)
        else:
            raise ConfigError(
                f"listener {listener} uses TLS but has no keystore: set ssl.keystore.location "
                f"(or {prefix}ssl.keystore.location) to a PEM file with the private key and "
                "certificate chain, or ssl.keystore.certificate.chain and ssl.keystore.key"
            )
    except ssl.SSLError as exc:
        where = location or "ssl.keystore.certificate.chain/ssl.keystore.key"
        raise ConfigError(
            f"ssl.keystore.location: cannot load a private key and certificate chain from "
            f"{where} (listener {listener}): {exc.reason or exc}; a PEM file with the key "
            "and the certificates is expected (ssl.key.password if the key is encrypted)"
        ) from None
    client_auth = config.listener_value(listener, "ssl.client.auth")
    trust_location = _str(config, listener, "ssl.truststore.location")
    trust_inline = _str(config, listener, "ssl.truststore.certificates")
    try:
        if trust_location is not None:
            if not Path(trust_location).is_file():
                raise ConfigError(
                    f"ssl.truststore.location: {trust_location} does not exist "
                    f"(listener {listener})"
                )
            context.load_verify_locations(cafile=trust_location)
        elif trust_inline is not None:
            context.load_verify_locations(cadata=trust_inline)
        elif client_auth != "none":
            raise ConfigError(
                f"ssl.client.auth={client_auth} on listener {listener} needs a truststore: "
                "set ssl.truststore.location to a PEM file of CA certificates"
            )
    except ssl.SSLError as exc:
        raise ConfigError(
            f"ssl.truststore.location: cannot load CA certificates from "
            f"{trust_location or 'ssl.truststore.certificates'} (listener {listener}): "
            f"{exc.reason or exc}"
        ) from None
    context.verify_mode = {
        "none": ssl.CERT_NONE,
        "requested": ssl.CERT_OPTIONAL,
        "required": ssl.CERT_REQUIRED,
    }[str(client_auth)]
    return context


# RFC 2253 short names, as Java's X500Principal.getName() renders them.
_SHORT_NAMES = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;' else c for c in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" "):
        out = out[:-1] + "\\ "
    return out


# Any: ssl's peer-certificate dict, whose nested (name, value) tuples typeshed leaves open.
def certificate_principal(certificate: dict[str, Any] | None) -> str | None:
    """`CN=…,OU=…,O=…` of a peer certificate as Kafka's default principal builder renders
    the subject (RFC 2253: most specific name first); None without a certificate."""
    if not certificate:
        return None
    parts = []
    for rdn in reversed(certificate.get("subject", ())):
        parts.append(
            "+".join(f"{_SHORT_NAMES.get(name, name)}={_escape(value)}" for name, value in rdn)
        )
    return ",".join(parts) or None
