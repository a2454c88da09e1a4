"""No host data in a step on eager PyTorch: a forward pass, a training step, a decoding step.

On a GPU each tensor built from host data (Python numbers, lists, NumPy:
counted by wrapping `torch.tensor`, `torch.as_tensor` and `torch.from_numpy`)
is a host-to-device copy, and each value read back to the host (counted as
`aten._local_scalar_dense`) waits for the stream. kbert's forward passes build
and read none, for every family (the inputs are on the device already); a
training step builds none in kbert's code (its loss, its optimizer, its
learning-rate schedule); a decoding step reads one value, the loop's stop
check. Decoding is counted as the difference between a 2-step and a 6-step
greedy generation, so that what a generation builds once (its inputs, the
buffers) cancels out.

Keras' own PyTorch trainer builds tensors from Python numbers in a training
step (the loss tracker's sample weight, `clip_by_global_norm`'s bounds); they
are counted apart, as the tensors whose nearest caller outside Keras and
PyTorch is not kbert.
"""

import functools
import pathlib
import traceback

import keras
import numpy as np
import pytest
from helpers import BACKEND

import kbert
from kbert.generation import CausalLMGenerator, Seq2SeqGenerator
from kbert.pretraining import BiLMPretrainer, create_optimizer
from kbert.tasks import CausalLM, Seq2SeqLM, TextClassifier

pytestmark = pytest.mark.skipif(
    BACKEND != "torch", reason="host-to-device copies and reads are counted on eager PyTorch"
)
KBERT = str(pathlib.Path(kbert.__file__).parent)
LIBRARIES = (str(pathlib.Path(keras.__file__).parent), "/torch/", "/numpy/")


def _caller_is_kbert():
    """Whether the nearest frame of the current stack outside Keras, PyTorch and NumPy is kbert's."""
    for frame in reversed(traceback.extract_stack()[:-3]):
        if not any(library in frame.filename for library in LIBRARIES):
            return frame.filename.startswith(KBERT)
    return False


