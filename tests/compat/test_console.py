"""The web console (`console.listen`) of a real broker process, looked at in a real headless
browser (Debian's chromium): the overview, a topic produced to by confluent-kafka, its
messages (a `<script>` value shown as text, never run), and a consumer group's lag as it
commits. Each page is checked on the DOM the browser built; a failing check keeps a
screenshot of the page beside the test's temporary files."""

from __future__ import annotations

import datetime
import html
import http.cookiejar
import json
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
import uuid
from html.parser import HTMLParser
from pathlib import Path

import pytest
from clients import consume, make_consumer, produce, run_raftka, wait_until
from confluent_kafka import (
    AcknowledgeType,
    Consumer,
    ElectionType,
    Message,
    Producer,
    ShareConsumer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from harness import free_port
from required import missing_client
from secured import password, start_sasl_broker

from raftka.broker.admin.common import AdminError, Target
from raftka.broker.admin.membership import describe_quorum
from raftka.broker.admin.wire import WireConnection, WireError

BROWSER_TIMEOUT_S = 60.0
SCRIPT_VALUE = "<script>document.title='owned'</script>"


class Browser:
    """Headless chromium: the DOM of a page after its scripts ran, and screenshots."""

    def __init__(self, binary: str, profile: Path, shots: Path) -> None:
        self.binary = binary
        self.profile = profile
        self.shots = shots

    def _run(self, *args: str) -> str:
        command = [
            self.binary,
            "--headless",
            "--no-sandbox",  # tests run as root in containers
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            f"--user-data-dir={self.profile}",
            *args,
        ]
        done = subprocess.run(command, capture_output=True, timeout=BROWSER_TIMEOUT_S, text=True)
        assert done.returncode == 0, f"chromium exited {done.returncode}: {done.stderr[-2000:]}"
        return done.stdout

    def dom(self, url: str) -> str:
        return self._run("--dump-dom", url)

    def screenshot(self, url: str, name: str) -> Path:
        path = self.shots / f"{name}.png"
        self._run("--window-size=1400,1000", f"--screenshot={path}", url)
        return path


VOID_ELEMENTS = frozenset({"meta", "link", "input", "br", "img", "hr"})


class Page(HTMLParser):
    """What a user reads on a page: its title, the text of each element with an id, and
    the rows of each table (each cell's text, white space collapsed)."""

    def __init__(self, dom: str) -> None:
        super().__init__()
        self.title = ""
        self.by_id: dict[str, str] = {}
        self.tables: dict[str, list[list[str]]] = {}
        self.scripts: list[str] = []
        self.words: list[str] = []
        # open elements: (tag, id, the texts inside it so far)
        self._open: list[tuple[str, str | None, list[str]]] = []
        self._table: str | None = None
        self._row: list[str] | None = None
        self.feed(dom)
        self.close()
        self.text = " ".join(self.words)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in VOID_ELEMENTS:
            return
        element_id = dict(attrs).get("id")
        self._open.append((tag, element_id, []))
        if tag == "table":
            self._table = element_id or f"table-{len(self.tables)}"
            self.tables[self._table] = []
        elif tag == "tr":
            self._row = []

    def handle_endtag(self, tag: str) -> None:
        if not any(open_tag == tag for open_tag, _, _ in self._open):
            return
        while self._open:
            open_tag, element_id, parts = self._open.pop()
            content = " ".join(" ".join(parts).split())
            if self._open:
                self._open[-1][2].append(content)
            if element_id:
                self.by_id[element_id] = content
            if open_tag == "title":
                self.title = content
            elif open_tag == "script":
                self.scripts.append(content)
            elif open_tag in ("td", "th") and self._row is not None:
                self._row.append(content)
            elif open_tag == "tr" and self._table is not None and self._row is not None:
                self.tables[self._table].append(self._row)
                self._row = None
            elif open_tag == "table":
                self._table = None
            if open_tag == tag:
                return

    def handle_data(self, data: str) -> None:
        if data.strip():
            self.words.append(data.strip())
            if self._open:
                self._open[-1][2].append(data)

    def rows(self, table: str) -> list[list[str]]:
        """The table's body rows (its heading row left out)."""
        return self.tables.get(table, [])[1:]


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.fixture(scope="module")
def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        missing_client("chromium not found: run scripts/setup as root or apt-get install chromium")
    return path


@pytest.fixture(scope="module")
def console(module_brokers, tmp_path_factory):
    """A broker with its console; (the broker, the console's base URL)."""
    address = f"127.0.0.1:{free_port()}"
    broker = module_brokers.broker({"console.listen": address}, name="console-broker")
    base = f"http://{address}"
    wait_until(lambda: http_get(base + "/")[0] == 200, 30, "the console answers /")
    return broker, base


@pytest.fixture
def browser(chromium, tmp_path):
    shots = tmp_path / "screenshots"
    shots.mkdir()
    instance = Browser(chromium, tmp_path / "profile", shots)
    yield instance


#: Where the console's tests keep a screenshot of every page they look at (the pictures of
#: docs/operating/console.md): RAFTKA_CONSOLE_SCREENSHOTS=DIR, else build/console-screenshots
#: of this checkout; RAFTKA_CONSOLE_SCREENSHOTS=0 keeps none.
SCREENSHOTS_DEFAULT = Path(__file__).resolve().parents[2] / "build" / "console-screenshots"


def screenshots_kept() -> Path | None:
    """The folder every page's screenshot is kept in, made when missing; None: none kept."""
    chosen = os.environ.get("RAFTKA_CONSOLE_SCREENSHOTS")
    if chosen in ("0", ""):
        return None
    folder = Path(chosen) if chosen else SCREENSHOTS_DEFAULT
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def look(browser: Browser, url: str, name: str) -> Page:
    """The page at `url` as the browser built it; on a failing check the caller takes a
    screenshot (see `checked`). Every page looked at with a `name` is kept as name.png in
    `screenshots_kept()` too."""
    keep = screenshots_kept()
    if keep is not None and name:
        Browser(browser.binary, browser.profile, keep).screenshot(url, name)
    return Page(browser.dom(url))


class checked:
    """Runs a block of checks on a page; a failure keeps a screenshot of the page."""

    def __init__(self, browser: Browser, url: str, name: str) -> None:
        self.browser = browser
        self.url = url
        self.name = name

    def __enter__(self) -> checked:
        return self

    def __exit__(self, kind, error, trace) -> None:
        if error is not None:
            try:
                shot = self.browser.screenshot(self.url, self.name)
                error.add_note(f"screenshot of {self.url}: {shot}")
            except Exception as exc:  # the failure itself is what matters
                error.add_note(f"no screenshot of {self.url}: {exc}")


def test_the_overview_shows_the_cluster_and_its_brokers(console, browser):
    broker, base = console
    with checked(browser, base + "/", "overview"):
        page = look(browser, base + "/", "overview")
        assert page.title == "Overview · raftka"
        assert "Cluster id" in page.text
        # The one broker is the controller and the metadata quorum's only voter and leader.
        quorum = r"Controller 1 Metadata quorum leader 1, epoch \d+, high watermark \d+, voters 1 "
        assert re.search(quorum, page.text), page.text
        brokers = page.rows("brokers")
        assert len(brokers) == 1
        node_id, address, _rack, status, *_ = brokers[0]
        assert address == broker.bootstrap
        assert status == "up"
        assert page.by_id["under-replicated"] == "0"
        assert page.by_id["offline"] == "0"


def test_a_topic_and_its_messages_are_shown_and_values_stay_text(console, browser, new_topic):
    broker, base = console
    topic = new_topic(partitions=2, bootstrap=broker.bootstrap)
    records = [
        {"key": f"key-{i}".encode(), "value": json.dumps({"n": i}).encode(), "partition": i % 2}
        for i in range(20)
    ]
    records.append(
        {
            "key": b"evil",
            "value": SCRIPT_VALUE.encode(),
            "partition": 0,
            "headers": [("origin", b"<b>test</b>")],
        }
    )
    records.append({"key": b"binary", "value": b"\x00\xff\x10", "partition": 1})
    result = produce(broker.bootstrap, topic, records, compression_type="lz4")
    assert not result.errors, result.errors[:5]

    with checked(browser, base + "/topics", "topics"):
        page = look(browser, base + "/topics", "topics")
        listed = {row[0]: row for row in page.rows("topics")}
        assert topic in listed
        assert listed[topic][1:3] == ["2", "1"]  # partitions, replication factor
        # size on this broker: both partitions' logs, the 22 records and their batches
        assert re.fullmatch(r"[1-9]\d*(\.\d)? (B|KiB) in 2 partitions here", listed[topic][3])

    topic_url = f"{base}/topics/{urllib.parse.quote(topic)}"
    with checked(browser, topic_url, "topic"):
        page = look(browser, topic_url, "topic")
        partitions = page.rows("partitions")
        assert [row[0] for row in partitions] == ["0", "1"]
        # partition, leader, epoch, replicas, ISR, replica lag, low watermark, log start,
        # high watermark, log end
        assert partitions[0][1] == partitions[0][3] == partitions[0][4] == "1"  # node 1
        assert partitions[0][5:10] == ["no followers", "0", "0", "11", "11"]
        assert partitions[1][5:10] == ["no followers", "0", "0", "11", "11"]
        configs = {row[0]: row for row in page.rows("configs")}
        assert configs["cleanup.policy"][1:] == ["delete", "default"]

    messages_url = f"{topic_url}/messages?partition=0&mode=offset&offset=0&limit=50"
    with checked(browser, messages_url, "messages"):
        page = look(browser, messages_url, "messages")
        assert page.title == f"Messages of {topic} · raftka"  # the value's script did not run
        shown = page.rows("messages")
        assert [row[1] for row in shown] == [str(i) for i in range(11)]
        by_key = {row[3].split(" ")[0]: row for row in shown}
        assert by_key["key-0"][4] == '{ "n": 0 } json'  # pretty-printed JSON
        evil = by_key["evil"]
        assert evil[4] == f"{SCRIPT_VALUE} text"  # shown as text
        assert evil[5] == "origin : <b>test</b>"
        assert not any("owned" in script for script in page.scripts)

    newest_url = f"{topic_url}/messages?partition=1&limit=2"
    with checked(browser, newest_url, "newest"):
        page = look(browser, newest_url, "newest")
        shown = page.rows("messages")
        assert [row[1] for row in shown] == ["9", "10"]
        assert shown[1][4] == "00 ff 10 hex"  # binary as hex

    # Paging through all partitions five at a time shows every record once, then none.
    seen: list[tuple[str, str]] = []
    page_url = f"{topic_url}/messages?partition=all&mode=offset&offset=0&limit=5"
    for _ in range(10):
        status, body = http_get(page_url)
        assert status == 200, body
        rows = Page(body).rows("messages")
        if not rows:
            break
        assert len(rows) <= 5
        seen += [(row[0], row[1]) for row in rows]
        following = re.search(r'<a href="([^"]+)" class="next">', body)
        assert following, body
        page_url = base + html.unescape(following.group(1))
    assert sorted(seen, key=lambda p: (p[0], int(p[1]))) == [
        (str(p), str(o)) for p in (0, 1) for o in range(11)
    ]

    # Found by key across partitions, from the start of each.
    found_url = f"{topic_url}/messages?partition=all&mode=offset&offset=0&filter=evil"
    with checked(browser, found_url, "filter"):
        shown = look(browser, found_url, "filter").rows("messages")
        assert [(row[0], row[3].split(" ")[0]) for row in shown] == [("0", "evil")]

        # Paging: the next page of partition 0 from offset 3 starts where the first ended.
    first = Page(http_get(f"{topic_url}/messages?partition=0&mode=offset&offset=3&limit=4")[1])
    assert [row[1] for row in first.rows("messages")] == ["3", "4", "5", "6"]
    status, body = http_get(f"{topic_url}/messages?partition=0&positions=0:7&limit=4")
    assert status == 200
    assert [row[1] for row in Page(body).rows("messages")] == ["7", "8", "9", "10"]


def test_messages_are_found_by_timestamp_and_value_and_shown_in_each_format(
    console, browser, new_topic
):
    """Records with their own timestamps, one a second, across two partitions: browsing from
    a timestamp (milliseconds, or an ISO date-time as the form's field sends it) starts each
    partition at its first record at or after it; a substring of the value finds the records
    holding it; a value is shown as text, pretty JSON or hex as asked."""
    broker, base = console
    topic = new_topic(partitions=2, bootstrap=broker.bootstrap)
    start_ms = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    values = [
        json.dumps({"i": i, "word": "needle" if i in (3, 8) else "hay"}).encode() for i in range(10)
    ]
    records = [
        {
            "key": f"k{i}".encode(),
            "value": values[i],
            "partition": i % 2,
            "timestamp": start_ms + i * 1000,
        }
        for i in range(10)
    ]
    assert not produce(broker.bootstrap, topic, records).errors
    messages = f"{base}/topics/{topic}/messages"

    def shown(query: str, name: str = "") -> list[list[str]]:
        with checked(browser, f"{messages}?{query}", name or "messages-query"):
            return look(browser, f"{messages}?{query}", name).rows("messages")

    def when(i: int) -> str:
        moment = datetime.datetime.fromtimestamp((start_ms + i * 1000) / 1000, datetime.UTC)
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    # partition, offset, timestamp and key of each row
    rows = shown(f"partition=all&mode=timestamp&timestamp={start_ms + 5000}", "messages-by-time")
    assert [row[:3] + [row[3].split(" ")[0]] for row in rows] == [
        [str(i % 2), str(i // 2), when(i), f"k{i}"] for i in range(5, 10)
    ]
    rows = shown("partition=1&mode=timestamp&timestamp=2026-01-01T00:00:06.500")
    assert [row[3].split(" ")[0] for row in rows] == ["k7", "k9"]

    rows = shown("partition=all&mode=offset&offset=0&filter=needle", "messages-filtered")
    assert [row[3].split(" ")[0] for row in rows] == ["k3", "k8"]

    one = "partition=1&mode=offset&offset=2&limit=1"
    assert shown(one)[0][4] == '{ "i": 5, "word": "hay" } json'  # auto: JSON pretty-printed
    assert shown(one + "&format=text")[0][4] == f"{values[5].decode()} text"
    assert shown(one + "&format=hex")[0][4] == f"{values[5].hex(' ')} hex"
    assert shown(one + "&format=hex")[0][3] == "6b 35 hex"  # the key too


def test_a_groups_lag_is_shown_as_it_commits(console, browser, new_topic):
    broker, base = console
    topic = new_topic(partitions=1, bootstrap=broker.bootstrap)
    n = 40
    result = produce(broker.bootstrap, topic, [{"value": b"m%d" % i} for i in range(n)])
    assert not result.errors, result.errors[:5]
    group = f"console-{topic[-10:]}"
    consumer = make_consumer(broker.bootstrap, group_id=group)
    try:
        got = consume(broker.bootstrap, topic, [0], count=n, consumer=consumer, timeout=60)
        assert len(got[0]) == n
        consumer.commit(offsets=[TopicPartition(topic, 0, 10)], asynchronous=False)
        group_url = f"{base}/groups/{urllib.parse.quote(group)}"
        with checked(browser, group_url, "group"):
            page = look(browser, group_url, "group")
            assert page.by_id["total-lag"] == str(n - 10)
            assert page.rows("lag") == [[topic, "0", "10", str(n), str(n - 10)]]
        consumer.commit(offsets=[TopicPartition(topic, 0, n)], asynchronous=False)
        with checked(browser, group_url, "group-caught-up"):
            page = look(browser, group_url, "group-caught-up")
            assert page.by_id["total-lag"] == "0"
        with checked(browser, base + "/groups", "groups"):
            page = look(browser, base + "/groups", "groups")
            assert group in [row[0] for row in page.rows("groups")]

        # Reset to the earliest offset: a dry run changes nothing, the confirmed run does.
        token = csrf_token(browser.dom(group_url))
        reset_url = f"{group_url}/reset"
        wanted = {"csrf": token, "topic": topic, "to": "earliest", "value": ""}
        status, body = post(reset_url, wanted)
        assert status == 200, body
        assert Page(body).rows("reset-plan") == [[topic, "0", str(n), "0"]]
        assert Page(http_get(group_url)[1]).by_id["total-lag"] == "0"
        status, body = post(reset_url, {**wanted, "execute": "1", "confirm": "not it"})
        assert status == 400, body
        status, body = post(reset_url, {**wanted, "execute": "1", "confirm": group})
        assert (status, outcome(body)) == (200, "Done."), body
        with checked(browser, group_url, "group-reset"):
            page = look(browser, group_url, "group-reset")
            assert page.by_id["total-lag"] == str(n)
            assert page.rows("lag") == [[topic, "0", "0", str(n), str(n)]]
    finally:
        consumer.close()


def test_read_committed_browsing_leaves_out_aborted_transactions(console, browser, new_topic):
    broker, base = console
    topic = new_topic(partitions=1, bootstrap=broker.bootstrap)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": f"console-{topic[-10:]}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=b"aborted-%d" % i, partition=0)
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    for i in range(2):
        producer.produce(topic, value=b"committed-%d" % i, partition=0)
    producer.commit_transaction(30)

    def values(isolation: str) -> list[str]:
        url = (
            f"{base}/topics/{topic}/messages?partition=0&mode=offset&offset=0&isolation={isolation}"
        )
        with checked(browser, url, isolation):
            return [row[4].split(" ")[0] for row in look(browser, url, "").rows("messages")]

    assert values("read_uncommitted") == [
        "aborted-0",
        "aborted-1",
        "aborted-2",
        "committed-0",
        "committed-1",
    ]
    assert values("read_committed") == ["committed-0", "committed-1"]

    # A transaction left open beside it (60 s timeout).
    still_open = f"console-open-{topic[-10:]}"
    opener = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "transactional.id": still_open,
            "transaction.timeout.ms": 60000,
        }
    )
    opener.init_transactions(30)
    opener.begin_transaction()
    opener.produce(topic, value=b"open", partition=0)
    assert opener.flush(30) == 0

    # The transactions' ids, on the operations page with their states and coordinator; the
    # open one with how long it has been open. The partition holds it open from its first
    # record (offset 7: after three aborted records, a marker, two committed and a marker),
    # written moments ago, so not hanging.
    with checked(browser, base + "/operations", "operations"):
        page = look(browser, base + "/operations", "operations")
        rows = {row[0]: row[1:] for row in page.rows("transactions")}
        node = "1"  # the broker's node id, its own coordinator
        assert rows[f"console-{topic[-10:]}"][1:] == ["CompleteCommit", "", node]
        producer_id, state, age, coordinator = rows[still_open]
        assert (state, coordinator) == ("Ongoing", node)
        assert re.fullmatch(r"\d+ s of its 60 s timeout", age), age
        held = [row for row in page.rows("open-transactions") if row[0] == topic]
        assert len(held) == 1, page.rows("open-transactions")
        topic_name, partition, held_by, _epoch, first, last_write, verdict = held[0]
        assert (partition, held_by, first, verdict) == ("0", producer_id, "7", "open")
        assert re.fullmatch(r"\d+ s ago", last_write), last_write
    opener.abort_transaction(30)


