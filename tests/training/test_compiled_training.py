"""Compiled training on PyTorch: `compile(jit_compile=True)` trains every pretrainer and task model.

For each model, 3 steps of `fit` compiled give eager's losses (to 1e-4); the
step is one graph (`torch._dynamo.explain` finds no break) and the third step
compiles nothing new. Dynamo's graphs run through AOT autograd's eager
backend (`aot_eager`) here: it traces forward and backward as inductor does,
without inductor's C++ build, which takes minutes a model on this CPU.
"""

import functools
import importlib
import pathlib
import sys

import keras
import numpy as np
import pytest
from helpers import BACKEND

import kbert
from kbert.pretraining import (BertPretrainer, StructBertPretrainer, XLNetPretrainer,
                               create_optimizer)
from kbert.tasks import CausalLM, Seq2SeqLM

pytestmark = pytest.mark.skipif(
    BACKEND != "torch", reason="jit_compile=True compiles with torch.compile on PyTorch only"
)
TESTS = pathlib.Path(__file__).resolve().parents[1]
for folder in ("pretraining", "tasks"):  # the models and batches of their own tests
    if str(TESTS / folder) not in sys.path:
        sys.path.insert(0, str(TESTS / folder))

STEPS = 3


def _case(module):
    """The model and `(x, y)` of the `TaskCase` named `CASE` in a test module."""
    case = importlib.import_module(module).CASE
    x = case.inputs()
    return case.make_model(), (x, case.targets(x))


def _bert():
    from test_bert_pretrainer import make_batch

    return BertPretrainer(_encoder(), pair_objective="nsp"), make_batch()


def _encoder(**overrides):
    sizes = dict(vocabulary_size=60, num_layers=1, num_heads=2, hidden_dim=16,
                 intermediate_dim=32, max_positions=32, dropout=0.1)
    return kbert.models.Encoder(**{**sizes, **overrides})


def _from_dataset(objective, model):
    """`model` and one batch of 8 rows of `pretraining_dataset(objective=...)`."""
    from test_pretraining_dataset import batches, make_dataset

    x, y = batches(make_dataset(objective, sequence_length=32), limit=1)[0]
    return model, (x, y)


def _causal_lm():
    from test_causal_lm import TINY, batch

    return CausalLM(kbert.models.GPT2(**TINY)), (batch(), None)


def _seq2seq_lm():
    from test_seq2seq_lm import TINY, batch

    return Seq2SeqLM(kbert.models.T5(**TINY)), batch()


def _structbert():
    backbone = kbert.models.bert_tiny(vocabulary_size=2000, num_layers=1, hidden_dim=16,
                                      num_heads=2, intermediate_dim=32, max_positions=32)
    return _from_dataset("structbert", StructBertPretrainer(backbone))


def _xlnet():
    backbone = kbert.models.xlnet_tiny(vocabulary_size=2000, num_layers=1, hidden_dim=16,
                                       num_heads=2, intermediate_dim=32)
    return _from_dataset("plm", XLNetPretrainer(backbone))


# Every pretrainer and every task model: (model, (x, y)) makers.
MODELS = {
    "BertPretrainer": _bert,
    "BiLMPretrainer": functools.partial(_case, "test_bilm_pretrainer"),
    "DistillationTrainer": functools.partial(_case, "test_distillation_trainer"),
    "ElectraPretrainer": functools.partial(_case, "test_electra_pretrainer"),
    "SpanBertPretrainer": functools.partial(_case, "test_span_bert_pretrainer"),
    "StructBertPretrainer": _structbert,
    "XLNetPretrainer": _xlnet,
    "CausalLM": _causal_lm,
    "MultipleChoice": functools.partial(_case, "test_multiple_choice"),
    "Seq2SeqLM": _seq2seq_lm,
    "SpanQuestionAnswering": functools.partial(_case, "test_span_question_answering"),
    "TextClassifier": functools.partial(_case, "test_text_classifier"),
    "TokenClassifier": functools.partial(_case, "test_token_classifier"),
}


class _StepRecord(keras.callbacks.Callback):
    """Each step's loss, and how many graphs dynamo has compiled after it."""

    def __init__(self):
        super().__init__()
        self.losses, self.graphs = [], []

    def on_train_batch_end(self, batch, logs=None):
        from torch._dynamo.utils import counters

        self.losses.append(float(logs["loss"]))
        self.graphs.append(counters["stats"]["unique_graphs"])


def _train(name, jit_compile):
    """`STEPS` steps of `fit` (one batch an epoch, so each epoch's loss is its step's); the record and the model."""
    keras.utils.set_random_seed(0)
    model, (x, y) = MODELS[name]()
    model.compile(optimizer=create_optimizer("adamw", 1e-3, total_steps=10, warmup_steps=1),
                  jit_compile=jit_compile)
    record = _StepRecord()
    batch = len(next(iter(x.values())))
    model.fit(x, y, batch_size=batch, epochs=STEPS, shuffle=False, verbose=0, callbacks=[record])
    return record, model, (x, y)


@pytest.fixture
def aot_eager(monkeypatch):
    """`torch.compile` with the `aot_eager` backend, dynamo's state reset before and after."""
    import torch

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_compiled_fit_matches_eager_in_one_graph(name, aot_eager):
    import torch

    eager, _, _ = _train(name, jit_compile=False)
    compiled, model, (x, y) = _train(name, jit_compile=True)
    np.testing.assert_allclose(compiled.losses, eager.losses, atol=1e-4, rtol=1e-4)
    assert compiled.graphs[2] == compiled.graphs[1], "the third step compiled again"
    data = keras.tree.map_structure(
        lambda a: None if a is None else torch.as_tensor(a, device=kbert_device()), (x, y))
    with torch._dynamo.config.patch(trace_autograd_ops=True):
        explanation = torch._dynamo.explain(model.train_step)(data)
    assert explanation.graph_break_count == 0, [b.reason for b in explanation.break_reasons]


def kbert_device():
    """The device Keras puts tensors on."""
    return keras.ops.zeros(()).device
