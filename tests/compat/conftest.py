"""Fixtures for the compat suite: real clients against a real broker process.

By default one raftka broker is started for the session (`bootstrap`) and tests that need
their own broker use `broker_factory`. With `--bootstrap-servers HOST:PORT` the suite runs
against that external Kafka-compatible broker instead, and `broker_factory` tests are skipped.
"""

from __future__ import annotations

import re
import shutil
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from brokers import Brokers  # noqa: E402
from clients import create_topic  # noqa: E402
from harness import (  # noqa: E402
    BrokerProcess,
    BrokerStopError,
    ClusterProcess,
    JavaTool,
    find_java_jars,
)
from required import clients_required, missing_client  # noqa: E402

BROKERS_KEY = pytest.StashKey[list[BrokerProcess | ClusterProcess]]()
# Per node (a module, the session): fixture name -> the brokers that fixture started.
SCOPED_BROKERS_KEY = pytest.StashKey[dict[str, list[BrokerProcess | ClusterProcess]]]()
SESSION_BROKER_KEY = pytest.StashKey[BrokerProcess]()
SESSION_BROKER_USERS = {"bootstrap"}
LOG_TAIL_LINES = 40
DEFAULT_TEST_TIMEOUT_S = 180


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("raftka compat")
    group.addoption(
        "--bootstrap-servers",
        metavar="HOST:PORT",
        default=None,
        help="run the compat suite against this external Kafka-compatible broker "
        "instead of starting raftka",
    )
    group.addoption(
        "--broker-config",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="extra --config for the session broker (repeatable)",
    )


def pytest_configure(config: pytest.Config) -> None:
    # kafka-python loads its protocol schemas with deprecated importlib.resources calls.
    for message in ("read_text is deprecated", "open_text is deprecated"):
        config.addinivalue_line("filterwarnings", f"ignore:{message}:DeprecationWarning")


_skipped: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under scripts/test every compat test must run: a skip there means a client or tool
    is missing or a test skipped itself for a reason nobody reviewed, so the run fails."""
    if not _skipped or not clients_required():
        return
    if session.config.getoption("--bootstrap-servers"):
        return  # against another broker, the tests that need raftka processes skip by design
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_line(
            f"{len(_skipped)} compat test(s) skipped where every test must run "
            "(RAFTKA_REQUIRE_CLIENTS=0 allows it): " + ", ".join(_skipped[:10]),
            red=True,
        )
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A client waiting on a broker that never answers must fail the test, not hang the run.
    if not config.pluginmanager.hasplugin("timeout"):
        return
    compat_dir = Path(__file__).resolve().parent
    for item in items:
        in_compat = compat_dir in Path(str(item.path)).resolve().parents
        if in_compat and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DEFAULT_TEST_TIMEOUT_S))


def _group_dropped(item: pytest.Item) -> bool:
    """Under `--dist loadgroup` pytest-xdist groups a test by an `@group` suffix it gives its
    node id; a pytest that ignores the suffix (pyproject.toml says which) would silently run
    a group's tests on several workers at once: two fault tests, or two Spark JVMs."""
    return (
        getattr(item.config.option, "loadgroup", False)  # on an xdist worker of loadgroup
        and item.get_closest_marker("xdist_group") is not None
        and "@" not in item.nodeid
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if _group_dropped(item):
        pytest.fail(
            f"pytest {pytest.__version__} dropped this test's xdist_group: the tests of its "
            "group would not share one worker (see pyproject.toml)",
            pytrace=False,
        )


def _external_bootstrap(config: pytest.Config) -> str | None:
    return config.getoption("--bootstrap-servers")


def _track(request: pytest.FixtureRequest, broker: BrokerProcess | ClusterProcess) -> None:
    """Remember which brokers a test used, so a failure report can show their logs."""
    brokers = request.node.stash.setdefault(BROKERS_KEY, [])
    if broker not in brokers:
        brokers.append(broker)


def _brokers_used(item: pytest.Item) -> list[BrokerProcess]:
    """The brokers whose logs a failure of `item` shows: those its own fixtures started,
    those of the module's (or the session's) broker fixtures it requests, and the
    session broker if it talks to it; a cluster's nodes as they are now."""
    tracked = list(item.stash.get(BROKERS_KEY, []))
    used = set(getattr(item, "fixturenames", ()))
    for node in item.listchain()[:-1]:
        for fixture, started in node.stash.get(SCOPED_BROKERS_KEY, {}).items():
            if fixture in used:
                tracked += started
    brokers: list[BrokerProcess] = []
    for process in tracked:
        for broker in process.nodes if isinstance(process, ClusterProcess) else [process]:
            if broker not in brokers:
                brokers.append(broker)
    session_broker = item.config.stash.get(SESSION_BROKER_KEY, None)
    wants_session = session_broker is not None and used & SESSION_BROKER_USERS
    if wants_session and session_broker not in brokers:
        brokers.insert(0, session_broker)
    return brokers


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for broker in _brokers_used(item):
            report.sections.append(
                (
                    f"broker {broker.bootstrap} log tail ({broker.log_path})",
                    broker.log_tail(LOG_TAIL_LINES),
                )
            )


# -- brokers -------------------------------------------------------------------------------


def _close(brokers: Brokers) -> None:
    try:
        brokers.close()
    except BrokerStopError as exc:
        pytest.fail(str(exc))


def _needs_own_brokers(request: pytest.FixtureRequest) -> None:
    if _external_bootstrap(request.config):
        pytest.skip("needs its own raftka brokers; not available with --bootstrap-servers")


def _scoped_brokers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Brokers:
    """A `Brokers` whose processes a failure report shows for every test that requests
    the fixture `request` is for (a module's broker fixture, say)."""
    by_fixture = request.node.stash.setdefault(SCOPED_BROKERS_KEY, {})
    started = by_fixture.setdefault(request.fixturename, [])
    return Brokers(tmp_path_factory, started.append)


@pytest.fixture(scope="session")
def _session_broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess | None]:
    if _external_bootstrap(request.config):
        yield None
        return
    config = {}
    for item in request.config.getoption("--broker-config"):
        key, sep, value = item.partition("=")
        if not sep:
            raise pytest.UsageError(f"--broker-config expects KEY=VALUE, got {item!r}")
        config[key] = value
    brokers = Brokers(tmp_path_factory, lambda broker: None)
    broker = brokers.broker(config, name="session-broker", start=False)
    request.config.stash[SESSION_BROKER_KEY] = broker
    try:
        broker.start()
        yield broker
    finally:
        _close(brokers)


