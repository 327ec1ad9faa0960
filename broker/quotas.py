"""Client quotas (KIP-13, KIP-55, KIP-124, KIP-257) and their enforcement.

A quota is a number per key (`producer_byte_rate`, `consumer_byte_rate`,
`request_percentage`, `controller_mutation_rate`) set on an entity: a user, a client id,
or a user with a client id, each by name or as the default. They live in the replicated
cluster metadata (`ClientQuota` records); every broker applies them to its image.

Enforcement follows Kafka's ClientQuotaManager: the quota that applies to a request is the
first that exists in Kafka's precedence order (`resolve_quota`); the client's usage is
recorded in a sampled window (`quota.window.num` samples of `quota.window.size.seconds`)
shared by every connection the quota covers; a request that pushes the rate over the quota
is answered with the throttle time that brings the rate back to the quota, and its
connection reads nothing more for that long. A broker with no quotas pays one truth test per
request; a client no quota covers, one cached lookup.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from raftka.protocol.api_keys import ApiKey

if TYPE_CHECKING:
    from kio.static.protocol import Payload
    from trio.lowlevel import Task

    from raftka.broker.clock import Clock
    from raftka.broker.config import BrokerConfig
    from raftka.protocol.messages.requests import FetchRequest

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
#: Quota key -> whether its value must be a whole number (Kafka's LONG keys).
QUOTA_KEYS: Mapping[str, bool] = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
}
_LONG_MAX = 2**63 - 1

#: Entity type -> name (None: the default entity), as sorted pairs so it can key a dict.
QuotaEntity = tuple[tuple[str, str | None], ...]

PRODUCE_KEY = ApiKey.PRODUCE
FETCH_KEY = ApiKey.FETCH


def quota_entity(pairs: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    return tuple(sorted(pairs))


def entity_text(entity: QuotaEntity) -> str:
    """`user=alice, client-id=<default>`, for messages and listings."""
    return ", ".join(f"{kind}={'<default>' if name is None else name}" for kind, name in entity)


class QuotaRequestError(ValueError):
    """A client quota request Kafka refuses; `error_code` is what the client is answered."""

    def __init__(self, message: str, error_code: ErrorCode = ErrorCode.invalid_request) -> None:
        super().__init__(message)
        self.message = message
        self.error_code = error_code


def validate_entity(pairs: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    """The entity of an AlterClientQuotas entry, checked as Kafka's controller does."""
    seen: dict[str, str | None] = {}
    for kind, name in pairs:
        if kind in seen:
            raise QuotaRequestError(f"Invalid client quota entity, duplicate entity entry {kind}")
        if kind == IP:
            raise QuotaRequestError(
                "Client quotas on the ip entity (connection_creation_rate) are not supported"
                " by this broker; set quotas on user and client-id entities"
            )
        if kind not in (USER, CLIENT_ID):
            raise QuotaRequestError(f"Unhandled client quota entity type: {kind}")
        if name is not None and not name:
            raise QuotaRequestError(f"Empty {kind} not supported")
        seen[kind] = name
    if not seen:
        raise QuotaRequestError("Invalid empty client quota entity")
    return quota_entity(seen.items())


def validate_value(key: str, value: float) -> None:
    """A quota value to set, checked as Kafka's controller does."""
    integral = QUOTA_KEYS.get(key)
    if integral is None:
        raise QuotaRequestError(f"Invalid configuration key {key}")
    if not value > 0.0:
        raise QuotaRequestError(f"Quota {key} must be greater than 0")
    if integral:
        if value > _LONG_MAX:
            raise QuotaRequestError(f"Proposed value for {key} is too large for a LONG.")
        if abs(math.fmod(value, 1.0)) > 1e-6:
            raise QuotaRequestError(f"{key} cannot be a fractional value.")


def validate_ops(ops: Iterable[tuple[str, float | None]]) -> dict[str, float | None]:
    """Key -> new value (None: remove) of one entity's ops; a key given twice is refused."""
    changes: dict[str, float | None] = {}
    for key, value in ops:
        if key in changes:
            raise QuotaRequestError(f"Duplicate quota key {key} not updating quota for this entity")
        if value is not None:
            validate_value(key, value)
        elif key not in QUOTA_KEYS:
            raise QuotaRequestError(f"Invalid configuration key {key}")
        changes[key] = value
    return changes


MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2


