"""`raftka cluster status` as a table: a broker whose log directory an I/O error took
offline is shown as such, and the offline directories are listed by broker."""

from __future__ import annotations

import io

from raftka.broker.admin.cluster import print_status


def _broker(node_id: int, offline: list[str]) -> dict[str, object]:
    return {
        "id": node_id,
        "host": "127.0.0.1",
        "port": 9092 + node_id,
        "rack": None,
        "in_metadata": True,
        "answers": True,
        "leads": 0,
        "replicas": 1,
        "offline_log_dirs": offline,
    }


def test_an_offline_log_dir_is_shown_on_its_broker_and_listed() -> None:
    document = {
        "cluster_id": "c1",
        "controller_id": 1,
        "brokers": [_broker(1, []), _broker(2, ["/disks/b"])],
        "partitions": [],
        "under_replicated_partitions": [],
        "offline_partitions": [],
        "offline_log_dirs": [{"broker": 2, "log_dir": "/disks/b"}],
        "counts": {
            "brokers": 2,
            "brokers_answering": 2,
            "partitions": 0,
            "under_replicated": 0,
            "offline": 0,
            "offline_log_dirs": 1,
        },
    }
    out = io.StringIO()
    print_status(document, out)
    text = out.getvalue()
    rows = {line.split()[0]: line for line in text.splitlines() if line[:1] in ("1", "2")}
    assert "up, log dir offline" in rows["2"]
    assert "log dir offline" not in rows["1"]
    assert "Offline log directories (1): /disks/b (broker 2)" in text
