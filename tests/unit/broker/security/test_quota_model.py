"""Client quotas: Kafka's precedence, the sampled rate and throttle time, the records and
snapshots that carry quotas, AlterClientQuotas/DescribeClientQuotas validation, and the
connection limits."""

from __future__ import annotations

import dataclasses
import datetime
import time
from types import SimpleNamespace

import pytest
import trio
import trio.testing
from kio.schema.errors import ErrorCode

from raftka.broker.cluster.image import MetadataImage
from raftka.broker.cluster.records import ClientQuota, decode_metadata_batch, encode_batch
from raftka.broker.cluster.snapshot import image_from_dict, image_to_dict
from raftka.broker.quotas import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    ClientQuotaManager,
    QuotaRequestError,
    RateWindow,
    RequestTimer,
    Sensor,
    cap_fetch_bytes,
    describe_quotas,
    quota_entity,
    resolve_quota,
    throttle_time_ms,
    throttled_fetch_response,
    validate_entity,
    validate_ops,
    with_throttle_time,
)
from raftka.broker.server import ConnectionLimits, parse_connection_overrides


def entity(user: str | None | bool = False, client: str | None | bool = False) -> tuple:
    """False: the type is absent; None: the default entity."""
    pairs = []
    if user is not False:
        pairs.append((USER, user))
    if client is not False:
        pairs.append((CLIENT_ID, client))
    return quota_entity(pairs)


# -- precedence (Kafka's /config/users/.../clients/... order) -------------------------------

PRECEDENCE = [
    (entity("u", "c"), ("u", "c")),
    (entity("u", None), ("u", "c")),
    (entity("u"), ("u", "")),
    (entity(None, "c"), ("u", "c")),
    (entity(None, None), ("u", "c")),
    (entity(None), ("u", "")),
    (entity(client="c"), ("", "c")),
    (entity(client=None), ("", "c")),
]


def test_each_level_wins_over_every_level_below_it() -> None:
    for level, (winner, sensor) in enumerate(PRECEDENCE):
        quotas = {e: float(i + 1) for i, (e, _) in enumerate(PRECEDENCE[level:], start=level)}
        assert resolve_quota(quotas, "u", "c") == (float(level + 1), sensor), winner


def test_other_names_do_not_match_and_no_quota_is_none() -> None:
    quotas = {entity("v", "c"): 1.0, entity("u", "d"): 2.0, entity(client="d"): 3.0}
    assert resolve_quota(quotas, "u", "c") is None
    assert resolve_quota({}, "u", "c") is None


def test_a_user_quota_is_shared_by_the_users_clients() -> None:
    quotas = {entity("alice"): 100.0}
    assert resolve_quota(quotas, "alice", "a") == (100.0, ("alice", ""))
    assert resolve_quota(quotas, "alice", "b") == (100.0, ("alice", ""))
    # The default client-id quota is measured per client id.
    quotas = {entity(client=None): 5.0}
    assert resolve_quota(quotas, "x", "a")[1] != resolve_quota(quotas, "x", "b")[1]  # type: ignore[index]


# -- the sampled rate and the throttle time -------------------------------------------------


def test_rate_counts_at_least_samples_minus_one_windows() -> None:
    window = RateWindow(samples=11, window_s=1.0)
    window.record(1000, now_s=100.0)
    # Just recorded: measured over 10 windows, not over no time at all.
    assert window.elapsed_s(100.0) == pytest.approx(10.0)
    assert window.rate(100.0) == pytest.approx(100.0)
    window.record(1000, now_s=114.5)
    # 11 windows later the first sample has expired.
    assert window.rate(114.5) == pytest.approx(100.0)


def test_rate_over_a_full_window_span() -> None:
    window = RateWindow(samples=3, window_s=1.0)
    for second in range(10):
        window.record(500, now_s=float(second))
    # Samples started at 7, 8, 9; at 9.5 the span is 2.5 s holding 1500 bytes.
    assert window.rate(9.5) == pytest.approx(1500 / 2.5)


def test_throttle_time_brings_the_rate_back_to_the_quota() -> None:
    # Kafka's QuotaUtils: X = (O - T) / T * W.
    assert throttle_time_ms(300.0, 100.0, 10.0) == 20_000
    assert throttle_time_ms(100.0, 100.0, 10.0) == 0
    sensor = Sensor(100.0, RateWindow(11, 1.0))
    assert sensor.record(1000, now_s=0.0) == 0  # 1000 B over 10 s is the quota exactly
    throttle = sensor.record(1000, now_s=0.5)
    assert throttle == round((2000 / 10.5 - 100) / 100 * 10.5 * 1000)
    # Once the samples have aged out, a small request passes again.
    assert sensor.record(1, now_s=11.5) == 0