@pytest.fixture(scope="session")
def bootstrap(request: pytest.FixtureRequest, _session_broker: BrokerProcess | None) -> str:
    """HOST:PORT of the shared session broker (or of --bootstrap-servers)."""
    external = _external_bootstrap(request.config)
    if external:
        return external
    assert _session_broker is not None
    return _session_broker.bootstrap


@pytest.fixture(scope="session")
def on_raftka(request: pytest.FixtureRequest) -> bool:
    """True when the suite runs against the raftka it started, False with --bootstrap-servers.
    Where raftka deliberately answers differently from Apache Kafka (docs/reference/kafka-api.md,
    "Deliberate differences from Apache Kafka"), a test accepts either answer from another
    broker and raftka's own from raftka."""
    return not _external_bootstrap(request.config)


@pytest.fixture
def brokers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Brokers]:
    """`brokers.broker(config=None, **kwargs)` and `brokers.cluster(size=3, config=None,
    **kwargs)` for this test: started, their logs shown if the test fails, stopped cleanly
    after it (see `Brokers`)."""
    _needs_own_brokers(request)
    owned = Brokers(tmp_path_factory, lambda broker: _track(request, broker))
    try:
        yield owned
    finally:
        _close(owned)


@pytest.fixture(scope="module")
def module_brokers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Brokers]:
    """`brokers` shared by a module's tests: for a module-scoped broker fixture, whose
    processes' logs a failure shows for every test that requests that fixture."""
    _needs_own_brokers(request)
    owned = _scoped_brokers(request, tmp_path_factory)
    try:
        yield owned
    finally:
        _close(owned)


@pytest.fixture
def broker_factory(brokers: Brokers) -> Callable[..., BrokerProcess]:
    """`broker_factory(config=None, **kwargs) -> BrokerProcess`, started; stopped cleanly
    after the test."""
    return brokers.broker


@pytest.fixture
def cluster_factory(brokers: Brokers) -> Callable[..., ClusterProcess]:
    """`cluster_factory(size=3, config=None, **kwargs) -> ClusterProcess`, started (every
    node lists all brokers); stopped after the test (a node left paused is resumed first).
    A failure report shows every node's log tail."""
    return brokers.cluster


# -- topics --------------------------------------------------------------------------------


def _topic_prefix(node_name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", node_name).strip("-")[:80] or "t"


@pytest.fixture
def new_topic(request: pytest.FixtureRequest) -> Callable[..., str]:
    """`new_topic(partitions=1, config=None, name=None, bootstrap=None) -> str`.

    Creates a uniquely named topic on `bootstrap` (default: the session broker, started on
    first use) and returns once Metadata lists every partition with a leader.
    `replication_factor=1` may be passed too.
    """
    prefix = _topic_prefix(request.node.name)

    def make(
        partitions: int = 1,
        config: dict[str, str] | None = None,
        name: str | None = None,
        bootstrap: str | None = None,
        replication_factor: int = 1,
    ) -> str:
        if bootstrap is None:
            bootstrap = request.getfixturevalue("bootstrap")
            session_broker = request.config.stash.get(SESSION_BROKER_KEY, None)
            if session_broker is not None:
                _track(request, session_broker)
        topic = name or f"{prefix}-{uuid.uuid4().hex[:10]}"
        create_topic(
            bootstrap,
            topic,
            partitions=partitions,
            config=config,
            replication_factor=replication_factor,
        )
        return topic

    return make


# -- client tools --------------------------------------------------------------------------


@pytest.fixture(scope="session")
def java_tool() -> JavaTool:
    """`java_tool(*args, timeout=60) -> list[str]`: runs KafkaTool (see java/KafkaTool.java)."""
    java, javac = shutil.which("java"), shutil.which("javac")
    if not (java and javac):
        missing_client("java/javac not found: install a JDK (see scripts/setup)")
    jars = find_java_jars()
    if jars is None:
        missing_client("Java client jars not found: run scripts/setup")
    tool = JavaTool(jars, java=java, javac=javac)
    tool.compile()
    return tool


@pytest.fixture(scope="session")
def kcat_bin() -> str:
    """Path to kcat."""
    path = shutil.which("kcat")
    if path is None:
        missing_client("kcat not found: run scripts/setup as root or apt-get install kcat")
    return path