def test_a_consumer_protocol_group_shows_its_members_assignment(console, browser, new_topic):
    broker, base = console
    topic = new_topic(partitions=2, bootstrap=broker.bootstrap)
    group = f"console-848-{topic[-10:]}"
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe([topic])

        def assigned() -> bool:
            consumer.poll(0.2)
            return len(consumer.assignment()) == 2

        wait_until(assigned, 30, "both partitions assigned to the one member")
        group_url = f"{base}/groups/{urllib.parse.quote(group)}"
        with checked(browser, group_url, "group-848"):
            page = look(browser, group_url, "group-848")
            assert page.by_id["group-state"] == "Stable"
            members = page.rows("members")
            assert len(members) == 1
            assert members[0][4] == f"{topic}: 0, 1"
    finally:
        consumer.close()


def test_unknown_pages_and_bad_parameters_are_refused(console):
    _broker, base = console
    assert http_get(base + "/topics/no-such-topic")[0] == 404
    assert http_get(base + "/nowhere")[0] == 404
    assert http_get(base + "/topics/x/messages?limit=many")[0] in (400, 404)
    request = urllib.request.Request(base + "/", data=b"x=1", method="PUT")
    try:
        urllib.request.urlopen(request, timeout=10)
        raise AssertionError("a PUT was answered")
    except urllib.error.HTTPError as error:
        assert error.code == 405


