"""The live view of a queue's share-partitions that `raftka queues describe --http` and
`raftka groups describe --http` add: read from a broker's HTTP queue API
(GET /queues/{name}/state), below both commands' modules."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request

from raftka.broker.admin.common import AdminError, Document, Target

#: The live columns `--http` adds, from the leader's share-partition (GET /queues/{name}/state).
LIVE = ("lag", "available", "delayed", "acquired")


def live_states(target: Target, http: str, queue: str, group: str) -> dict[int, Document]:
    """Partition -> the group's live view of it (`queue_view`) from the broker's HTTP queue
    API at `http`, for the partitions that broker leads and the group has state on; the
    SASL user of the target's configuration is sent as HTTP Basic."""
    query = urllib.parse.urlencode({"group": group})
    url = f"{http.rstrip('/')}/queues/{urllib.parse.quote(queue, safe='')}/state?{query}"
    request = urllib.request.Request(url)
    user = target.security.get("sasl.username")
    if user is not None:
        secret = f"{user}:{target.security.get('sasl.password', '')}".encode()
        request.add_header("Authorization", "Basic " + base64.b64encode(secret).decode())
    try:
        with urllib.request.urlopen(request, timeout=target.timeout_s) as answer:
            found = json.load(answer)
    except urllib.error.HTTPError as refused:
        try:
            detail = json.load(refused).get("detail", refused.reason)
        except ValueError:
            detail = refused.reason
        raise AdminError(f"{url}: HTTP {refused.code}: {detail}") from None
    except (OSError, ValueError) as exc:
        raise AdminError(f"{url}: {exc}") from None
    return {int(p["partition"]): p for p in found.get("partitions", []) if p.get("state") == "led"}


def add_live(rows: list[Document], live: dict[int, Document]) -> None:
    """Each row (with `partition`) gets the live columns, None where `live` lacks it."""
    for row in rows:
        state = live.get(int(row["partition"]))
        for column in LIVE:
            row[column] = None if state is None else state[column]