def _host_traffic(run):
    """`(tensors built from host data by kbert, by others, values read to the host)` during `run()`."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    built = {True: 0, False: 0}
    reads = [0]

    class ReadCounter(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._local_scalar_dense.default:
                reads[0] += 1
            return func(*args, **(kwargs or {}))

    def counting(function):
        def wrapper(*args, **kwargs):
            built[_caller_is_kbert()] += 1
            return function(*args, **kwargs)
        return wrapper

    originals = {name: getattr(torch, name) for name in ("tensor", "as_tensor", "from_numpy")}
    try:
        for name, function in originals.items():
            setattr(torch, name, counting(function))
        with ReadCounter():
            run()
    finally:
        for name, function in originals.items():
            setattr(torch, name, function)
    return built[True], built[False], reads[0]


# --- Forward passes and training steps ---------------------------------------------

BATCH, LENGTH = 2, 16
RNG = np.random.default_rng(0)


def _ids(high, shape=(BATCH, LENGTH), low=3):
    return RNG.integers(low, high, shape).astype("int32")


def _padded(shape=(BATCH, LENGTH)):
    mask = np.ones(shape, "int32")
    mask[1, -3:] = 0
    return mask


def _classifier(attention, **attention_kwargs):
    encoder = kbert.models.Encoder(
        vocabulary_size=40, num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=32,
        max_positions=64, attention=attention, attention_kwargs=attention_kwargs)
    x = {"token_ids": _ids(40), "segment_ids": np.zeros((BATCH, LENGTH), "int32"),
         "padding_mask": _padded()}
    return encoder, TextClassifier(encoder, 2), x, {"labels": np.array([0, 1])}


def _gpt2():
    gpt2 = kbert.models.GPT2(vocabulary_size=40, num_layers=2, num_heads=2, hidden_dim=16,
                             intermediate_dim=24, max_positions=64, end_id=0)
    x = {"token_ids": _ids(40), "padding_mask": np.ones((BATCH, LENGTH), "int32")}
    return gpt2, CausalLM(gpt2), x, None


def _seq2seq(backbone):
    x = {"encoder_token_ids": _ids(30), "encoder_padding_mask": _padded(),
         "decoder_token_ids": _ids(30, (BATCH, 6)), "decoder_padding_mask": _padded((BATCH, 6))}
    return backbone, Seq2SeqLM(backbone), x, _ids(30, (BATCH, 6))


def _elmo():
    elmo = kbert.models.ELMo(hidden_dim=8, cell_dim=16, num_layers=2, filters=[(1, 8), (2, 8)])
    x = {"character_ids": _ids(262, (BATCH, 5, 50), low=1), "padding_mask": _padded((BATCH, 5))}
    return elmo, BiLMPretrainer(elmo, vocabulary_size=20), x, {"token_ids": _ids(20, (BATCH, 5))}


FAMILIES = {
    "dense": functools.partial(_classifier, "dense"),
    "bigbird": functools.partial(_classifier, "bigbird", block_size=2, num_random_blocks=1),
    "longformer": functools.partial(_classifier, "longformer", window=4),
    "gpt2": _gpt2,
    "t5": lambda: _seq2seq(kbert.models.T5(vocabulary_size=30, num_layers=1, num_decoder_layers=2,
                                           num_heads=2, hidden_dim=8, intermediate_dim=16)),
    "bart": lambda: _seq2seq(kbert.models.BART(vocabulary_size=30, num_layers=1, num_heads=2,
                                               hidden_dim=16, intermediate_dim=32, max_positions=16)),
    "elmo": _elmo,
}


def _on_device(data):
    import torch

    device = keras.ops.zeros(()).device
    return keras.tree.map_structure(lambda a: None if a is None else torch.as_tensor(a, device=device), data)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_forward_pass_and_a_training_step_build_no_host_tensor(family):
    backbone, model, x, y = FAMILIES[family]()
    x, y = _on_device((x, y))
    backbone(x)  # built
    assert _host_traffic(lambda: backbone(x)) == (0, 0, 0)
    model.compile(optimizer=create_optimizer("adamw", 1e-3, total_steps=10, warmup_steps=2))
    model.train_step((x, y))  # the optimizer's variables are made at the first step
    kbert_built, keras_built, reads = _host_traffic(lambda: model.train_step((x, y)))
    assert (kbert_built, reads) == (0, 0)
    assert keras_built <= 3, "Keras' trainer: the loss tracker's weight, clip_by_global_norm"


# --- Decoding steps -----------------------------------------------------------------


def _per_step(make_generator, inputs):
    """Host tensors and reads each decoding step adds: (6-step run − 2-step run) / 4."""
    counts = []
    for steps in (2, 6):
        generator = make_generator(steps)
        generator(inputs)  # warm-up: whatever a first call sets up
        built, others, reads = _host_traffic(functools.partial(generator, inputs))
        counts.append((built + others, reads))
    return tuple((long - short) / 4 for short, long in zip(*counts))


def _maker(generator_class, model):
    """`steps` to an eager generator of `model` that decodes that many tokens."""
    return lambda steps: generator_class(model, max_new_tokens=steps, jit_compile=False)


def test_a_gpt2_decoding_step_builds_no_host_tensor_and_reads_once():
    gpt2 = kbert.models.GPT2(vocabulary_size=40, num_layers=2, num_heads=2, hidden_dim=16,
                             intermediate_dim=24, max_positions=64, dropout=0.0, end_id=0)
    x = {"token_ids": _ids(40, (2, 8), low=1), "padding_mask": np.ones((2, 8), "int32")}
    assert _per_step(_maker(CausalLMGenerator, gpt2), x) == (0, 1)


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_a_seq2seq_decoding_step_builds_no_host_tensor_and_reads_once(family):
    if family == "t5":
        model = kbert.models.T5(vocabulary_size=30, num_layers=1, num_decoder_layers=2, num_heads=2,
                                hidden_dim=8, intermediate_dim=16, dropout=0.0)
    else:
        model = kbert.models.BART(vocabulary_size=30, num_layers=1, num_heads=2, hidden_dim=16,
                                  intermediate_dim=32, max_positions=16, dropout=0.0)
    x = {"encoder_token_ids": _ids(30, (2, 6)), "encoder_padding_mask": np.ones((2, 6), "int32")}
    assert _per_step(_maker(Seq2SeqGenerator, model), x) == (0, 1)
