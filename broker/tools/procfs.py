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