def test_the_overview_charts_the_throughput_of_the_last_minutes(console, browser, new_topic):
    broker, base = console
    topic = new_topic(partitions=1, bootstrap=broker.bootstrap)
    assert not produce(broker.bootstrap, topic, [{"value": b"x" * 1000}] * 200).errors
    got = consume(broker.bootstrap, topic, [0], count=200, timeout=60)
    assert len(got[0]) == 200

    def peaks() -> dict[str, str]:
        page = Page(http_get(base + "/")[1])
        return {name: page.by_id.get(name, "") for name in ("peak-in", "peak-out")}

    # Sampled every few seconds: the produce and the fetch show once a sample follows them.
    wait_until(
        lambda: all(value not in ("", "0 B/s") for value in peaks().values()),
        30,
        "the chart's peaks in and out above zero",
    )

    # The topic's records/s in over the last minute, on the topics page.
    def rate() -> float:
        rows = {row[0]: row for row in Page(http_get(base + "/topics")[1]).rows("topics")}
        return float(rows[topic][4].replace(",", ""))

    wait_until(lambda: rate() > 0, 30, "the topic's rate in above zero")

    # The picture shows lines: three rates (four samples, 5 s apart) drawn.
    def points() -> int:
        drawn = re.search(r'<polyline points="([^"]*)"', http_get(base + "/")[1])
        return len(drawn.group(1).split()) if drawn else 0

    wait_until(lambda: points() >= 3, 60, "three rates on the chart")
    with checked(browser, base + "/", "overview-throughput"):
        page = look(browser, base + "/", "overview-throughput")  # the picture in docs/console.png
        dom = browser.dom(base + "/")
        assert "throughput" in page.by_id
        assert dom.count("<polyline") == 2  # in and out