def test_request_quota_throttle_is_bounded_by_one_window() -> None:
    manager = ClientQuotaManager(lambda: {entity(client="c"): {REQUEST_PERCENTAGE: 1.0}})
    manager.timer = object()  # type: ignore[assignment]  # not installing an instrument here
    client = manager.for_client("ANONYMOUS", "c")
    assert client is not None and client.request is not None
    assert client.request.record(10_000.0, now_s=1.0) == 1000


def test_unrecord_takes_back_a_throttled_fetch() -> None:
    sensor = Sensor(100.0, RateWindow(11, 1.0))
    sensor.record(900, now_s=0.0)
    assert sensor.record(5000, now_s=0.1) > 0
    sensor.unrecord(5000, now_s=0.1)
    assert sensor.window.rate(0.1) == pytest.approx(900 / 10.1)


# -- the manager ------------------------------------------------------------------------------


def test_manager_picks_up_quota_changes_and_keeps_windows() -> None:
    image = MetadataImage()
    manager = ClientQuotaManager(lambda: image.client_quotas)
    assert not manager.active
    image.apply(ClientQuota(entity(client="c"), PRODUCER_BYTE_RATE, 1000.0), 1)
    assert manager.active
    client = manager.for_client("ANONYMOUS", "c")
    assert client is not None and client.fetch is None and client.request is None
    assert client.produce is not None and client.produce.limit == 1000.0
    client.produce.record(5000, now_s=0.0)
    assert manager.for_client("ANONYMOUS", "other") is None
    image.apply(ClientQuota(entity(client="c"), PRODUCER_BYTE_RATE, 2000.0), 2)
    again = manager.for_client("ANONYMOUS", "c")
    assert again is not None and again.produce is client.produce
    assert again.produce.limit == 2000.0
    image.apply(ClientQuota(entity(client="c"), PRODUCER_BYTE_RATE, None), 3)
    assert not manager.active and manager.for_client("ANONYMOUS", "c") is None


def test_fetch_max_bytes_is_capped_to_one_quota_window() -> None:
    manager = ClientQuotaManager(lambda: {entity(client="c"): {CONSUMER_BYTE_RATE: 1000.0}})
    client = manager.for_client("ANONYMOUS", "c")
    assert client is not None
    assert cap_fetch_bytes(Fetch(50_000_000), client) == Fetch(10_000)
    assert cap_fetch_bytes(Fetch(5_000), client) == Fetch(5_000)


@dataclasses.dataclass(frozen=True)
class Fetch:
    max_bytes: int


def test_throttle_time_is_set_in_kio_responses() -> None:
    from kio.schema.fetch.v12.response import FetchResponse
    from kio.schema.produce.v9.response import ProduceResponse

    produce = ProduceResponse(responses=(), throttle_time=datetime.timedelta(0))
    assert with_throttle_time(produce, 1500).throttle_time == datetime.timedelta(seconds=1.5)
    fetch = FetchResponse(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=0,
        responses=("stand-in",),  # type: ignore[arg-type]
    )
    throttled = throttled_fetch_response(fetch, 20)
    assert throttled.responses == () and throttled.throttle_time.total_seconds() == 0.02


# -- records and snapshots ------------------------------------------------------------------


def test_quota_records_round_trip_and_apply() -> None:
    records = [
        ClientQuota(entity("alice", None), PRODUCER_BYTE_RATE, 1048576),
        ClientQuota(entity(client="c"), REQUEST_PERCENTAGE, 12.5),
        ClientQuota(entity(client="c"), REQUEST_PERCENTAGE, None),
    ]
    decoded = decode_metadata_batch(encode_batch(records))
    assert decoded == records
    image = MetadataImage()
    for offset, record in enumerate(decoded):
        assert image.apply(record, offset) == []
    assert image.client_quotas == {
        (("client-id", None), ("user", "alice")): {PRODUCER_BYTE_RATE: 1048576.0}
    }


def test_snapshot_keeps_quotas_and_old_snapshots_still_load() -> None:
    image = MetadataImage()
    image.apply(ClientQuota(entity("alice", None), PRODUCER_BYTE_RATE, 1024), 0)
    image.apply(ClientQuota(entity(client="c"), CONSUMER_BYTE_RATE, 2048), 1)
    restored = image_from_dict(image_to_dict(image))
    assert restored.client_quotas == image.client_quotas and restored == image
    old = image_to_dict(image)
    del old["client_quotas"]  # written before quotas existed
    assert image_from_dict(old).client_quotas == {}


