"""The built wheel, installed into a fresh virtualenv as an operator would: one package,
`raftka`, a working `raftka` command, and a broker that kcat can use."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import REPO_ROOT, free_port, probe_api_versions

# One worker runs the module, so the module-scoped wheel is built once.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("packaging")]

PIP_TIMEOUT_S = 600


def _run(argv: list[str], *, cwd: Path, timeout: float = PIP_TIMEOUT_S) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (
        f"{' '.join(argv)} exited {proc.returncode}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    )
    return proc.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv holding the wheel built from this checkout (and its dependencies
    from the package index); returns the virtualenv's folder."""
    work = tmp_path_factory.mktemp("wheel")
    dist = work / "dist"
    # Built from a copy of the checkout: setuptools builds in the source's build/ folder,
    # where two builds at once collide ("File exists: build/bdist.linux-x86_64/wheel/
    # raftka-0.1.0.dist-info"), and two workers did build it at once.
    source = work / "source"
    shutil.copytree(
        REPO_ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "node_modules", "*.egg-info", "__pycache__"
        ),
    )
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(source)],
        cwd=work,
    )
    [wheel] = dist.glob("raftka-*.whl")
    venv = work / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=work)
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], cwd=work)
    return venv


def test_the_wheel_installs_one_package_named_raftka(installed: Path) -> None:
    python = str(installed / "bin" / "python")
    # Run from an empty folder, so nothing of the checkout is on the path.
    elsewhere = installed.parent / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    where = _run(
        [python, "-c", "import raftka.broker.server as s, raftka.log as l; print(s.__file__)"],
        cwd=elsewhere,
    )
    assert Path(where.strip()).is_relative_to(installed), where
    for name in ("log", "protocol", "broker", "consensus", "pipeline"):
        probe = subprocess.run(
            [python, "-c", f"import {name}"], cwd=elsewhere, capture_output=True, text=True
        )
        assert probe.returncode != 0 and "No module named" in probe.stderr, (name, probe)
    site = Path(
        _run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            cwd=elsewhere,
        ).strip()
    )
    ours = {p.name for p in site.iterdir() if p.name.startswith("raftka")}
    assert "raftka" in ours, ours


def test_raftka_serve_from_the_wheel_works_with_kcat(installed: Path, kcat_bin: str) -> None:
    raftka = installed / "bin" / "raftka"
    help_text = _run([str(raftka), "--help"], cwd=installed.parent)
    for command in ("serve", "configs", "topics", "groups", "cluster"):
        assert command in help_text, help_text
    assert "num.partitions" in _run([str(raftka), "configs"], cwd=installed.parent)

    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    data_dir = installed.parent / "data"
    log_path = installed.parent / "broker.log"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with open(log_path, "wb") as log:
        broker = subprocess.Popen(
            [str(raftka), "serve", "--listen", bootstrap, "--data-dir", str(data_dir)],
            cwd=installed.parent,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert broker.poll() is None, log_path.read_text()
            try:
                if probe_api_versions(bootstrap, timeout_s=1.0) == 0:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.2)
        lines = [f"from the wheel {i}" for i in range(50)]
        kcat = shutil.which(kcat_bin) or kcat_bin
        subprocess.run(
            [kcat, "-b", bootstrap, "-P", "-t", "wheel", "-p", "0"],
            input="\n".join(lines) + "\n",
            text=True,
            check=True,
            timeout=60,
        )
        out = subprocess.run(
            [kcat, "-b", bootstrap, "-C", "-t", "wheel", "-p", "0", "-o", "beginning", "-e"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        assert out.splitlines() == lines
        # The admin commands need nothing beyond the package's own dependencies.
        groups = _run([str(raftka), "groups", "list", "--bootstrap", bootstrap], cwd=data_dir)
        assert groups.splitlines()[0].split() == ["GROUP", "TYPE", "STATE"], groups
    finally:
        broker.terminate()
        try:
            broker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            broker.kill()
            broker.wait()