def csrf_token(dom: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', dom)
    assert found, "the page has a form with the console's token"
    return found.group(1)


def post(url: str, fields: dict[str, str], origin: str | None = None) -> tuple[int, str]:
    """A form post as a browser sends it (from a page of `origin`, when given)."""
    data = urllib.parse.urlencode(fields).encode()
    request = urllib.request.Request(url, data=data, method="POST")
    request.add_header("Content-Type", "application/x-www-form-urlencoded")
    if origin is not None:
        request.add_header("Origin", origin)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def outcome(body: str) -> str:
    return Page(body).by_id.get("outcome", Page(body).text)


def test_changes_are_posted_with_the_token_and_confirmed_by_name(console, browser):
    broker, base = console
    token = csrf_token(browser.dom(base + "/topics"))
    topic = f"console-made-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic_url = f"{base}/topics/{topic}"

    # A forged form (no token) changes nothing.
    status, body = post(base + "/topics", {"name": topic, "partitions": "2"})
    assert status == 403, body
    assert topic not in admin.list_topics(timeout=10).topics

    # Nor does one posted from another site's page, token or not.
    made = {"csrf": token, "name": topic, "partitions": "2", "replication_factor": "1"}
    status, body = post(base + "/topics", made, origin="http://elsewhere.example")
    assert status == 403, body
    assert topic not in admin.list_topics(timeout=10).topics

    status, body = post(base + "/topics", made, origin=base)
    assert (status, outcome(body)) == (200, "Done.")
    wait_until(lambda: topic in admin.list_topics(timeout=10).topics, 10, "the topic exists")
    with checked(browser, base + "/topics", "topics-after-create"):
        assert topic in [row[0] for row in look(browser, base + "/topics", "").rows("topics")]

    # Not confirmed: refused, nothing changes.
    status, body = post(f"{topic_url}/partitions", {"csrf": token, "count": "3", "confirm": "x"})
    assert status == 400, body
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 2
    status, body = post(f"{topic_url}/partitions", {"csrf": token, "count": "3", "confirm": topic})
    assert (status, outcome(body)) == (200, "Done.")
    wait_until(
        lambda: len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 3,
        10,
        "three partitions",
    )

    status, body = post(
        f"{topic_url}/configs",
        {"csrf": token, "name": "retention.ms", "value": "3600000", "confirm": topic},
    )
    assert (status, outcome(body)) == (200, "Done.")
    status, body = post(
        f"{topic_url}/configs",
        {"csrf": token, "name": "retention.ms", "value": "soon", "confirm": topic},
    )
    assert status == 400 and outcome(body).startswith("INVALID_CONFIG"), body
    with checked(browser, topic_url, "topic-after-changes"):
        page = look(browser, topic_url, "")
        assert [row[0] for row in page.rows("partitions")] == ["0", "1", "2"]
        configs = {row[0]: row for row in page.rows("configs")}
        assert configs["retention.ms"][1:] == ["3600000", "set on the topic"]

    records = [{"value": b"r%d" % i, "partition": 0} for i in range(10)]
    assert not produce(broker.bootstrap, topic, records).errors
    status, body = post(
        f"{topic_url}/records",
        {"csrf": token, "partition": "0", "offset": "4", "confirm": topic},
    )
    assert (status, outcome(body)) == (200, "Done.")
    with checked(browser, topic_url, "topic-after-delete-records"):
        # low watermark and log start of partition 0
        assert look(browser, topic_url, "").rows("partitions")[0][6:8] == ["4", "4"]
    messages_url = f"{topic_url}/messages?partition=0&mode=offset&offset=0"
    with checked(browser, messages_url, "messages-after-delete-records"):
        shown = look(browser, messages_url, "").rows("messages")
        assert [row[1] for row in shown] == [str(i) for i in range(4, 10)]

    status, body = post(
        f"{topic_url}/produce",
        {"csrf": token, "partition": "1", "key": "k1", "value": "hello from the console"},
    )
    assert (status, outcome(body)) == (200, "Done."), body
    produced_url = f"{topic_url}/messages?partition=1&mode=offset&offset=0"
    with checked(browser, produced_url, "messages-after-produce"):
        shown = look(browser, produced_url, "").rows("messages")
        assert [(row[1], row[3], row[4]) for row in shown] == [
            ("0", "k1 text", "hello from the console text")
        ]
    got = consume(broker.bootstrap, topic, [1], count=1, timeout=30)
    assert [(m.key(), m.value()) for m in got[1]] == [(b"k1", b"hello from the console")]

    status, body = post(f"{topic_url}/delete", {"csrf": token, "confirm": topic})
    assert (status, outcome(body)) == (200, "Done.")
    wait_until(lambda: topic not in admin.list_topics(timeout=10).topics, 10, "the topic goes")
    assert http_get(topic_url)[0] == 404


STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def test_the_console_shows_only_what_its_principal_may_see_and_shares_the_metrics_port(
    broker_factory, new_topic, browser
):
    """With an authorizer, the console (User:ANONYMOUS) is refused what a client of that
    principal would be: a topic denied DESCRIBE is not listed nor shown, one denied READ
    is shown but not browsed. Its address is metrics.listen's: one port serves both."""
    address = f"127.0.0.1:{free_port()}"
    broker = broker_factory(
        {
            "authorizer.class.name": STANDARD_AUTHORIZER,
            "allow.everyone.if.no.acl.found": "true",
            "metrics.listen": address,
            "console.listen": address,
        }
    )
    base = f"http://{address}"
    wait_until(lambda: http_get(base + "/")[0] == 200, 30, "the console answers /")
    status, metrics = http_get(base + "/metrics")
    assert status == 200 and "kafka_server_replicamanager_partitioncount" in metrics

    shown, hidden, unreadable = (new_topic(bootstrap=broker.bootstrap) for _ in range(3))
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    bindings = [
        AclBinding(
            ResourceType.TOPIC,
            hidden,
            ResourcePatternType.LITERAL,
            "User:ANONYMOUS",
            "*",
            AclOperation.DESCRIBE,
            AclPermissionType.DENY,
        ),
        AclBinding(
            ResourceType.TOPIC,
            unreadable,
            ResourcePatternType.LITERAL,
            "User:ANONYMOUS",
            "*",
            AclOperation.DESCRIBE,
            AclPermissionType.ALLOW,
        ),
        AclBinding(
            ResourceType.TOPIC,
            unreadable,
            ResourcePatternType.LITERAL,
            "User:ANONYMOUS",
            "*",
            AclOperation.READ,
            AclPermissionType.DENY,
        ),
        AclBinding(
            ResourceType.TOPIC,
            unreadable,
            ResourcePatternType.LITERAL,
            "User:ANONYMOUS",
            "*",
            AclOperation.DELETE,
            AclPermissionType.DENY,
        ),
        # DELETE on the cluster would allow deleting every topic.
        AclBinding(
            ResourceType.BROKER,
            "kafka-cluster",
            ResourcePatternType.LITERAL,
            "User:ANONYMOUS",
            "*",
            AclOperation.DELETE,
            AclPermissionType.DENY,
        ),
        # DescribeAcls (the security page) needs DESCRIBE on the cluster, which now has ACLs.
        AclBinding(
            ResourceType.BROKER,
            "kafka-cluster",
            ResourcePatternType.LITERAL,
            "User:ANONYMOUS",
            "*",
            AclOperation.DESCRIBE,
            AclPermissionType.ALLOW,
        ),
    ]
    for future in admin.create_acls(bindings, request_timeout=30).values():
        future.result()

    def listed() -> list[str]:
        return [row[0] for row in Page(http_get(base + "/topics")[1]).rows("topics")]

    wait_until(lambda: hidden not in listed(), 10, "the denied topic leaves the list")
    assert shown in listed() and unreadable in listed()
    assert http_get(f"{base}/topics/{hidden}")[0] == 404
    assert http_get(f"{base}/topics/{hidden}/messages")[0] == 404
    assert http_get(f"{base}/topics/{unreadable}")[0] == 200
    status, body = http_get(f"{base}/topics/{unreadable}/messages")
    assert status == 403, body
    assert http_get(f"{base}/topics/{shown}/messages")[0] == 200

    # The bindings, on the security page.
    with checked(browser, f"{base}/security", "security"):
        acl_rows = look(browser, f"{base}/security", "security").rows("acls")
        assert ["TOPIC", hidden, "LITERAL", "User:ANONYMOUS", "*", "DESCRIBE", "DENY"] in acl_rows

    # Changes are authorized as the API's: deleting the topic needs DELETE on it.
    token = csrf_token(http_get(f"{base}/topics/{unreadable}")[1])
    status, body = post(
        f"{base}/topics/{unreadable}/delete", {"csrf": token, "confirm": unreadable}
    )
    assert status == 403 and outcome(body).startswith("TOPIC_AUTHORIZATION_FAILED"), body
    assert unreadable in admin.list_topics(timeout=10).topics


@pytest.mark.timeout(300)
def test_a_clusters_console_shows_a_stopped_broker_and_keeps_serving(cluster_factory, browser):
    """On a 3-node cluster the console of node 1 lists the three brokers up; once node 3 is
    killed, the overview says it is not answering and the messages of every partition (node 1
    holds a replica of each) are still browsed."""
    cluster = cluster_factory(start=False)
    address = f"127.0.0.1:{free_port()}"
    cluster.nodes[0].config["console.listen"] = address
    for node in cluster.nodes:
        node.config["share.auto.offset.reset"] = "earliest"
        node.config["broker.rack"] = f"rack-{node.node_id}"
    base = f"http://{address}"
    cluster.start()
    wait_until(lambda: http_get(base + "/")[0] == 200, 30, "the console answers /")
    topic = f"console-rf3-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    # Node 1 is every partition's preferred leader, so its console knows the followers' lag.
    created = admin.create_topics([NewTopic(topic, 3, -1, replica_assignment=[[1, 2, 3]] * 3)])
    created[topic].result(30)

    def partition_rows(name: str = topic) -> list[list[str]]:
        return Page(http_get(f"{base}/topics/{name}")[1]).rows("partitions")

    def led_by_node_1(name: str, count: int) -> bool:
        wanted = [TopicPartition(name, i) for i in range(count)]
        admin.elect_leaders(ElectionType.PREFERRED, wanted).result(30)
        return all(row[1] == "1" for row in partition_rows(name))

    records = [{"value": b"v%d" % i, "partition": i % 3} for i in range(30)]
    assert not produce(cluster.bootstrap, topic, records).errors
    wait_until(lambda: led_by_node_1(topic, 3), 30, "node 1 to lead every partition")
    wait_until(
        lambda: {row[5] for row in partition_rows()} == {"2: 0, 3: 0"},
        30,
        "both followers caught up on node 1's topic page",
    )

    def statuses() -> dict[str, str]:
        return {row[0]: row[3] for row in Page(http_get(base + "/")[1]).rows("brokers")}

    wait_until(lambda: statuses() == {"1": "up", "2": "up", "3": "up"}, 30, "three brokers up")
    with checked(browser, base + "/", "cluster-overview"):
        rows = look(browser, base + "/", "cluster-overview").rows("brokers")
        # id, address, rack, status, leaders, replicas, role
        assert [(row[0], row[1], row[2]) for row in rows] == [
            (str(node.node_id), node.bootstrap, f"rack-{node.node_id}") for node in cluster.nodes
        ]
        roles = [row[6].split(", ") for row in rows]
        assert all("voter" in held for held in roles), roles
        assert "this broker" in roles[0], roles
        assert sum("controller" in held for held in roles) == 1, roles

    # Partitions node 1 does not host are read from the brokers that lead them.
    remote = f"console-remote-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(remote, 2, -1, replica_assignment=[[2, 3], [3, 2]])])[
        remote
    ].result(30)
    sent = [{"value": b"r%d" % i, "key": b"k%d" % i, "partition": i % 2} for i in range(20)]
    assert not produce(cluster.bootstrap, remote, sent).errors
    remote_url = f"{base}/topics/{remote}/messages?partition=all&mode=offset&offset=0"
    with checked(browser, remote_url, "cluster-remote-messages"):
        rows = look(browser, remote_url, "cluster-remote-messages").rows("messages")
        assert sorted((row[0], row[4].split(" ")[0]) for row in rows) == sorted(
            (str(i % 2), f"r{i}") for i in range(20)
        )

    # Their followers' lag, as their leaders (brokers 2 and 3, whichever won each election)
    # know it: the one follower of each, caught up.
    def remote_lags_known() -> bool:
        rows = partition_rows(remote)
        followers = [{"2": "3", "3": "2"}.get(row[1]) for row in rows]
        # An assertion, so that a timeout shows the rows last seen.
        assert len(rows) == 2 and all(
            follower is not None and row[5] == f"{follower}: 0"
            for row, follower in zip(rows, followers, strict=True)
        ), rows
        return True

    wait_until(
        remote_lags_known,
        30,
        "the replica lag of partitions brokers 2 and 3 lead, on node 1's topic page",
    )
    status, body = http_get(f"{base}/topics/{remote}/messages?partition=1&mode=offset&offset=5")
    assert status == 200, body[:500]
    assert [row[1] for row in Page(body).rows("messages")] == ["5", "6", "7", "8", "9"]

    # A share group's records in flight on a partition broker 2 leads, as broker 2 has them:
    # of one poll's records, those at offsets divisible by 3 accepted, the rest held.
    shared = f"console-shared-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(shared, 1, -1, replica_assignment=[[2]])])[shared].result(30)
    assert not produce(cluster.bootstrap, shared, [{"value": b"s%d" % i} for i in range(10)]).errors
    shared_group = f"console-share-{uuid.uuid4().hex[:8]}"
    sharer = ShareConsumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": shared_group,
            "share.acknowledgement.mode": "explicit",
        }
    )
    sharer.subscribe([shared])
    try:
        polled: list[Message] = []
        wait_until(
            lambda: polled.extend(m for m in sharer.poll(0.5) if m.error() is None) or polled,
            60,
            "the share consumer's first records",
        )
        offsets = sorted(m.offset() for m in polled)
        for m in polled:
            if m.offset() % 3 == 0:
                sharer.acknowledge(m, AcknowledgeType.ACCEPT)
        sharer.commit_sync(10)
        accepted = {o for o in offsets if o % 3 == 0}
        start = next(o for o in range(11) if o not in accepted)
        held = len(offsets) - len(accepted)
        above = len([o for o in accepted if o > start])

        def in_flight() -> list[str]:
            (row,) = Page(http_get(f"{base}/groups/{shared_group}")[1]).rows("share-partitions")
            return [row[2], *row[4:8]]

        # start offset, acquired, available, acknowledged, archived
        wanted = [str(start), str(held), "0", str(above), "0"]
        wait_until(lambda: in_flight() == wanted, 30, "the records in flight on node 1's console")
    finally:
        sharer.close()

    # A group another broker coordinates is listed, described and reset through it, its
    # lag from each partition's leader.
    with WireConnection(cluster.nodes[0].bootstrap, 10) as conn:

        def coordinator(group: str) -> int:
            found = conn.request(10, {"key_type": 0, "coordinator_keys": (group,)}, version=4)
            return int(found.coordinators[0].node_id)

        def coordinated_elsewhere() -> str | None:
            # -1 while __consumer_offsets is being created (COORDINATOR_NOT_AVAILABLE).
            names = (f"console-g-{uuid.uuid4().hex[:8]}" for _ in range(20))
            return next((g for g in names if coordinator(g) not in (1, -1)), None)

        group = wait_until(coordinated_elsewhere, 30, "a group another broker coordinates")
        coordinating = coordinator(group)
    committer = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        committer.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
    finally:
        committer.close()
    wait_until(
        lambda: group in [row[0] for row in Page(http_get(base + "/groups")[1]).rows("groups")],
        30,
        f"{group} (coordinated by broker {coordinating}) listed on broker 1's console",
    )
    with checked(browser, f"{base}/groups/{group}", "cluster-group"):
        page = look(browser, f"{base}/groups/{group}", "cluster-group")
        assert {row[1]: row[2:] for row in page.rows("lag")} == {"0": ["4", "10", "6"]}
    page = http_get(f"{base}/groups/{group}")[1]
    reset = {"csrf": csrf_token(page), "topic": topic, "to": "latest", "value": "", "kind": ""}
    status, body = post(f"{base}/groups/{group}/reset", reset | {"execute": "1", "confirm": group})
    assert (status, outcome(body)) == (200, "Done."), body
    lag = {row[1]: row[2:] for row in Page(http_get(f"{base}/groups/{group}")[1]).rows("lag")}
    assert lag == {"0": ["10", "10", "0"], "1": ["10", "10", "0"], "2": ["10", "10", "0"]}, lag

    # A throttled move adding node 3 to a partition node 1 leads: the operations page shows
    # how much of the log the new replica holds as it copies, until the move is done.
    moving = f"console-move-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(moving, 1, -1, replica_assignment=[[1, 2]])])[moving].result(30)
    wait_until(lambda: led_by_node_1(moving, 1), 30, f"node 1 to lead {moving}")
    # 3 MB of random bytes (compression cannot shrink them): the first 1 MB append goes
    # unthrottled, the rest at 100 kB/s.
    filler = [{"value": os.urandom(1000), "partition": 0} for _ in range(3000)]
    assert not produce(cluster.bootstrap, moving, filler).errors
    moved = run_raftka(
        "partitions", "reassign", f"{moving}:0=1,2,3", "--throttle", "100000",
        "--bootstrap-servers", cluster.bootstrap,
    )  # fmt: skip
    assert moved.returncode == 0, moved.stderr
    copied: list[int] = []

    def move_done() -> bool:
        rows = Page(http_get(base + "/operations")[1]).rows("reassignments")
        for row in rows:
            if row[0] == moving:
                found = re.fullmatch(r"3: ([\d,]+) of ([\d,]+) offsets \((\d+)%\)", row[5])
                assert found, row
                copied.append(int(found.group(1).replace(",", "")))
                if len(copied) == 1:
                    look(browser, base + "/operations", "operations-move")
                return False
        return True

    wait_until(move_done, 60, "the move to finish on the operations page")
    assert copied and copied == sorted(copied), copied
    assert any(0 < c < 3000 for c in copied), f"no partial copy seen: {copied}"

    # Node 1 paused until the others have taken every leadership from it (its partitions'
    # and the metadata quorum's), then resumed: its console answers from the brokers that
    # lead now.
    others = AdminClient({"bootstrap.servers": cluster.nodes[1].bootstrap})

    def node_1_leads_nothing() -> bool:
        seen = others.list_topics(timeout=10)
        leaders = {p.leader for t in seen.topics.values() for p in t.partitions.values()}
        # The metadata quorum's leader (Metadata's controller id names any live broker while
        # an election runs).
        try:
            quorum = describe_quorum(Target(cluster.nodes[1].bootstrap, timeout_s=5))
        except (AdminError, WireError, OSError):
            return False
        return 1 not in leaders and quorum["leader"] not in (1, -1)

    cluster.nodes[0].pause()
    try:
        wait_until(node_1_leads_nothing, 60, "brokers 2 and 3 to take every leadership")
    finally:
        cluster.nodes[0].resume()
    wait_until(lambda: http_get(base + "/")[0] == 200, 30, "node 1's console answering again")
    assert node_1_leads_nothing()
    with checked(browser, remote_url, "leaderless-messages"):
        rows = look(browser, remote_url, "").rows("messages")
        assert len(rows) == 20
    groups_listed = [row[0] for row in Page(http_get(base + "/groups")[1]).rows("groups")]
    assert group in groups_listed
    lag = {row[1]: row[2:] for row in Page(http_get(f"{base}/groups/{group}")[1]).rows("lag")}
    assert lag == {p: ["10", "10", "0"] for p in ("0", "1", "2")}, lag
    wait_until(lambda: led_by_node_1(topic, 3), 30, "node 1 to lead the topic's partitions again")

    cluster.nodes[2].kill()
    wait_until(lambda: statuses()["3"] == "not answering", 30, "broker 3 shown not answering")
    more = [{"value": b"v%d" % i, "partition": i % 3} for i in range(30, 60)]
    assert not produce(cluster.bootstrap, topic, more).errors
    # The stopped broker lacks the 10 records each partition got since; node 2 has them.
    wait_until(
        lambda: {row[5] for row in partition_rows()} == {"2: 0, 3: 10"},
        30,
        "the stopped broker's lag on node 1's topic page",
    )
    messages_url = f"{base}/topics/{topic}/messages?partition=all&mode=offset&offset=0&limit=100"
    with checked(browser, messages_url, "cluster-messages"):
        shown = look(browser, messages_url, "").rows("messages")
        assert sorted(row[4].split(" ")[0] for row in shown) == sorted(f"v{i}" for i in range(60))


