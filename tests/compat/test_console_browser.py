"""The web console used as a person uses it: Selenium drives Debian's chromium (through
Debian's chromium-driver) to click through the pages of a real broker process. Forms are
filled and submitted by clicking their buttons, links are followed by clicking them, and
every step is checked on what the page shows. A failing step keeps a screenshot of the page
(beside the test's temporary files); every step's page is kept as clicked-STEP.png in the
console tests' screenshot folder (build/console-screenshots, or RAFTKA_CONSOLE_SCREENSHOTS).
The broker has a SASL listener, so each walk starts by signing in on the console's form."""

from __future__ import annotations

import re
import shutil
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from clients import consume, create_topic, make_consumer, produce, wait_until
from confluent_kafka import (
    AcknowledgeType,
    ConsumerGroupTopicPartitions,
    ShareConsumer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from harness import free_port
from required import missing_client
from secured import password, start_sasl_broker
from test_console import screenshots_kept

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support.ui import Select, WebDriverWait
except ImportError:  # the driver fixture fails (or skips) each test, as for a missing client
    webdriver = None

#: How long the browser may take to show what a step waits for (a page load, a refresh).
SHOWN_WITHIN_S = 30.0
#: Share groups read from the start, and hold a record's lock past the test.
OPERATOR = "operator"
SHARE_CONFIG = {
    "share.auto.offset.reset": "earliest",
    "group.share.record.lock.duration.ms": "60000",
    "group.share.heartbeat.interval.ms": "500",
}


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


@pytest.fixture(scope="module")
def console(module_brokers):
    """A broker with a SASL listener (so its console asks to sign in; clients use its
    PLAINTEXT one) and its console; (the broker, the console's base URL)."""
    address = f"127.0.0.1:{free_port()}"
    secured = start_sasl_broker(
        module_brokers,
        (OPERATOR,),
        authorizer=False,
        config={"console.listen": address, **SHARE_CONFIG},
        name="console-clicked",
    )
    base = f"http://{address}"
    wait_until(lambda: http_status(base + "/login") == 200, 30, "the console answers /login")
    return secured.broker, base


def sign_in(driver: WebDriver, base: str) -> None:
    """Signs in on the console's form, as a person would."""
    driver.get(base + "/topics")
    assert driver.title == "Sign in · raftka"  # sent to sign in first
    form = form_of(driver, "/login")
    type_into(form, "username", OPERATOR)
    type_into(form, "password", password(OPERATOR))
    click_button(driver, form, "Sign in")
    assert driver.title == "Overview · raftka"
    assert text_of(driver, "user") == OPERATOR


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[WebDriver]:
    """Headless chromium under chromedriver, both Debian's (never a downloaded build)."""
    if webdriver is None:
        missing_client("selenium not installed: run scripts/setup")
    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or chromedriver is None:
        missing_client("chromium or chromedriver not found: run scripts/setup as root")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless",
        "--no-sandbox",  # tests run as root in containers
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--window-size=1400,1000",
        f"--user-data-dir={tmp_path / 'profile'}",
    ):
        options.add_argument(argument)
    instance = webdriver.Chrome(options=options, service=Service(executable_path=chromedriver))
    instance.set_page_load_timeout(SHOWN_WITHIN_S)
    try:
        yield instance
    finally:
        instance.quit()


class Steps:
    """Names each step of a walk through the console; a failing step keeps a screenshot."""

    def __init__(self, driver: WebDriver, shots: Path) -> None:
        self.driver = driver
        self.shots = shots
        self.keep = screenshots_kept()

    def __call__(self, name: str) -> _Step:
        return _Step(self, name)