def describe_quotas(
    quotas: Mapping[QuotaEntity, Mapping[str, float]],
    components: Iterable[tuple[str, int, str | None]],
    strict: bool,
) -> list[tuple[QuotaEntity, Mapping[str, float]]]:
    """The entities DescribeClientQuotas' filter matches, with their quotas, as Kafka's
    ClientQuotasImage.describe answers. `components` are (entity type, match type, match)."""
    exact: dict[str, str | None] = {}
    specified: set[str] = set()
    for kind, match_type, match in components:
        if not kind:
            raise QuotaRequestError("Invalid empty entity type.")
        if kind in exact or kind in specified:
            raise QuotaRequestError(
                f"Entity type {kind} cannot appear more than once in the filter."
            )
        if kind not in (USER, CLIENT_ID, IP):
            raise QuotaRequestError(
                f"Unsupported entity type {kind}", ErrorCode.unsupported_version
            )
        if match_type == MATCH_EXACT:
            if match is None:
                raise QuotaRequestError(
                    "Request specified MATCH_TYPE_EXACT, but set match string to null."
                )
            exact[kind] = match
        elif match_type == MATCH_DEFAULT:
            if match is not None:
                raise QuotaRequestError(
                    "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
                )
            exact[kind] = None
        elif match_type == MATCH_SPECIFIED:
            if match is not None:
                raise QuotaRequestError(
                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
                )
            specified.add(kind)
        else:
            raise QuotaRequestError(f"Unknown match type {match_type}")
    if (IP in exact or IP in specified) and ({USER, CLIENT_ID} & (exact.keys() | specified)):
        raise QuotaRequestError(
            "Invalid entity filter component combination. IP filter component should not be"
            " used with user or clientId filter component."
        )
    found = []
    for entity, values in sorted(quotas.items(), key=lambda item: _sort_key(item[0])):
        names = dict(entity)
        if strict and len(names) != len(exact) + len(specified):
            continue
        if any(kind not in names or names[kind] != name for kind, name in exact.items()):
            continue
        if any(kind not in names for kind in specified):
            continue
        found.append((entity, values))
    return found


def _sort_key(entity: QuotaEntity) -> tuple[tuple[str, bool, str], ...]:
    return tuple((kind, name is not None, name or "") for kind, name in entity)


# -- which quota applies -------------------------------------------------------------------

#: The sensor a quota is measured in: (user, client id), "" where the quota does not
#: distinguish (a /users/alice quota is shared by all of alice's clients).
SensorKey = tuple[str, str]


def resolve_quota(
    quotas: Mapping[QuotaEntity, float], user: str, client_id: str
) -> tuple[float, SensorKey] | None:
    """The quota for (user, client id) in Kafka's precedence order, and the key of the
    sensor that measures it; None when no quota applies."""
    both = (user, client_id)
    for entity, sensor in (
        (((CLIENT_ID, client_id), (USER, user)), both),
        (((CLIENT_ID, None), (USER, user)), both),
        (((USER, user),), (user, "")),
        (((CLIENT_ID, client_id), (USER, None)), both),
        (((CLIENT_ID, None), (USER, None)), both),
        (((USER, None),), (user, "")),
        (((CLIENT_ID, client_id),), ("", client_id)),
        (((CLIENT_ID, None),), ("", client_id)),
    ):
        limit = quotas.get(entity)
        if limit is not None:
            return limit, sensor
    return None


# -- measuring ---------------------------------------------------------------------------------


class RateWindow:
    """A rate over `samples` samples of `window_s` seconds each, measured as Kafka's Rate over
    a SampledStat: a new sample starts when the current one is `window_s` old, samples older
    than the whole span are dropped, and the elapsed time counts at least `samples - 1` full
    windows (so a client's first burst is not measured over a few milliseconds)."""

    __slots__ = ("samples", "window_s", "_samples", "last_s")

    def __init__(self, samples: int, window_s: float) -> None:
        self.samples = samples
        self.window_s = window_s
        self._samples: deque[list[float]] = deque()  # [start_s, total]
        self.last_s = 0.0

    def _purge(self, now_s: float) -> None:
        span_s = self.samples * self.window_s
        while self._samples and now_s - self._samples[0][0] >= span_s:
            self._samples.popleft()

    def record(self, value: float, now_s: float) -> None:
        self.last_s = now_s
        self._purge(now_s)
        if not self._samples or now_s - self._samples[-1][0] >= self.window_s:
            self._samples.append([now_s, 0.0])
            if len(self._samples) > self.samples:
                self._samples.popleft()
        self._samples[-1][1] += value

    def elapsed_s(self, now_s: float) -> float:
        """The time the rate is measured over."""
        self._purge(now_s)
        elapsed = now_s - self._samples[0][0] if self._samples else 0.0
        full = int(elapsed / self.window_s)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_s
        return max(elapsed, 0.001)

    def rate(self, now_s: float) -> float:
        elapsed = self.elapsed_s(now_s)
        return sum(sample[1] for sample in self._samples) / elapsed


