"""The TLS context of a listener from Kafka's PEM configs, and the errors that stop start-up."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from raftka.broker.config import BrokerConfig, ConfigError
from raftka.broker.security.tls import server_context

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


@pytest.fixture(scope="module")
def key_and_cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    directory = tmp_path_factory.mktemp("tls")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", "key.pem", "-out", "cert.pem", "-days", "1", "-subj", "/CN=t"],
        cwd=directory, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return directory / "key.pem", directory / "cert.pem"


def test_inline_keystore_and_truststore(key_and_cert: tuple[Path, Path]) -> None:
    key, cert = key_and_cert
    config = BrokerConfig(
        {
            "ssl.keystore.key": key.read_text(),
            "ssl.keystore.certificate.chain": cert.read_text(),
            "ssl.truststore.certificates": cert.read_text(),
            "listener.name.secure.ssl.client.auth": "required",
        },
        environ={},
    )
    assert server_context(config, "SECURE").verify_mode == ssl.CERT_REQUIRED
    assert server_context(config, "OTHER").verify_mode == ssl.CERT_NONE


def test_keystore_file_with_key_and_chain(key_and_cert: tuple[Path, Path], tmp_path: Path) -> None:
    key, cert = key_and_cert
    keystore = tmp_path / "keystore.pem"
    keystore.write_text(key.read_text() + cert.read_text())
    config = BrokerConfig({"ssl.keystore.location": str(keystore)}, environ={})
    assert isinstance(server_context(config, "SSL"), ssl.SSLContext)


def test_errors_name_the_config_and_file(key_and_cert: tuple[Path, Path], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="has no keystore.*ssl.keystore.location"):
        server_context(BrokerConfig(environ={}), "SSL")
    missing = tmp_path / "missing.pem"
    with pytest.raises(ConfigError, match=f"ssl.keystore.location: {missing} does not exist"):
        server_context(BrokerConfig({"ssl.keystore.location": str(missing)}, environ={}), "SSL")
    only_cert = key_and_cert[1]
    with pytest.raises(ConfigError, match=f"ssl.keystore.location.*{only_cert}"):
        server_context(BrokerConfig({"ssl.keystore.location": str(only_cert)}, environ={}), "SSL")
    key, cert = key_and_cert
    keystore = tmp_path / "keystore.pem"
    keystore.write_text(key.read_text() + cert.read_text())
    with pytest.raises(ConfigError, match="ssl.client.auth=required.*truststore"):
        server_context(
            BrokerConfig(
                {"ssl.keystore.location": str(keystore), "ssl.client.auth": "required"},
                environ={},
            ),
            "SSL",
        )
