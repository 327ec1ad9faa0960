"""The quota manager reads the time of the clock it is given."""

from raftka.broker.clock import ManualClock
from raftka.broker.quotas import (
    PRODUCER_BYTE_RATE,
    SENSORS_MAX,
    USER,
    ClientQuotaManager,
    quota_entity,
)


def test_idle_sensors_are_dropped_by_the_injected_clock() -> None:
    clock = ManualClock(now_s=100.0)
    quotas = {quota_entity([(USER, None)]): {PRODUCER_BYTE_RATE: 1000.0}}
    manager = ClientQuotaManager(lambda: quotas, samples=2, window_s=1.0, clock=clock)
    for user in range(SENSORS_MAX):
        client = manager.for_client(f"user-{user}", "c")
        assert client is not None and client.produce is not None
        client.produce.record(10, clock.now_s())
    # Still within two windows of their last use: a new user's sensor drops none of them.
    clock.advance(1.5)
    manager.for_client("one-more", "c")
    assert len(manager._sensors) == SENSORS_MAX + 1
    # Past two windows of the clock the manager was given: all but the newest are idle.
    clock.advance(1.0)
    manager.for_client("and-another", "c")
    assert len(manager._sensors) == 1