def throttle_time_ms(rate: float, limit: float, elapsed_s: float) -> int:
    """How long to wait so that the rate, with nothing more recorded, falls to `limit`
    (Kafka's QuotaUtils.throttleTime: (O - T) / T * W)."""
    if rate <= limit:
        return 0
    return round((rate - limit) / limit * elapsed_s * 1000)


@dataclass(slots=True, eq=False)
class Sensor:
    """One quota's usage: the limit and the window it is measured in."""

    limit: float
    window: RateWindow
    #: A throttle time larger than this is cut to it (request_percentage: one window).
    max_throttle_ms: int | None = None

    def record(self, value: float, now_s: float) -> int:
        """Record `value`; the throttle time in ms if the rate is now over the limit."""
        self.window.record(value, now_s)
        rate = self.window.rate(now_s)
        if rate <= self.limit:
            return 0
        throttle = throttle_time_ms(rate, self.limit, self.window.elapsed_s(now_s))
        return throttle if self.max_throttle_ms is None else min(throttle, self.max_throttle_ms)

    def unrecord(self, value: float, now_s: float) -> None:
        self.window.record(-value, now_s)

    def max_value_in_window(self) -> float:
        """The most a client may use at once without being throttled with an empty window."""
        return self.limit * (self.window.samples - 1) * self.window.window_s


@dataclass(slots=True, eq=False)
class ClientQuota:
    """The sensors that apply to one (user, client id); None where no quota applies."""

    produce: Sensor | None
    fetch: Sensor | None
    request: Sensor | None


class RequestTimer:
    """A trio instrument: the time the event loop spends running tracked tasks (a request's
    handler task), Kafka's request-handler thread time, for `request_percentage`. Waiting
    (for a flush, a long poll, a replica) is not counted. Installed only once a
    request_percentage quota exists."""

    def __init__(self) -> None:
        self._tracked: dict[Task, float] = {}
        self._step_started = 0.0

    def track(self) -> Task:
        import trio

        task = trio.lowlevel.current_task()
        self._tracked[task] = 0.0
        self._step_started = time.perf_counter()  # this step began now, as far as we count
        return task

    def stop(self, task: Task) -> float:
        """Seconds `task` ran since `track`; called from the task itself."""
        spent = self._tracked.pop(task, 0.0)
        return spent + time.perf_counter() - self._step_started

    def before_task_step(self, task: Task) -> None:
        if task in self._tracked:
            self._step_started = time.perf_counter()

    def after_task_step(self, task: Task) -> None:
        if task in self._tracked:
            self._tracked[task] += time.perf_counter() - self._step_started


SENSORS_MAX = 10_000


