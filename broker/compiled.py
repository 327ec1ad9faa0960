"""The request path's modules compiled with mypyc, used when they are built and current.

`scripts/compile-hot` (which `scripts/setup` runs) compiles the modules of `MODULES` into C
extensions with mypyc and keeps them apart from the sources, in this interpreter's
environment (`BUILD_DIR`), with a manifest of each module's extension and the SHA-256 of the
source it was built from. A `raftka` process (`launch.main`, before anything else is
imported) calls `install`, which puts a finder in front of the import system that loads
those extensions instead of the sources, but only if every source still hashes as it did at
the build: compiled modules call each other directly, so they are used all together or not
at all, and an edited source is never shadowed by a build of its old text. Otherwise the
pure-Python modules run, the same code. `status` says which and why; the broker logs it as
it starts.

`RAFTKA_COMPILED=0` in the environment of `scripts/setup` skips the build; in a `raftka`
process's environment it keeps the pure-Python modules. A process that does not start through
`launch.main` (a test run, a tool imported as a library) runs the pure-Python modules too.

    python -m raftka.broker.compiled current      exit 0 if the build is current, else 1
    python -m raftka.broker.compiled adopt LIB HASHES
                                                  install a build from mypyc's LIB folder
    python -m raftka.broker.compiled clean        remove the build
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

#: The modules compiled, as paths from the repository's root: those a Produce or Fetch
#: request passes through from the socket to the response, replication and the log included,
#: less the few mypyc cannot compile (`broker/handlers/__init__.py`, and `protocol/splice.py`,
#: whose `__del__` a compiled class cannot keep).
MODULES = (
    "protocol/produce_codec.py",
    "protocol/records.py",
    "protocol/api.py",
    "consensus/core.py",
    "consensus/types.py",
    "consensus/progress.py",
    "consensus/quorum.py",
    "consensus/raft_log.py",
    "consensus/driver.py",
    "consensus/storage.py",
    "log/segment.py",
    "log/index.py",
    "log/validation.py",
    "log/producer_state.py",
    "broker/connection.py",
    "broker/group_commit.py",
    "broker/handlers/produce.py",
    "broker/replica/append.py",
    "broker/replica/types.py",
    "broker/replica/manager.py",
    "broker/replication.py",
    "broker/idle.py",
    "broker/readiness.py",
    "broker/idle_wait.py",
    "protocol/frame_reading.py",
    "protocol/fetch_codec.py",
    "broker/handlers/common.py",
    "broker/services.py",
    "broker/handlers/fetch.py",
    "broker/topics.py",
    "broker/metrics.py",
    "broker/long_polls.py",
    "broker/fetch_sessions.py",
    "consensus/transport.py",
    "consensus/codec.py",
    "protocol/batch_builder.py",
    "log/epochs.py",
    "log/txn_index.py",
    "log/partition_core.py",
    "log/partition_retention.py",
    "log/partition_flush.py",
    "log/partition_append.py",
    "log/partition_cleaning.py",
    "log/partition_recovery.py",
    "log/partition_truncation.py",
    "log/partition.py",
)
#: mypyc's shared library of the compiled modules (each module's extension is a shim of it).
GROUP = "raftka.broker.request_path"
GROUP_MODULE = GROUP + "__mypyc"
#: Where `scripts/compile-hot` puts the extensions and their manifest.
BUILD_DIR = Path(sys.prefix) / "raftka-compiled"
MANIFEST = "manifest.json"
SWITCH = "RAFTKA_COMPILED"
#: The repository's root (the folder holding broker/, consensus/, log/, protocol/).
ROOT = Path(__file__).resolve().parent.parent

#: What this process runs, in words (set by `install`).
status = "pure Python"


def module_name(path: str) -> str:
    """`consensus/core.py` -> `raftka.consensus.core`."""
    return "raftka." + path.removesuffix(".py").replace("/", ".")


def source_hashes(root: Path = ROOT) -> dict[str, str]:
    """Each compiled module's name -> the SHA-256 of its source now."""
    return {
        module_name(path): hashlib.sha256((root / path).read_bytes()).hexdigest()
        for path in MODULES
    }


