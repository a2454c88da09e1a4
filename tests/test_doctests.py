"""The `>>>` examples in kbert's docstrings run, so the documentation stays true.

They run once, in the PyTorch run (`backend_independent`): the examples show
the API, not a backend's numbers, which the unit tests check on every backend;
eager PyTorch runs tiny models fastest (JAX compiles each eager operation).
Each module's examples see the module's own globals, as `python -m doctest`
would, plus `np`, `keras` and `kbert`.
"""

import doctest
import importlib
import pkgutil

import keras
import numpy as np
import pytest

import kbert


def _modules():
    names = []
    for info in pkgutil.walk_packages(kbert.__path__, prefix="kbert."):
        if info.name != "kbert.__main__":
            names.append(info.name)
    return ["kbert", *sorted(names)]


@pytest.mark.backend_independent
@pytest.mark.parametrize("module_name", _modules())
def test_docstring_examples_run(module_name):
    module = importlib.import_module(module_name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    extra = {"np": np, "keras": keras, "kbert": kbert}
    for test in finder.find(module, module_name, extraglobs=extra):
        if test.examples:
            runner.run(test)
    assert runner.failures == 0, f"{runner.failures} of {runner.tries} examples in {module_name} failed (printed above)"
    results = runner.summarize(verbose=False)
    assert results.failed == 0, f"{results.failed} of {results.attempted} examples failed in {module_name}"