class ClientQuotaManager:
    """This broker's quota enforcement over the image's quotas (`quotas()` returns the
    image's mapping, replaced, never changed in place, when a quota record is applied)."""

    def __init__(
        self,
        quotas: Callable[[], Mapping[QuotaEntity, Mapping[str, float]]],
        samples: int = 11,
        window_s: float = 1.0,
        clock: Clock | None = None,
    ) -> None:
        if clock is None:
            # Imported here: the cluster image imports this module and must not load trio.
            from raftka.broker.clock import SYSTEM_CLOCK

            clock = SYSTEM_CLOCK
        #: The image's quotas as they are now (empty while none is set): asked before
        #: every request, so the broker's runs no Python frame.
        self.quotas_now = quotas
        self.clock = clock
        self.samples = samples
        self.window_s = window_s
        self._seen: Mapping[QuotaEntity, Mapping[str, float]] | None = None
        self._by_key: dict[str, dict[QuotaEntity, float]] = {}
        self._clients: dict[tuple[str, str], ClientQuota | None] = {}
        self._sensors: dict[tuple[str, SensorKey], Sensor] = {}
        self.timer: RequestTimer | None = None

    @classmethod
    def from_config(
        cls,
        config: BrokerConfig,
        quotas: Callable[[], Mapping[QuotaEntity, Mapping[str, float]]],
        clock: Clock | None = None,
    ) -> ClientQuotaManager:
        return cls(
            quotas,
            samples=config.get_int("quota.window.num"),
            window_s=float(config.get_int("quota.window.size.seconds")),
            clock=clock,
        )

    @property
    def active(self) -> bool:
        """Whether any quota is set in the cluster."""
        return bool(self.quotas_now())

    def for_client(self, user: str, client_id: str) -> ClientQuota | None:
        """The sensors for (user, client id), or None when no quota applies to it."""
        quotas = self.quotas_now()
        if quotas is not self._seen:
            self._refresh(quotas)
        try:
            return self._clients[user, client_id]
        except KeyError:
            pass
        client = ClientQuota(
            self._sensor(PRODUCER_BYTE_RATE, user, client_id),
            self._sensor(CONSUMER_BYTE_RATE, user, client_id),
            self._sensor(REQUEST_PERCENTAGE, user, client_id),
        )
        if client.produce is None and client.fetch is None and client.request is None:
            found = None
        else:
            found = client
        if len(self._clients) >= SENSORS_MAX:
            self._clients.clear()
        self._clients[user, client_id] = found
        return found

    def _refresh(self, quotas: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        self._seen = quotas
        self._by_key = {}
        for entity, values in quotas.items():
            for key, value in values.items():
                self._by_key.setdefault(key, {})[entity] = value
        self._clients.clear()
        # Sensors keep their windows across a change, as Kafka's do; their limits follow.
        for (key, sensor_key), sensor in list(self._sensors.items()):
            user, client_id = sensor_key
            resolved = resolve_quota(self._by_key.get(key, {}), user, client_id)
            if resolved is None or resolved[1] != sensor_key:
                del self._sensors[key, sensor_key]
            else:
                sensor.limit = resolved[0]
        if self._by_key.get(REQUEST_PERCENTAGE) and self.timer is None:
            import trio

            self.timer = RequestTimer()
            trio.lowlevel.add_instrument(self.timer)  # type: ignore[arg-type]

    def _sensor(self, key: str, user: str, client_id: str) -> Sensor | None:
        resolved = resolve_quota(self._by_key.get(key, {}), user, client_id)
        if resolved is None:
            return None
        limit, sensor_key = resolved
        sensor = self._sensors.get((key, sensor_key))
        if sensor is None:
            if len(self._sensors) >= SENSORS_MAX:
                self._drop_idle_sensors()
            sensor = Sensor(limit, RateWindow(self.samples, self.window_s))
            if key == REQUEST_PERCENTAGE:
                sensor.max_throttle_ms = round(self.window_s * 1000)
            self._sensors[key, sensor_key] = sensor
        return sensor

    def _drop_idle_sensors(self) -> None:
        idle_before = self.clock.now_s() - self.samples * self.window_s
        for name, sensor in list(self._sensors.items()):
            if sensor.window.last_s < idle_before:
                del self._sensors[name]
        self._clients.clear()  # they may hold the dropped sensors


#: A kio request or response entity.
P = TypeVar("P", bound="Payload")


def cap_fetch_bytes(request: FetchRequest, client: ClientQuota) -> FetchRequest:
    """A Fetch request whose `max_bytes` is at most what the consumer's quota allows in one
    window, as Kafka caps it: more would be throttled however long the client waited."""
    if client.fetch is None:
        return request
    most = max(1, int(client.fetch.max_value_in_window()))
    if request.max_bytes <= most:
        return request
    return dataclasses.replace(request, max_bytes=i32(most))


def with_throttle_time(response: P, throttle_ms: int) -> P:
    """The response with its `throttle_time` field set (responses without one unchanged)."""
    current = getattr(response, "throttle_time", None)
    if current is None:
        return response
    value: datetime.timedelta | int = (
        datetime.timedelta(milliseconds=throttle_ms)
        if isinstance(current, datetime.timedelta)
        else throttle_ms
    )
    return dataclasses.replace(response, throttle_time=value)


def throttled_fetch_response(response: P, throttle_ms: int) -> P:
    """What a throttled consumer gets, as from Kafka: no partitions, only the throttle time."""
    return dataclasses.replace(with_throttle_time(response, throttle_ms), responses=())