class _Step:
    def __init__(self, steps: Steps, name: str) -> None:
        self.steps = steps
        self.name = name

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, trace) -> None:
        driver = self.steps.driver
        if self.steps.keep is not None:
            driver.save_screenshot(str(self.steps.keep / f"clicked-{self.name}.png"))
        if error is not None:
            self.steps.shots.mkdir(parents=True, exist_ok=True)
            shot = self.steps.shots / f"{self.name}.png"
            try:
                driver.save_screenshot(str(shot))
                error.add_note(f"screenshot of {driver.current_url}: {shot}")
            except Exception as exc:  # the failure itself is what matters
                error.add_note(f"no screenshot of {driver.current_url}: {exc}")


def text_of(driver: WebDriver, element_id: str) -> str:
    """The shown text of the element with that id ("" when there is none), read in one
    script so that a live refresh replacing the element cannot come in between."""
    shown = driver.execute_script(
        "const e = document.getElementById(arguments[0]); return e ? e.innerText : '';",
        element_id,
    )
    return " ".join(str(shown).split())


def rows_of(driver: WebDriver, table_id: str) -> list[list[str]]:
    """The body rows of a table as their cells' shown text (white space collapsed), read in
    one script as `text_of` is."""
    rows = driver.execute_script(
        "const t = document.getElementById(arguments[0]);"
        "return t ? Array.from(t.querySelectorAll('tbody tr'),"
        " r => Array.from(r.querySelectorAll('td'), c => c.innerText)) : [];",
        table_id,
    )
    return [[" ".join(str(cell).split()) for cell in row] for row in rows]


def overview_counts(driver: WebDriver) -> tuple[int, int]:
    """The overview's counts of topics and partitions, as shown."""
    found = re.search(r"Topics (\d+) Partitions (\d+)", text_of(driver, "content"))
    assert found, text_of(driver, "content")
    return int(found.group(1)), int(found.group(2))


def form_of(driver: WebDriver, action: str):
    """The form posting to `action` (a path)."""
    return driver.find_element(By.CSS_SELECTOR, f'form[action="{action}"]')


def type_into(form, name: str, text: str) -> None:
    field = form.find_element(By.NAME, name)
    field.clear()
    field.send_keys(text)


def follow(driver: WebDriver, element) -> None:
    """Clicks what leads to another page and waits until the browser has left this one
    (a click returns before the page it asked for is loaded).

    Leaving is told by a mark set on this page's window, which the next page's new window
    does not have, never by asking whether an element of this page went stale: chromedriver
    sometimes answers that question, for a node of a document being replaced, with "unknown
    error: Node with given id does not belong to the document" instead of a stale element
    (SeleniumHQ/selenium#15401; it failed this test about 1 run in 7)."""
    mark = uuid.uuid4().hex
    driver.execute_script("window.raftkaLeaving = arguments[0];", mark)
    element.click()
    WebDriverWait(driver, SHOWN_WITHIN_S, poll_frequency=0.1).until(
        lambda d: d.execute_script(
            "return window.raftkaLeaving !== arguments[0] && document.readyState === 'complete';",
            mark,
        ),
        message="the click led to no page that finished loading",
    )


def click_button(driver: WebDriver, form, label: str) -> None:
    follow(driver, form.find_element(By.XPATH, f'.//button[normalize-space()="{label}"]'))


def click_link(driver: WebDriver, text: str) -> None:
    follow(driver, driver.find_element(By.LINK_TEXT, text))


def shown(driver: WebDriver, what: str, check) -> None:
    """Waits until `check(driver)` holds on the page as shown (a refresh may bring it)."""
    WebDriverWait(driver, SHOWN_WITHIN_S, poll_frequency=0.25).until(
        lambda d: check(d), message=f"the page never showed {what}"
    )


