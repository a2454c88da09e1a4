"""No host data in a decoding step on eager PyTorch.

Each new token adds no tensor built from host data (Python numbers, lists,
NumPy: counted by wrapping `torch.tensor`, `torch.as_tensor` and
`torch.from_numpy`), and reads one value back to the host (counted as
`aten._local_scalar_dense`): the loop's stop check. Counted as the
difference between a 2-step and a 6-step greedy generation, so that what a
generation builds once (its inputs, the buffers) cancels out.
"""

import functools

import numpy as np
import pytest
from helpers import BACKEND

import kbert
from kbert.generation import CausalLMGenerator, Seq2SeqGenerator

pytestmark = pytest.mark.skipif(
    BACKEND != "torch", reason="host-to-device copies and reads are counted on eager PyTorch"
)


def _host_traffic(generate):
    """`(tensors built from host data, values read to the host)` during `generate()`."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    built = [0]

    class ReadCounter(TorchDispatchMode):
        reads = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._local_scalar_dense.default:
                ReadCounter.reads += 1
            return func(*args, **(kwargs or {}))

    def counting(function):
        def wrapper(*args, **kwargs):
            built[0] += 1
            return function(*args, **kwargs)
        return wrapper

    originals = {name: getattr(torch, name) for name in ("tensor", "as_tensor", "from_numpy")}
    try:
        for name, function in originals.items():
            setattr(torch, name, counting(function))
        with ReadCounter():
            generate()
    finally:
        for name, function in originals.items():
            setattr(torch, name, function)
    return built[0], ReadCounter.reads


def _per_step(make_generator, inputs):
    """Host tensors and reads each decoding step adds: (6-step run − 2-step run) / 4."""
    counts = []
    for steps in (2, 6):
        generator = make_generator(steps)
        generator(inputs)  # warm-up: whatever a first call sets up
        counts.append(_host_traffic(functools.partial(generator, inputs)))
    return tuple((long - short) / 4 for short, long in zip(*counts))


def _maker(generator_class, model):
    """`steps` to an eager generator of `model` that decodes that many tokens."""
    return lambda steps: generator_class(model, max_new_tokens=steps, jit_compile=False)


def test_a_gpt2_decoding_step_builds_no_host_tensor_and_reads_once():
    gpt2 = kbert.models.GPT2(vocabulary_size=40, num_layers=2, num_heads=2, hidden_dim=16,
                             intermediate_dim=24, max_positions=64, dropout=0.0, end_id=0)
    rng = np.random.default_rng(0)
    x = {"token_ids": rng.integers(1, 40, (2, 8)).astype("int32"),
         "padding_mask": np.ones((2, 8), "int32")}
    assert _per_step(_maker(CausalLMGenerator, gpt2), x) == (0, 1)


def test_a_t5_decoding_step_builds_no_host_tensor_and_reads_once():
    t5 = kbert.models.T5(vocabulary_size=30, num_layers=1, num_decoder_layers=2, num_heads=2,
                         hidden_dim=8, intermediate_dim=16, dropout=0.0)
    rng = np.random.default_rng(0)
    x = {"encoder_token_ids": rng.integers(2, 30, (2, 6)).astype("int32"),
         "encoder_padding_mask": np.ones((2, 6), "int32")}
    assert _per_step(_maker(Seq2SeqGenerator, t5), x) == (0, 1)
