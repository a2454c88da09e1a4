"""`make lint`: ruff finds nothing in kbert, tests, examples and benchmarks (rules in pyproject.toml)."""

import pathlib
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.backend_independent  # the same on every backend: one run

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _ruff():
    """The ruff beside this interpreter (the venv's), else the one on PATH; `None` if neither exists."""
    beside = pathlib.Path(sys.executable).with_name("ruff")
    return str(beside) if beside.exists() else shutil.which("ruff")


def test_ruff_finds_nothing():
    ruff = _ruff()
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[dev]')")
    result = subprocess.run(
        [ruff, "check", "--no-cache", "kbert", "tests", "examples", "benchmarks"],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
