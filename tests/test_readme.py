"""The README's Python examples run as written (except the ones that need a checkpoint); the names it gives exist."""

import importlib
import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


@pytest.mark.backend_independent  # the README shows the API; each backend's numbers: the unit tests, the matrix
@pytest.mark.slow(reason="the README's programs: builds, fine-tunes and exports models")
def test_readme_python_examples_run(capsys):
    namespace = {}
    runnable = [block for block in python_blocks() if "path/to/" not in block]
    assert len(runnable) >= 2
    for block in runnable:
        exec(compile(block, str(README), "exec"), namespace)
    printed = capsys.readouterr().out
    assert "4,385,920" in printed
    assert "(2, 2, 1000)" in printed.replace("torch.Size([2, 2, 1000])", "(2, 2, 1000)")
    assert "(1, 3)" in printed  # the fine-tuned classifier's logits


def _resolve(dotted):
    """The object `dotted` (`kbert.tasks.TextClassifier`) names: its longest importable module, then attributes."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        module = ".".join(parts[:split])
        try:
            found = importlib.import_module(module)
        except ModuleNotFoundError as error:
            if error.name != module:
                raise
            continue
        for attribute in parts[split:]:
            found = getattr(found, attribute)
        return found


@pytest.mark.backend_independent
def test_every_kbert_name_the_readme_gives_exists():
    names = sorted(set(re.findall(r"`(kbert(?:\.\w+)+)", README.read_text())))
    assert "kbert.from_huggingface_task" in names
    missing = []
    for name in names:
        try:
            _resolve(name)
        except AttributeError:
            missing.append(name)
    assert missing == []
