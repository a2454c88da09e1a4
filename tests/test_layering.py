"""kbert's packages import one way only: each may import its own modules and those of lower layers.

The layers, lowest first (docs/architecture.md describes them). Imports are
read from the source, module-level and function-level alike, so a lazy import
counts as much as any other. The model code (`NEUTRAL`) reaches the backends
only through `kbert.backend`'s neutral modules: it imports no framework, no
backend's own module, and never asks `keras.backend.backend()`.
"""

import ast
import pathlib

import pytest

pytestmark = pytest.mark.backend_independent  # the same on every backend: one run

ROOT = pathlib.Path(__file__).resolve().parents[1] / "kbert"

LAYERS = (
    {"backend"},
    {"arguments"},
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


# The packages that reach the backends only through kbert.backend's neutral modules
# (the distribution engines, the exporters and the jobs may be backend-specific).
NEUTRAL = ("layers", "models", "generation", "training", "tasks", "pretraining", "analysis")
NEUTRAL_BACKEND_MODULES = {"ops", "fast_paths", "imports", "private_state"}
FRAMEWORKS = {"torch", "jax", "jaxlib", "tensorflow"}


def _backend_specific_uses(tree):
    """`(line, what)` for each framework import, import of a backend's own module, and `backend()` call."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            modules = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            modules = []
        for module in modules:
            parts = module.split(".")
            if parts[0] in FRAMEWORKS:
                yield node.lineno, f"imports {module}"
            elif parts[:2] == ["kbert", "backend"] and len(parts) > 2 and parts[2] not in NEUTRAL_BACKEND_MODULES:
                yield node.lineno, f"imports {module}"
        if _asks_the_backend(node):
            yield node.lineno, "asks keras.backend.backend()"


def _asks_the_backend(node):
    """Whether `node` is a call of `keras.backend.backend()` (or `keras.config.backend()`)."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "backend" and isinstance(node.func.value, ast.Attribute)
            and node.func.value.attr in ("backend", "config"))


def _neutral_files():
    return [path for unit in NEUTRAL for path in sorted((ROOT / unit).rglob("*.py"))]


@pytest.mark.parametrize("path", _neutral_files(), ids=lambda path: str(path.relative_to(ROOT)))
def test_model_code_reaches_the_backends_through_kbert_backend_only(path):
    uses = [f"line {line}: {what}" for line, what in _backend_specific_uses(ast.parse(path.read_text()))]
    assert not uses, (f"{path.relative_to(ROOT.parent)} must use kbert.backend.ops "
                      f"(docs/architecture.md §5): {'; '.join(uses)}")


# The only modules outside kbert/backend/ that ask `keras.backend.backend()`, each with its reason:
# the distribution engines and the exporters are backend-specific by nature; the rest only name
# the backend (or re-run under the one asked for), and none of them picks a computation by it.
ASKS_THE_BACKEND = {
    "distribute/engines.py": "the distribution engines: one per backend",
    "distribute/distributed_training.py": "the distribution engines: joins each backend's processes",
    "jobs/export_run.py": "the exporters: each format is produced on one backend",
    "cli.py": "re-runs a command under the --backend asked for",
    "jobs/pretraining_run.py": "names the backend in the run's report",
    "jobs/finetuning_run.py": "names the backend in the run's report",
    "jobs/tour.py": "names the backend in the tour's table",
}


def _asking_files():
    return sorted(path.relative_to(ROOT).as_posix() for path in ROOT.rglob("*.py")
                  if path.relative_to(ROOT).parts[0] != "backend"
                  and any(_asks_the_backend(node) for node in ast.walk(ast.parse(path.read_text()))))


def test_only_the_listed_modules_ask_the_backend_outside_kbert_backend():
    """The rest of kbert (input checks, serialization, checkpoints, resumable runs, …) asks `kbert.backend.ops`."""
    unlisted = sorted(set(_asking_files()) - set(ASKS_THE_BACKEND))
    assert not unlisted, (f"{unlisted} ask keras.backend.backend(): put the decision behind a named function "
                          f"of kbert/backend/ops.py (docs/architecture.md §5), or list the module in "
                          f"ASKS_THE_BACKEND with its reason")
    assert set(ASKS_THE_BACKEND) <= set(_asking_files()), "ASKS_THE_BACKEND lists a module that no longer asks"
