"""kbert's packages import one way only: each may import its own modules and those of lower layers.

The layers, lowest first (docs/architecture.md describes them). Imports are
read from the source, module-level and function-level alike, so a lazy import
counts as much as any other.
"""

import ast
import pathlib

import pytest

pytestmark = pytest.mark.backend_independent  # the same on every backend: one run

ROOT = pathlib.Path(__file__).resolve().parents[1] / "kbert"

LAYERS = (
    {"torch_fast_paths"},
    {"arguments", "backend_utils", "torch_compilation"},
    {"input_checks", "serialization"},
    {"layers", "text"},
    {"models"},
    {"training"},
    {"generation"},
    {"analysis", "pretraining", "tasks"},
    {"checkpoints", "distribute", "resumable_run"},
    {"jobs"},
    {"cli"},
    {"__main__"},
)
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}


def _unit(path):
    """The package (or top-level module) a file of kbert belongs to; `None` for kbert/__init__.py."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return None if parts == ("__init__",) else parts[0]


def _imported_units(tree):
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "kbert" and len(parts) > 1 and parts[1] in RANK:
                yield parts[1]


def _imports():
    for path in sorted(ROOT.rglob("*.py")):
        unit = _unit(path)
        if unit is not None:
            for imported in set(_imported_units(ast.parse(path.read_text()))):
                yield path.relative_to(ROOT.parent), unit, imported


def test_every_package_has_a_layer():
    units = {_unit(path) for path in ROOT.rglob("*.py")} - {None}
    assert units <= set(RANK), f"place these in LAYERS: {sorted(units - set(RANK))}"


@pytest.mark.parametrize("path,unit,imported", list(_imports()), ids=str)
def test_imports_go_down(path, unit, imported):
    assert imported == unit or RANK[imported] < RANK[unit], (
        f"{path} ({unit}, layer {RANK[unit]}) imports kbert.{imported} (layer {RANK[imported]})"
    )
