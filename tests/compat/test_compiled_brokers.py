"""With `RAFTKA_COMPILED=1` (scripts/setup then builds it where a C compiler is) a broker
runs the request path compiled with mypyc, says so as it starts, and serves producers and
consumers from it; without, a broker runs the pure-Python modules and says so."""

from __future__ import annotations

import os

from clients import consume, produce
from required import missing_client

from raftka.broker import compiled


def test_a_broker_serves_from_the_compiled_request_path(broker_factory, new_topic):
    pure = os.environ.get(compiled.SWITCH) != "1"
    extensions, reason = compiled.compiled_extensions()
    if extensions is None and not pure:
        missing_client(f"the compiled request path: {reason}")
    broker = broker_factory()
    topic = new_topic(bootstrap=broker.bootstrap, partitions=2)
    records = [
        {"key": f"k{i}".encode(), "value": os.urandom(i % 300), "partition": i % 2}
        for i in range(400)
    ]
    produce(broker.bootstrap, topic, records, acks="all", linger_ms=0)
    read = consume(broker.bootstrap, topic, partitions=2)
    with open(f"/proc/{broker.pid}/maps") as maps:
        mapped = maps.read()
    broker.stop()

    for partition in (0, 1):
        sent = [(r["key"], r["value"]) for r in records if r["partition"] == partition]
        assert [(m.key(), m.value()) for m in read[partition]] == sent
    serving = [line for line in broker.log_path.read_text().splitlines() if "serving on" in line]
    assert serving, broker.log_tail()
    if pure:
        assert serving[-1].endswith(
            "; pure Python (RAFTKA_COMPILED=1 turns the compiled request path on))"
        ), serving[-1]
        assert "request_path__mypyc" not in mapped
    else:
        assert extensions is not None
        assert serving[-1].endswith(f"; {reason})"), serving[-1]
        library = extensions[compiled.GROUP_MODULE]
        assert library in mapped, f"the broker did not load {library}"