# -- AlterClientQuotas / DescribeClientQuotas validation -------------------------------------


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        ([], "Invalid empty client quota entity"),
        ([(USER, "a"), (USER, "b")], "duplicate entity entry user"),
        ([("group", "g")], "Unhandled client quota entity type: group"),
        ([(USER, "")], "Empty user not supported"),
        ([("ip", "1.2.3.4")], "not supported"),
    ],
)
def test_bad_entities_are_invalid_requests(pairs: list, message: str) -> None:
    with pytest.raises(QuotaRequestError, match=message) as caught:
        validate_entity(pairs)
    assert caught.value.error_code == ErrorCode.invalid_request


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ([("producer_byte_rate", -1.0)], "must be greater than 0"),
        ([("producer_byte_rate", 0.0)], "must be greater than 0"),
        ([("producer_byte_rate", 1.5)], "cannot be a fractional value"),
        ([("consumer_byte_rate", 1e300)], "too large for a LONG"),
        ([("bytes_per_second", 10.0)], "Invalid configuration key bytes_per_second"),
        ([("bytes_per_second", None)], "Invalid configuration key bytes_per_second"),
        ([("request_percentage", 1.0), ("request_percentage", 2.0)], "Duplicate quota key"),
    ],
)
def test_bad_ops_are_invalid_requests(ops: list, message: str) -> None:
    with pytest.raises(QuotaRequestError, match=message):
        validate_ops(ops)


def test_good_ops_and_entities() -> None:
    assert validate_entity([(USER, None), (CLIENT_ID, "c")]) == entity(None, "c")
    assert validate_ops(
        [("request_percentage", 0.5), ("producer_byte_rate", None), ("controller_mutation_rate", 3)]
    ) == {"request_percentage": 0.5, "producer_byte_rate": None, "controller_mutation_rate": 3}


QUOTAS = {
    entity("alice"): {PRODUCER_BYTE_RATE: 1.0},
    entity("alice", "c"): {PRODUCER_BYTE_RATE: 2.0},
    entity(None): {PRODUCER_BYTE_RATE: 3.0},
    entity(client="c"): {PRODUCER_BYTE_RATE: 4.0},
    entity(client=None): {PRODUCER_BYTE_RATE: 5.0},
}


def described(components: list, strict: bool = False) -> list:
    return [e for e, _ in describe_quotas(QUOTAS, components, strict)]


def test_describe_matches_exact_default_and_specified() -> None:
    assert set(described([])) == set(QUOTAS)
    assert described([], strict=True) == []
    assert set(described([(USER, MATCH_EXACT, "alice")])) == {entity("alice"), entity("alice", "c")}
    assert described([(USER, MATCH_EXACT, "alice")], strict=True) == [entity("alice")]
    assert described([(USER, MATCH_DEFAULT, None)]) == [entity(None)]
    assert set(described([(CLIENT_ID, MATCH_SPECIFIED, None)])) == {
        entity("alice", "c"),
        entity(client="c"),
        entity(client=None),
    }
    assert described([(CLIENT_ID, MATCH_SPECIFIED, None)], strict=True) == [
        entity(client=None),
        entity(client="c"),
    ]


@pytest.mark.parametrize(
    ("components", "message", "code"),
    [
        ([("", MATCH_EXACT, "a")], "Invalid empty entity type", ErrorCode.invalid_request),
        ([(USER, MATCH_EXACT, None)], "MATCH_TYPE_EXACT", ErrorCode.invalid_request),
        ([(USER, MATCH_DEFAULT, "a")], "MATCH_TYPE_DEFAULT", ErrorCode.invalid_request),
        ([(USER, MATCH_SPECIFIED, "a")], "MATCH_TYPE_SPECIFIED", ErrorCode.invalid_request),
        ([(USER, 7, None)], "Unknown match type 7", ErrorCode.invalid_request),
        (
            [(USER, MATCH_DEFAULT, None), (USER, MATCH_SPECIFIED, None)],
            "cannot appear more than once",
            ErrorCode.invalid_request,
        ),
        (
            [("group", MATCH_SPECIFIED, None)],
            "Unsupported entity type",
            ErrorCode.unsupported_version,
        ),
        (
            [("ip", MATCH_SPECIFIED, None), (USER, MATCH_SPECIFIED, None)],
            "IP filter component should not be used",
            ErrorCode.invalid_request,
        ),
    ],
)
def test_bad_describe_filters(components: list, message: str, code: ErrorCode) -> None:
    with pytest.raises(QuotaRequestError, match=message) as caught:
        describe_quotas(QUOTAS, components, False)
    assert caught.value.error_code == code


