"""CPU time and memory of a process, read from Linux's /proc."""

from __future__ import annotations

import os
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # fields[0] is the state (field 3); utime and stime are fields 14 and 15.
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def run_queue_wait_s(pid: int) -> float:
    """Seconds the process's main thread (a raftka broker's event loop) has been ready to run
    but waited for a core, from /proc/PID/schedstat (its second figure, in ns). On a shared
    machine this is how long the broker was held back by others' load."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9


def cpu_seconds_total(pid: int) -> float:
    """User+system CPU seconds of a process."""
    user, system = cpu_seconds(pid)
    return user + system


def status_kb(pid: int, field: str) -> int | None:
    """A kB figure of /proc/PID/status (`VmRSS`, `VmHWM`, ...); None if the field is absent."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return None


# A broker may be several processes (`raftka serve --shards N`, a cluster of local nodes);
# the bench measures them as one: CPU and memory summed over `pids`.
Pids = tuple[int, ...]


def cpu_seconds_sum(pids: Pids) -> tuple[float, float]:
    """(user, system) CPU seconds summed over processes."""
    times = [cpu_seconds(pid) for pid in pids]
    return sum(t[0] for t in times), sum(t[1] for t in times)


def cpu_seconds_by_pid(pids: Pids) -> dict[int, float]:
    """User+system CPU seconds of each process."""
    return {pid: cpu_seconds_total(pid) for pid in pids}


def status_kb_by_pid(pids: Pids, field: str) -> dict[int, int | None]:
    """A kB figure of /proc/PID/status for each process (None where absent)."""
    return {pid: status_kb(pid, field) for pid in pids}


def sum_kb(by_pid: dict[int, int | None]) -> int | None:
    """The sum of per-process kB figures; None if no process has the figure."""
    known = [kb for kb in by_pid.values() if kb is not None]
    return sum(known) if known else None