class SignedIn:
    """A browser-like client of the console: it keeps the session cookie."""

    def __init__(self) -> None:
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
        )

    def get(self, url: str) -> tuple[int, str, str]:
        """(status, body, the URL it ended at after redirects)."""
        try:
            with self.opener.open(url, timeout=30) as response:
                return response.status, response.read().decode(), response.url
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode(), url

    def post(self, url: str, fields: dict[str, str]) -> tuple[int, str, str]:
        data = urllib.parse.urlencode(fields).encode()
        try:
            with self.opener.open(urllib.request.Request(url, data=data), timeout=30) as answer:
                return answer.status, answer.read().decode(), answer.url
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode(), url


def test_with_sasl_the_console_signs_users_in_and_acts_as_them(module_brokers, new_topic):
    """On a cluster with SASL, every page needs a sign-in checked as SASL/PLAIN checks it;
    a wrong password is refused; a signed-in user sees what that principal may describe and
    a form without the session's token changes nothing."""
    address = f"127.0.0.1:{free_port()}"
    secured = start_sasl_broker(
        module_brokers,
        ("admin", "alice"),
        config={"console.listen": address, "connection.failed.authentication.delay.ms": "50"},
        name="console-sasl",
    )
    base = f"http://{address}"
    wait_until(lambda: http_get(base + "/login")[0] == 200, 30, "the console answers /login")
    admin = AdminClient(secured.client("admin"))
    mine, theirs = f"alice-{uuid.uuid4().hex[:6]}", f"other-{uuid.uuid4().hex[:6]}"
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in (mine, theirs)]).values():
        future.result(30)
    allowed = AclBinding(
        ResourceType.TOPIC,
        mine,
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.DESCRIBE,
        AclPermissionType.ALLOW,
    )
    for future in admin.create_acls([allowed], request_timeout=30).values():
        future.result()

    alice = SignedIn()
    status, body, at = alice.get(base + "/topics")
    assert status == 200 and at == base + "/login"  # sent to sign in first
    token = csrf_token(body)
    status, body, _ = alice.post(
        base + "/login", {"csrf": token, "username": "alice", "password": "wrong"}
    )
    assert status == 401 and "Wrong user name or password." in body
    assert alice.get(base + "/topics")[2] == base + "/login"
    status, body, at = alice.post(
        base + "/login", {"csrf": token, "username": "alice", "password": password("alice")}
    )
    assert (status, at) == (200, base + "/")
    assert Page(body).by_id["user"] == "alice"

    def listed() -> list[str]:
        return [row[0] for row in Page(alice.get(base + "/topics")[1]).rows("topics")]

    wait_until(lambda: mine in listed(), 10, "alice's topic listed")
    assert theirs not in listed()
    assert alice.get(f"{base}/topics/{theirs}")[0] == 404

    # Deleting needs DELETE, which alice lacks; a form without the session's token is
    # refused before that.
    status, body, _ = alice.post(f"{base}/topics/{mine}/delete", {"confirm": mine})
    assert status == 403, body
    session_token = csrf_token(alice.get(f"{base}/topics/{mine}")[1])
    assert session_token != token
    status, body, _ = alice.post(
        f"{base}/topics/{mine}/delete", {"csrf": session_token, "confirm": mine}
    )
    assert status == 403 and outcome(body).startswith("TOPIC_AUTHORIZATION_FAILED"), body
    assert mine in admin.list_topics(timeout=10).topics

    # Every other change is authorized as its API is: alice may only describe her topic, so
    # creating a topic, adding partitions, changing a config, deleting records and producing
    # a test message are each refused, and none changes anything.
    kept = {"value": b"kept"}
    writer = Producer(secured.client("admin"))
    assert not produce(secured.address, mine, [kept], producer=writer).errors
    made = f"alice-made-{uuid.uuid4().hex[:6]}"
    refused = {
        "/topics": {"name": made, "partitions": "1", "replication_factor": "1"},
        f"/topics/{mine}/partitions": {"count": "2", "confirm": mine},
        f"/topics/{mine}/configs": {"name": "retention.ms", "value": "1000", "confirm": mine},
        f"/topics/{mine}/records": {"partition": "0", "offset": "1", "confirm": mine},
        f"/topics/{mine}/produce": {"partition": "0", "key": "k", "value": "not written"},
    }
    for path, fields in refused.items():
        status, body, _ = alice.post(base + path, {"csrf": session_token, **fields})
        said = outcome(body)
        assert status == 403, (path, status, said)
        assert said.startswith(("TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED")), (
            path,
            said,
        )
    assert made not in admin.list_topics(timeout=10).topics
    assert len(admin.list_topics(mine, timeout=10).topics[mine].partitions) == 1
    configs = admin.describe_configs([ConfigResource("topic", mine)])
    described = next(iter(configs.values())).result(30)
    assert described["retention.ms"].is_default, described["retention.ms"]
    reader = Consumer(secured.client("admin", **{"group.id": f"check-{made}"}))
    try:
        assert reader.get_watermark_offsets(TopicPartition(mine, 0), timeout=30) == (0, 1)
    finally:
        reader.close()

    # Signed out, the session is gone.
    alice.post(base + "/logout", {"csrf": session_token})
    assert alice.get(base + "/topics")[2] == base + "/login"