class _CompiledFinder(importlib.abc.MetaPathFinder):
    """Finds the compiled extension of each module in the manifest."""

    def __init__(self, extensions: dict[str, str]) -> None:
        self.extensions = extensions

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        extension = self.extensions.get(fullname)
        if extension is None:
            return None
        loader = importlib.machinery.ExtensionFileLoader(fullname, extension)
        return importlib.util.spec_from_file_location(fullname, extension, loader=loader)


def compiled_extensions(build_dir: Path = BUILD_DIR) -> tuple[dict[str, str] | None, str]:
    """Each module's extension if the build is current, else None; and why, in words."""
    try:
        manifest = json.loads((build_dir / MANIFEST).read_text())
    except FileNotFoundError:
        return None, "not built (scripts/compile-hot builds them)"
    except (OSError, ValueError) as exc:
        return None, f"unreadable manifest: {exc}"
    if manifest.get("cache_tag") != sys.implementation.cache_tag:
        return (
            None,
            f"built for {manifest.get('cache_tag')}, this is {sys.implementation.cache_tag}",
        )
    built: dict[str, str] = manifest.get("sha256", {})
    try:
        now = source_hashes()
    except OSError as exc:
        return None, f"a source cannot be read: {exc}"
    if set(built) != set(now):
        return None, "built from another list of modules (run scripts/setup)"
    for name, digest in now.items():
        if built[name] != digest:
            return None, f"{name} changed since the build (run scripts/setup)"
    extensions = {name: str(build_dir / file) for name, file in manifest["extensions"].items()}
    for file in extensions.values():
        if not os.path.exists(file):
            return None, f"{file} is missing (run scripts/setup)"
    return extensions, f"compiled with mypyc ({len(now)} modules of the request path)"


def install(build_dir: Path = BUILD_DIR) -> None:
    """Load the compiled modules from now on, if they are built and current (`status`)."""
    global status
    if os.environ.get(SWITCH) == "0":
        status = f"pure Python ({SWITCH}=0)"
        return
    extensions, reason = compiled_extensions(build_dir)
    if extensions is None:
        status = f"pure Python (compiled modules {reason})"
        return
    early = sorted(name for name in extensions if name in sys.modules)
    if early:
        status = f"pure Python ({early[0]} was imported before the compiled modules)"
        return
    sys.meta_path.insert(0, _CompiledFinder(extensions))
    status = reason


def adopt(lib: Path, hashes: dict[str, str], build_dir: Path = BUILD_DIR) -> None:
    """Install the extensions mypyc built under `lib` (its build_ext --build-lib) from
    sources that hashed as `hashes`, replacing any earlier build."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    names = [*hashes, GROUP_MODULE]
    files = {name: name.removeprefix("raftka.").replace(".", "/") + suffix for name in names}
    for file in files.values():
        if not (lib / "raftka" / file).exists():
            raise FileNotFoundError(f"mypyc built no {lib / 'raftka' / file}")
    clean(build_dir)
    for file in files.values():
        target = build_dir / file
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(lib / "raftka" / file, target)
    manifest = {"cache_tag": sys.implementation.cache_tag, "sha256": hashes, "extensions": files}
    (build_dir / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def clean(build_dir: Path = BUILD_DIR) -> None:
    shutil.rmtree(build_dir, ignore_errors=True)


def main(argv: list[str]) -> int:
    command = argv[0] if argv else ""
    if command == "current":
        extensions, reason = compiled_extensions()
        print(reason)
        return 0 if extensions is not None else 1
    if command == "hashes":
        print(json.dumps(source_hashes()))
        return 0
    if command == "adopt" and len(argv) == 3:
        adopt(Path(argv[1]), json.loads(Path(argv[2]).read_text()))
        return 0
    if command == "clean":
        clean()
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
