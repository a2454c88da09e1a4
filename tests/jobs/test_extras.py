"""A job that needs an optional package that is not installed says so in one line, before it starts."""

import os
import subprocess
import sys

import keras
import pytest

from kbert.jobs.extras import require_packages
from kbert.jobs.objective_catalog import OBJECTIVES

# The job runs in a fresh process in which `import matplotlib` (or `tensorflow_text`) fails, as
# it does where the `text` extra is not installed.
_WITHOUT = "import sys; sys.modules[{module!r}] = None\nfrom kbert import cli\ncli.main({arguments!r})\n"


def _run_without(module, arguments):
    env = dict(os.environ, KERAS_BACKEND=keras.backend.backend())
    code = _WITHOUT.format(module=module, arguments=arguments)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


def test_every_objective_names_its_packages():
    for name, record in OBJECTIVES.items():
        assert "matplotlib" in record.packages, name
        assert set(record.packages) <= {"tensorflow", "tensorflow_text", "keras_hub", "tokenizers", "sentencepiece",
                                        "matplotlib"}


def test_a_missing_package_is_named_with_the_extra_that_brings_it():
    with pytest.raises(ValueError, match=r"^--objective mlm needs no_such_module, which is not installed: "
                                         r"pip install no_such_module \(or pip install 'kbert\[text\]'"):
        require_packages(["json", "no_such_module"], "--objective mlm")


@pytest.mark.backend_independent  # the job stops before Keras computes anything
@pytest.mark.parametrize("module,command", [
    ("matplotlib", ["pretrain", "--steps", "1"]),
    ("tensorflow_text", ["finetune", "--task", "classify", "--checkpoint", "bert_tiny",
                         "--train", "{data}", "--validation", "{data}"]),
])
def test_the_job_stops_before_it_writes_anything(module, command, tmp_path):
    data, output = tmp_path / "data.csv", tmp_path / "run"
    data.write_text("text,label\na fine film,1\na dull film,0\n", encoding="utf-8")
    arguments = [argument.format(data=data) for argument in command]
    result = _run_without(module, [*arguments, "--output", str(output)])
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and module in lines[0] and "not installed" in lines[0], result.stderr
    assert not output.exists()