def test_a_share_groups_start_offsets_are_reset_after_a_dry_run(console):
    """A share group that consumed a topic's ten records and left is reset to the earliest
    offset from its page: the dry run shows start offset 10 going to 0 and changes nothing;
    confirmed, the page shows 0 and a new member of the group receives the ten again."""
    broker, base = console
    topic = f"share-reset-{uuid.uuid4().hex[:8]}"
    group = f"share-g-{topic[-8:]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)

    def member() -> ShareConsumer:
        consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
        consumer.subscribe([topic])
        return consumer

    def drain(consumer: ShareConsumer, wanted: int) -> list[bytes]:
        got: list[bytes] = []

        def taken() -> bool:
            got.extend(m.value() for m in consumer.poll(0.3) if m.error() is None)
            return len(got) >= wanted

        wait_until(taken, 30, f"{wanted} records delivered")
        return got

    first = member()
    try:
        # The share-partition starts where the log ends when it is first fetched (latest).
        wait_until(
            lambda: (
                not first.poll(0.3) and "share-partitions" in http_get(f"{base}/groups/{group}")[1]
            ),
            30,
            "the group's share-partition",
        )
        assert not produce(
            broker.bootstrap, topic, [{"value": b"v%d" % i} for i in range(10)]
        ).errors
        assert sorted(drain(first, 10)) == sorted(b"v%d" % i for i in range(10))
        first.poll(0.3)  # implicit acknowledgement of what the last poll returned
        first.commit_sync(10)
    finally:
        first.close()

    def start_offsets() -> list[str]:
        return [
            row[2] for row in Page(http_get(f"{base}/groups/{group}")[1]).rows("share-partitions")
        ]

    wait_until(lambda: start_offsets() == ["10"], 30, "start offset 10 on the group's page")
    page = http_get(f"{base}/groups/{group}")[1]
    assert 'name="kind" value="share"' in page
    form = {
        "csrf": csrf_token(page),
        "topic": topic,
        "to": "earliest",
        "value": "",
        "kind": "share",
    }
    status, body = post(f"{base}/groups/{group}/reset", form)
    assert status == 200, body
    assert Page(body).rows("reset-plan") == [[topic, "0", "10", "0"]]
    assert start_offsets() == ["10"]  # a dry run changes nothing
    status, body = post(f"{base}/groups/{group}/reset", form | {"execute": "1", "confirm": group})
    assert (status, outcome(body)) == (200, "Done."), body
    assert start_offsets() == ["0"]
    again = member()
    try:
        assert sorted(drain(again, 10)) == sorted(b"v%d" % i for i in range(10))
    finally:
        again.close()


