"""Running an in-process `Broker`'s background tasks around a test's coroutine."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from raftka.broker.server import Broker


def run_with_broker(
    broker: Broker,
    fn: Callable[..., Awaitable[Any]],
    *args: Any,
    register: bool = False,
    timeout_s: float | None = None,
    **run_kw: Any,
) -> Any:
    """trio.run(fn, *args) with the broker's Raft sync task and metadata applier running
    meanwhile, as in a running broker (elections, appends and admin operations wait for
    them); with `register`, the broker registers itself first. `run_kw` goes to trio.run
    (a MockClock, say)."""

    async def main() -> Any:
        limit = trio.fail_after(timeout_s) if timeout_s is not None else contextlib.nullcontext()
        with limit:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(broker.node.run_syncs)
                await nursery.start(broker.controller.apply_metadata)
                if register:
                    await broker.controller.register("127.0.0.1", 9092, None)
                result = await fn(*args)
                nursery.cancel_scope.cancel()
        return result

    return trio.run(main, **run_kw)