@pytest.mark.timeout(300)
def test_an_operator_clicks_through_topic_messages_lag_reset_and_delete(console, driver, tmp_path):
    broker, base = console
    step = Steps(driver, tmp_path / "screenshots")
    topic = f"clicked-{uuid.uuid4().hex[:8]}"
    group = f"clicked-group-{topic[-8:]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    with step("sign-in-form"):
        driver.get(base + "/login")
        assert driver.title == "Sign in · raftka"
        login = form_of(driver, "/login")
        assert login.find_element(By.NAME, "password").get_attribute("type") == "password"
    with step("sign-in"):
        sign_in(driver, base)

    with step("create-topic"):
        driver.get(base + "/topics")
        assert driver.title == "Topics · raftka"
        create = form_of(driver, "/topics")
        type_into(create, "name", topic)
        type_into(create, "partitions", "2")
        click_button(driver, create, "Create")
        assert text_of(driver, "outcome") == "Done."
        click_link(driver, f"topic {topic}")
        assert driver.title == f"Topic {topic} · raftka"
        assert [row[0] for row in rows_of(driver, "partitions")] == ["0", "1"]
    assert topic in admin.list_topics(timeout=10).topics

    n = 30
    records = [
        {"key": f"key-{i}".encode(), "value": f"value {i}".encode(), "partition": i % 2}
        for i in range(n)
    ]
    result = produce(broker.bootstrap, topic, records)
    assert not result.errors, result.errors[:5]
    with step("topic-live"):
        # The topic's page, loaded before the produce, shows the new high watermarks by
        # itself (partition, leader, epoch, replicas, ISR, replica lag, low watermark, log
        # start, high watermark, ...).
        shown(
            driver,
            "15 records in each partition",
            lambda d: [row[8] for row in rows_of(d, "partitions")] == ["15", "15"],
        )

    with step("find-by-key"):
        click_link(driver, "browse")
        assert driver.title == f"Messages of {topic} · raftka"
        browse = driver.find_element(By.CSS_SELECTOR, 'form[method="get"]')
        Select(browse.find_element(By.NAME, "partition")).select_by_value("all")
        Select(browse.find_element(By.NAME, "mode")).select_by_value("offset")
        type_into(browse, "offset", "0")
        type_into(browse, "filter", "key-17")
        click_button(driver, browse, "Show")
        found = rows_of(driver, "messages")
        # partition, offset, timestamp, key, value, headers: key-17 is partition 1's 9th
        assert [(row[0], row[1], row[3], row[4]) for row in found] == [
            ("1", "8", "key-17 text", "value 17 text")
        ]

    consumer = make_consumer(broker.bootstrap, group_id=group)
    try:
        got = consume(broker.bootstrap, topic, [0, 1], count=n, consumer=consumer, timeout=60)
        assert sum(len(messages) for messages in got.values()) == n
        consumer.commit(
            offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 5)], asynchronous=False
        )
        with step("group-lag"):
            driver.get(f"{base}/groups")
            click_link(driver, group)
            assert driver.title == f"Group {group} · raftka"
            assert text_of(driver, "total-lag") == str(n - 10)
            assert rows_of(driver, "lag") == [
                [topic, "0", "5", "15", "10"],
                [topic, "1", "5", "15", "10"],
            ]
        # The page refreshes itself: the lag moves without a reload once the group commits.
        consumer.commit(
            offsets=[TopicPartition(topic, 0, 15), TopicPartition(topic, 1, 12)],
            asynchronous=False,
        )
        with step("group-lag-moved"):
            shown(driver, "a total lag of 3", lambda d: text_of(d, "total-lag") == "3")
            assert rows_of(driver, "lag")[1] == [topic, "1", "12", "15", "3"]
    finally:
        consumer.close()

    with step("reset-dry-run"):
        reset = form_of(driver, f"/groups/{group}/reset")
        type_into(reset, "topic", topic)
        Select(reset.find_element(By.NAME, "to")).select_by_value("earliest")
        click_button(driver, reset, "Preview (dry run)")
        assert driver.title == f"Reset offsets of {group} · raftka"
        assert rows_of(driver, "reset-plan") == [[topic, "0", "15", "0"], [topic, "1", "12", "0"]]
    # The dry run changed nothing.
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    offsets = {tp.partition: tp.offset for tp in listed[group].result(30).topic_partitions}
    assert offsets == {0: 15, 1: 12}
    with step("reset-execute"):
        execute = driver.find_element(
            By.XPATH, '//form[.//button[normalize-space()="Reset offsets"]]'
        )
        type_into(execute, "confirm", group)
        click_button(driver, execute, "Reset offsets")
        assert text_of(driver, "outcome") == "Done."
        click_link(driver, f"← group {group}")
        assert text_of(driver, "total-lag") == str(n)
        assert rows_of(driver, "lag") == [
            [topic, "0", "0", "15", "15"],
            [topic, "1", "0", "15", "15"],
        ]

    with step("delete-topic"):
        click_link(driver, topic)
        assert driver.title == f"Topic {topic} · raftka"
        delete = form_of(driver, f"/topics/{topic}/delete")
        type_into(delete, "confirm", topic)
        click_button(driver, delete, "Delete topic")
        assert text_of(driver, "outcome") == "Done."
        click_link(driver, "← topics")
        assert driver.title == "Topics · raftka"
        listed = [row[0] for row in rows_of(driver, "topics")]
        assert topic not in listed
    wait_until(lambda: topic not in admin.list_topics(timeout=10).topics, 10, "the topic goes")