def test_browsing_a_large_topic_from_its_middle_reads_only_that_page(console):
    """A 30 MB partition browsed from offset 50,000 (and its next page, and the newest
    records): each page shows its 50 records and says it read the batch holding its first
    record and at most the next one (two 1 MiB reads: a page whose 50 records cross a batch
    boundary needs the second; the producer's batches are up to 1 MB), never the topic."""
    broker, base = console
    topic = f"large-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    count, size = 100_000, 300
    payload = os.urandom(size * 64)  # random, so compression does not shrink the log
    records = (
        {"value": b"%06d" % i + payload[(i % 64) * size : (i % 64 + 1) * size]}
        for i in range(count)
    )
    assert not produce(broker.bootstrap, topic, records, timeout=120, linger_ms=20).errors

    def browse(query: str) -> tuple[list[int], int, str]:
        status, body = http_get(f"{base}/topics/{topic}/messages?partition=0&limit=50&{query}")
        assert status == 200, body[:500]
        page = Page(body)
        read = int(re.sub(r"\D", "", page.by_id["log-read"]))
        nexts = re.findall(r'href="([^"]*positions=[^"]*)" class="next"', body)
        return [int(row[1]) for row in page.rows("messages")], read, html.unescape(nexts[0])

    two_reads = 2 << 20
    offsets, read, following = browse("mode=offset&offset=50000")
    assert offsets == list(range(50_000, 50_050))
    assert 0 < read <= two_reads, read
    status, body = http_get(base + following)
    page = Page(body)
    assert [int(row[1]) for row in page.rows("messages")] == list(range(50_050, 50_100))
    assert int(re.sub(r"\D", "", page.by_id["log-read"])) <= two_reads
    offsets, read, _ = browse("mode=newest")
    assert offsets == list(range(count - 50, count))
    assert 0 < read <= two_reads, read
