"""The stubs (liblb/_liblb.pyi) match the native module, and type-check real use.

- mypy.stubtest imports liblb and compares every name, signature, default and base class
  with the stubs (no allowlist: nothing differs).
- mypy --strict over this test suite (and bench.py, bench_integrations.py): the stubs must accept every call the tests make and
  reject every call marked `# type: ignore[...]` (strict mode flags an unneeded ignore), so a
  stub that is too loose fails here too.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import liblb

TESTS = Path(__file__).resolve().parent
BENCH = TESTS.parent / "bench.py"
BENCH_INTEGRATIONS = TESTS.parent / "bench_integrations.py"


def run_mypy(args: list[str], cache: Path) -> None:
    cmd = [sys.executable, "-m", *args]
    done = subprocess.run(
        cmd, capture_output=True, text=True, cwd=cache, check=False, timeout=300
    )
    assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stdout}\n{done.stderr}"


def test_stubtest(tmp_path: Path) -> None:
    # Run from an empty folder so `liblb` is the installed package, not the source tree.
    assert Path(liblb.__file__).parent.joinpath("_liblb.pyi").is_file()
    run_mypy(["mypy.stubtest", "liblb"], tmp_path)


def test_suite_type_checks_against_stubs(tmp_path: Path) -> None:
    # mypy's cache lives in the environment (the test venv), never in the work tree.
    cache = Path(sys.prefix) / ".liblb-mypy-cache"
    run_mypy(["mypy", "--strict", "--cache-dir", str(cache), str(TESTS), str(BENCH), str(BENCH_INTEGRATIONS)], tmp_path)


def test_package_modules_type_check(tmp_path: Path) -> None:
    # -p checks the installed liblb (tmp_path as working directory keeps the source tree out).
    cache = Path(sys.prefix) / ".liblb-mypy-cache"
    run_mypy(["mypy", "--strict", "--cache-dir", str(cache), "-p", "liblb"], tmp_path)
