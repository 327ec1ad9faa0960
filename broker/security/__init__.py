"""Listeners, TLS and SASL with Kafka's config names.

- `listeners`: named listeners, their security protocols and advertised addresses.
- `tls`: the SSLContext of a TLS listener from PEM keystore/truststore configs, and the
  principal a client certificate names.
- `scram`: SCRAM-SHA-256/512 credentials and both sides of an exchange (pure).
- `session`: a connection's `Principal` and SASL state, and the `Authenticator` SASL checks
  against (PLAIN users, replicated SCRAM credentials, failure delays).
"""