# -- connection limits ------------------------------------------------------------------------


def test_per_ip_limits_and_overrides() -> None:
    limits = ConnectionLimits(10, 2, parse_connection_overrides("127.0.0.2:0, localhost:5"))
    assert limits.limit_for("127.0.0.1") == 5  # localhost resolved
    assert limits.limit_for("127.0.0.2") == 0
    assert not limits.try_open("127.0.0.2")
    assert limits.try_open("10.0.0.1") and limits.try_open("10.0.0.1")
    assert not limits.try_open("10.0.0.1")
    limits.closed("10.0.0.1")
    assert limits.try_open("10.0.0.1")
    assert limits.total == 2


@pytest.mark.parametrize("text", ["127.0.0.1", "127.0.0.1:x", ":3", "no.such.host.invalid:3"])
def test_bad_overrides_name_the_entry(text: str) -> None:
    with pytest.raises(ValueError, match="max.connections.per.ip.overrides"):
        parse_connection_overrides(text)


def test_accepting_waits_while_the_broker_is_full() -> None:
    limits = ConnectionLimits(2, 100, {})
    assert limits.try_open("a") and limits.try_open("b")
    admitted: list[float] = []

    async def accept() -> None:
        await limits.wait_for_room()
        admitted.append(trio.current_time())

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(accept)
            await trio.sleep(5)
            assert admitted == []
            limits.closed("a")

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert admitted == [pytest.approx(5)]


# -- request time and authorization -------------------------------------------------------------


def test_request_timer_counts_running_time_not_waiting() -> None:
    timer = RequestTimer()

    def busy(seconds: float) -> None:
        until = time.perf_counter() + seconds
        while time.perf_counter() < until:
            pass

    async def main() -> float:
        trio.lowlevel.add_instrument(timer)  # type: ignore[arg-type]
        task = timer.track()
        busy(0.05)
        await trio.sleep(0.3)  # not counted
        busy(0.05)
        await trio.lowlevel.checkpoint()
        return timer.stop(task)

    spent = trio.run(main)
    assert 0.1 <= spent < 0.3


def _context(api_key: int, allowed: bool, quotas: dict) -> SimpleNamespace:
    return SimpleNamespace(
        api_key=api_key,
        api_version=1,
        authorize=lambda *_: allowed,
        services=SimpleNamespace(
            controller=SimpleNamespace(image=SimpleNamespace(client_quotas=quotas))
        ),
    )


def test_quota_apis_need_cluster_configs_permissions() -> None:
    from kio.schema.alter_client_quotas.v1.request import (
        AlterClientQuotasRequest,
        EntityData,
        EntryData,
        OpData,
    )
    from kio.schema.describe_client_quotas.v1.request import DescribeClientQuotasRequest

    from raftka.broker.handlers.client_quotas import (
        handle_alter_client_quotas,
        handle_describe_client_quotas,
    )

    quotas = {entity("alice"): {PRODUCER_BYTE_RATE: 1.0}}
    describe = DescribeClientQuotasRequest(components=(), strict=False)
    denied = trio.run(handle_describe_client_quotas, _context(48, False, quotas), describe)
    assert denied.error_code == ErrorCode.cluster_authorization_failed and denied.entries is None
    allowed = trio.run(handle_describe_client_quotas, _context(48, True, quotas), describe)
    assert allowed.error_code == ErrorCode.none and len(allowed.entries) == 1
    alter = AlterClientQuotasRequest(
        entries=(
            EntryData(
                entity=(EntityData(entity_type=USER, entity_name="bob"),),
                ops=(OpData(key=PRODUCER_BYTE_RATE, value=5.0, remove=False),),
            ),
        ),
        validate_only=False,
    )
    refused = trio.run(handle_alter_client_quotas, _context(49, False, quotas), alter)
    assert [e.error_code for e in refused.entries] == [ErrorCode.cluster_authorization_failed]
    checked = trio.run(
        handle_alter_client_quotas,
        _context(49, True, quotas),
        dataclasses.replace(alter, validate_only=True),
    )
    assert [e.error_code for e in checked.entries] == [ErrorCode.none]
