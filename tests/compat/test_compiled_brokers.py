"""A broker runs the request path compiled with mypyc (scripts/setup builds it where a C
compiler is), says so as it starts, and serves producers and consumers from it, a response
larger than the socket takes at once included; with `RAFTKA_COMPILED=0` a broker runs the
pure-Python modules and says so."""

from __future__ import annotations

import os

from clients import consume, produce
from required import missing_client

from raftka.broker import compiled
from raftka.broker.handlers.fetch import INLINE_RECORDS_BYTES_MAX


def test_a_broker_serves_from_the_compiled_request_path(broker_factory, new_topic):
    pure = os.environ.get(compiled.SWITCH) == "0"
    extensions, reason = compiled.compiled_extensions()
    if extensions is None and not pure:
        missing_client(f"the compiled request path: {reason}")
    broker = broker_factory()
    # Each partition's records under the size the broker sends with sendfile, so the first
    # Fetch's response is one frame of about 1.5 MB in bytes: more than a socket takes at
    # once, the rest goes out in later writes.
    partitions = 64
    topic = new_topic(bootstrap=broker.bootstrap, partitions=partitions)
    records = [
        {"key": f"k{i}".encode(), "value": os.urandom(900 + i % 100), "partition": i % partitions}
        for i in range(partitions * 24)
    ]
    assert INLINE_RECORDS_BYTES_MAX > 24 * (1000 + 100)  # each batch's overhead under 100 B
    produce(broker.bootstrap, topic, records, acks="all", linger_ms=0)
    read = consume(broker.bootstrap, topic, partitions=partitions)
    with open(f"/proc/{broker.pid}/maps") as maps:
        mapped = maps.read()
    broker.stop()

    for partition in range(partitions):
        sent = [(r["key"], r["value"]) for r in records if r["partition"] == partition]
        assert [(m.key(), m.value()) for m in read[partition]] == sent
    serving = [line for line in broker.log_path.read_text().splitlines() if "serving on" in line]
    assert serving, broker.log_tail()
    if pure:
        assert serving[-1].endswith("; pure Python (RAFTKA_COMPILED=0))"), serving[-1]
        assert "request_path__mypyc" not in mapped
    else:
        assert extensions is not None
        assert serving[-1].endswith(f"; {reason})"), serving[-1]
        library = extensions[compiled.GROUP_MODULE]
        assert library in mapped, f"the broker did not load {library}"