@pytest.mark.timeout(300)
def test_a_share_groups_page_shows_its_records_in_flight(console, driver, tmp_path):
    """A share consumer takes ten records, accepts eight, rejects one and holds the first
    unacknowledged: the group page shows the member, and the share-partition's records in
    flight by state and delivery count; once the member leaves, the held record is available
    again."""
    broker, base = console
    step = Steps(driver, tmp_path / "screenshots")
    sign_in(driver, base)
    topic = f"shared-{uuid.uuid4().hex[:8]}"
    group = f"share-group-{topic[-8:]}"
    with step("overview-live"):
        # The overview, left open, counts the new topic by itself, without a reload.
        page = driver.find_element(By.TAG_NAME, "html")
        before = overview_counts(driver)
        create_topic(broker.bootstrap, topic, partitions=1)
        shown(
            driver,
            "one more topic and partition",
            lambda d: all(now > then for now, then in zip(overview_counts(d), before, strict=True)),
        )
        assert page.tag_name == "html"  # the same document: not reloaded
    result = produce(broker.bootstrap, topic, [{"value": b"v%d" % i} for i in range(10)])
    assert not result.errors, result.errors[:5]
    consumer = ShareConsumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
        }
    )
    group_url = f"{base}/groups/{group}"
    try:
        consumer.subscribe([topic])
        seen: set[int] = set()

        def take() -> bool:
            for message in consumer.poll(0.5):
                if message.error() is not None or message.offset() == 0:
                    continue  # offset 0 stays acquired, unacknowledged
                seen.add(message.offset())
                kind = AcknowledgeType.REJECT if message.offset() == 5 else AcknowledgeType.ACCEPT
                consumer.acknowledge(message, kind)
            consumer.commit_sync(10)
            return len(seen) == 9

        wait_until(take, 30, "nine records acknowledged by the share consumer")
        with step("share-group"):
            driver.get(group_url)
            assert driver.title == f"Group {group} · raftka"
            assert text_of(driver, "group-state") == "Stable"
            members = rows_of(driver, "members")
            assert len(members) == 1 and members[0][5] == f"{topic}: 0"
            # topic, partition, start, lag, acquired, available, acknowledged, archived, deliveries
            assert rows_of(driver, "share-partitions") == [
                [topic, "0", "0", "1", "1", "0", "8", "1", "1: 10"]
            ]
            assert text_of(driver, "total-lag") == "1"
    finally:
        consumer.close()
    with step("share-group-left"):
        # The page refreshes itself: the member goes and its held record is released.
        shown(driver, "no member", lambda d: text_of(d, "group-state") == "Empty")
        shown(
            driver,
            "the held record available again",
            lambda d: (
                rows_of(d, "share-partitions")
                == [[topic, "0", "0", "1", "0", "1", "8", "1", "1: 10"]]
            ),
        )
