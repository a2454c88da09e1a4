"""`kbert.backend.fast_paths`: the switch, the in-place cache scope, the few-row weight layouts.

The fast paths' numbers are checked where their backend-neutral forms are
(`tests/backend/test_ops.py`, the layers' and models' tests); the parity
tests marked `fast_paths_both_ways` run on PyTorch with the switch on and off.
"""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from helpers import BACKEND, to_numpy

from kbert.backend import fast_paths, torch_ops
from kbert.backend.ops import dense


# In one fresh PyTorch process: the module read again under each value of the variable.
SWITCH_VALUES = """
import importlib, os
from kbert.backend import fast_paths
for value in ("0", "1", "off"):
    os.environ["KBERT_FAST_PATHS"] = value
    try:
        print(value, importlib.reload(fast_paths).active())
    except ValueError as error:
        print(value, error)
"""


@pytest.mark.backend_independent
@pytest.mark.slow(reason="a fresh process (the variable is read at import)")
def test_the_environment_variable_sets_the_switch_and_refuses_other_values():
    env = dict(os.environ, KERAS_BACKEND="torch")
    result = subprocess.run([sys.executable, "-c", SWITCH_VALUES], env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines() == [
        "0 False", "1 True", "off KBERT_FAST_PATHS must be 0 or 1; received 'off'."]


def test_switched_restores_the_setting_even_on_errors():
    before = fast_paths.active()
    with pytest.raises(RuntimeError), fast_paths.switched(False):
        assert not fast_paths.active()
        with fast_paths.switched(True):
            assert fast_paths.active() == (BACKEND == "torch")
        raise RuntimeError
    assert fast_paths.active() == before == (BACKEND == "torch")


def test_in_place_cache_writes_only_inside_the_scope_with_the_fast_paths_on():
    assert not fast_paths.writes_caches_in_place()
    with fast_paths.in_place_cache_writes():
        assert fast_paths.writes_caches_in_place() == (BACKEND == "torch")
        with fast_paths.switched(False):
            assert not fast_paths.writes_caches_in_place()
    assert not fast_paths.writes_caches_in_place()


@pytest.mark.skipif(BACKEND != "torch", reason="the few-row layouts are PyTorch's")
@pytest.mark.parametrize("kernel_transposed", [False, True])
def test_few_row_inference_reads_a_wide_output_as_in_out(kernel_transposed):
    """A decoding-sized matmul without gradients reads a vocabulary-wide weight `(in, out)`:
    an `(out, in)` table through a cached transposed copy that follows `assign`, an `(in, out)`
    kernel as it is (atol 1e-5 against NumPy)."""
    import torch

    rng = np.random.default_rng(6)
    units = torch_ops.WIDE_OUTPUT + 1
    x = rng.standard_normal((2, 1, 4)).astype("float32")
    stored = rng.standard_normal((units, 4) if kernel_transposed else (4, units)).astype("float32")
    variable = keras.Variable(stored)
    with torch.no_grad():
        for scale in (1.0, -2.0):
            variable.assign(stored * scale)
            kernel = stored.T * scale if kernel_transposed else stored * scale
            outputs = dense(x, variable, None, kernel_transposed=kernel_transposed)
            np.testing.assert_allclose(to_numpy(outputs), x @ kernel, atol=1e-5, rtol=0)
    assert (id(variable.value) in torch_ops._LINEAR_WEIGHTS) == kernel_transposed


@pytest.mark.skipif(BACKEND != "torch", reason="the few-row layouts are PyTorch's")
def test_few_row_inference_copies_no_slice_of_a_parameter():
    """A kernel that is a slice of a parameter is read as it is: no copy, and the product of
    the slice (atol 1e-5 against NumPy)."""
    import torch

    rng = np.random.default_rng(7)
    stored = rng.standard_normal((4, 6)).astype("float32")
    variable = keras.Variable(stored)
    x = rng.standard_normal((2, 1, 4)).astype("float32")
    with torch.no_grad():
        outputs = dense(x, variable.value[:, :3], None)
    np.testing.assert_allclose(to_numpy(outputs), x @ stored[:, :3], atol=1e-5, rtol=0)
    assert id(variable.value) not in torch_ops._LINEAR_WEIGHTS


@pytest.mark.skipif(BACKEND != "torch", reason="the fast paths are PyTorch's")
def test_a_memoized_conversion_is_shared_by_views_and_redone_after_a_change():
    """The layers of one call share a mask's conversion; a mask changed in place, another view, or
    another extra tensor is converted afresh; nothing is kept once the mask is gone."""
    import torch

    calls = []

    def conversion(mask):
        def convert():
            calls.append(1)
            return mask.float() * 2.0

        return convert

    mask = torch.tensor([[0, 1, 1]])
    first = torch_ops.memoized("test", mask[:, None], (), conversion(mask))
    again = torch_ops.memoized("test", mask[:, None], (), conversion(mask))
    assert again is first and len(calls) == 1
    mask[0, 0] = 1  # in place: its version changes
    changed = torch_ops.memoized("test", mask[:, None], (), conversion(mask))
    assert changed.tolist() == [[2.0, 2.0, 2.0]] and len(calls) == 2
    torch_ops.memoized("test", mask[:, None, :2], (), conversion(mask))  # another view
    torch_ops.memoized("test", mask[:, None, :2], (torch.zeros(1),), conversion(mask))
    assert len(calls) == 4
    key = ("test", id(mask))
    assert key in torch_ops._MEMO
    del mask
    assert key not in torch_ops._MEMO


@pytest.mark.skipif(BACKEND != "torch", reason="the fast paths are PyTorch's")
def test_a_column_and_cache_writes_in_place_equal_numpy():
    import torch

    buffer = torch.zeros((2, 4), dtype=torch.int32)
    written = torch_ops.write_column(buffer, torch.tensor(2, dtype=torch.int32),
                                            torch.tensor([5, 6], dtype=torch.int32))
    assert written is buffer and buffer.tolist() == [[0, 0, 5, 0], [0, 0, 6, 0]]
    rng = np.random.default_rng(8)
    cache, keys, values = (rng.standard_normal(shape).astype("float32")
                           for shape in ((2, 3, 2, 5, 4), (2, 3, 2, 4), (2, 3, 2, 4)))
    expected = cache.copy()
    expected[:, :, 0, 1:3], expected[:, :, 1, 1:3] = keys, values
    tensor = torch.tensor(cache)
    with fast_paths.in_place_cache_writes():
        halves = torch_ops.write_cache(tensor, torch.tensor(keys), torch.tensor(values),
                                              torch.tensor(1, dtype=torch.int32))
    np.testing.assert_array_equal(tensor.numpy(), expected)
    np.testing.assert_array_equal(np.stack([h.numpy() for h in halves], axis=2), expected)
