"""Constructor arguments that are not what they claim to be fail at once, naming the argument."""

import math

import pytest

import kbert
from kbert.arguments import (
    integer,
    no_unknown_keywords,
    non_negative_int,
    number,
    one_of,
    positive_int,
    positive_number,
    probability,
)
from kbert.generation import Seq2SeqGenerator
from kbert.layers import (
    BigBirdAttention,
    LongformerAttention,
    MultiHeadAttention,
    RelativePositionBias,
    RMSNormalization,
    TextEmbedding,
    EncoderBlock,
)
from kbert.models import T5, Encoder, bert_tiny, to_long_context
from kbert.pretraining import MaskedLMMasker, SpanCorruption
from kbert.tasks import MultipleChoice, TextClassifier, TokenClassifier

pytestmark = pytest.mark.backend_independent  # the same on every backend: one run

TINY = dict(vocabulary_size=20, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16)


# --- The helpers ------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, 2.0, 2.5, True, "2", None, math.nan])
def test_positive_int_rejects_what_is_no_positive_integer(value):
    with pytest.raises(ValueError, match=r"^count must be a positive integer; received "):
        positive_int("count", value)


def test_integer_helpers_accept_integers_and_optional_none():
    import numpy as np

    assert positive_int("count", np.int64(3)) == 3 and type(positive_int("count", np.int64(3))) is int
    assert non_negative_int("offset", 0) == 0
    assert positive_int("count", None, optional=True) is None
    assert integer("num_choices", 2, minimum=2) == 2
    with pytest.raises(ValueError, match="num_choices must be an integer >= 2; received 1"):
        integer("num_choices", 1, minimum=2)
    with pytest.raises(ValueError, match="offset must be a non-negative integer; received -1"):
        non_negative_int("offset", -1)


@pytest.mark.parametrize("value", [1.0, -0.1, 1.5, math.nan, True, "0.1", None])
def test_probability_rejects_values_outside_zero_one(value):
    with pytest.raises(ValueError, match=r"dropout must be a number in \[0, 1\); received"):
        probability("dropout", value)


def test_number_bounds_and_openness():
    assert probability("dropout", 0) == 0.0 and probability("dropout", 0.5) == 0.5
    assert number("rate", 1.0, 0, 1) == 1.0
    assert number("top_p", None, 0, 1, optional=True) is None
    with pytest.raises(ValueError, match=r"rate must be a number in \(0, 1\]; received 0"):
        number("rate", 0, 0, 1, low_open=True)
    with pytest.raises(ValueError, match=r"epsilon must be a number in \(0, inf\); received 0.0"):
        positive_number("epsilon", 0.0)
    with pytest.raises(ValueError, match=r"epsilon must be a number in \(0, inf\); received inf"):
        positive_number("epsilon", math.inf)


def test_one_of_and_unknown_keywords_name_the_value():
    assert one_of("kind", "a", ("a", "b")) == "a"
    with pytest.raises(ValueError, match=r"kind must be one of \['a', 'b'\]; received 'c'"):
        one_of("kind", "c", ("a", "b"))
    no_unknown_keywords("f", {"a": 1}, known=("a",))
    with pytest.raises(TypeError, match=r"Unknown argument\(s\) for f: x, y\. Known: a\."):
        no_unknown_keywords("f", {"x": 1, "y": 2, "a": 3}, known=("a",))


# --- The constructors, one class of bad argument at a time ----------------------------

COUNTS = [
    (lambda: bert_tiny(num_layers=-1), "num_layers", "-1"),
    (lambda: bert_tiny(num_layers=2.0), "num_layers", "2.0"),
    (lambda: bert_tiny(num_heads=0), "num_heads", "0"),
    (lambda: Encoder(**{**TINY, "hidden_dim": True}), "hidden_dim", "True"),
    (lambda: Encoder(**{**TINY, "max_positions": 0}), "max_positions", "0"),
    (lambda: Encoder(**{**TINY, "vocabulary_size": 20.0}), "vocabulary_size", "20.0"),
    (lambda: T5(**{**TINY, "num_layers": 0}), "num_layers", "0"),
    (lambda: T5(**TINY, num_buckets=0), "num_buckets", "0"),
    (lambda: BigBirdAttention(2, 4, block_size=2.5), "block_size", "2.5"),
    (lambda: LongformerAttention(2, 4, window=0), "window", "0"),
    (lambda: MultiHeadAttention(num_heads=0, key_dim=4), "num_heads", "0"),
    (lambda: EncoderBlock(num_heads=2, intermediate_dim=-8), "intermediate_dim", "-8"),
    (lambda: RelativePositionBias(num_heads=2, max_distance=1.5), "max_distance", "1.5"),
    (lambda: TextEmbedding(10, 8, num_segments=-1), "num_segments", "-1"),
    (lambda: MaskedLMMasker(10, 1, [0], max_predictions=0), "max_predictions", "0"),
    (lambda: SpanCorruption(inputs_length=0, vocabulary_size=10), "inputs_length", "0"),
]


@pytest.mark.parametrize("build, name, value", COUNTS)
def test_counts_must_be_positive_integers(build, name, value):
    with pytest.raises(ValueError, match=rf"{name} must be .*integer.*; received {value}\."):
        build()


def test_task_counts_must_be_integers_in_range():
    backbone = bert_tiny(**TINY)
    for build, name in (
        (lambda: TextClassifier(backbone, num_classes=0), "num_classes"),
        (lambda: TextClassifier(backbone, num_classes=2.5), "num_classes"),
        (lambda: TokenClassifier(backbone, num_labels=True), "num_labels"),
        (lambda: MultipleChoice(backbone, num_choices=1), "num_choices"),
    ):
        with pytest.raises(ValueError, match=f"{name} must be"):
            build()


PROBABILITIES = [
    (lambda: bert_tiny(dropout=1.5), "dropout"),
    (lambda: Encoder(**TINY, attention_dropout=-0.1), "attention_dropout"),
    (lambda: MultiHeadAttention(2, 4, dropout=1.0), "dropout"),
    (lambda: T5(**TINY, dropout=2), "dropout"),
    (lambda: MaskedLMMasker(10, 1, [0], mask_rate=0.0), "mask_rate"),
    (lambda: SpanCorruption(8, 10, noise_density=1.0), "noise_density"),
]


@pytest.mark.parametrize("build, name", PROBABILITIES)
def test_probabilities_must_be_in_range(build, name):
    with pytest.raises(ValueError, match=rf"{name} must be a number in [\[(]0, 1[\])]"):
        build()


def test_task_dropout_is_a_probability():
    with pytest.raises(ValueError, match=r"dropout must be a number in \[0, 1\); received 1.2"):
        TextClassifier(bert_tiny(**TINY), num_classes=2, dropout=1.2)


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: bert_tiny(activation="gleu"), "Unknown activation 'gleu'"),
        (lambda: bert_tiny(attention="sparse"), "attention must be one of .*received 'sparse'"),
        (lambda: T5(**TINY, activation="rleu"), "Unknown activation 'rleu'"),
        (lambda: Seq2SeqGenerator(T5(**TINY), strategy="greed"), "strategy must be one of"),
    ],
)
def test_names_must_come_from_the_fixed_set(build, message):
    with pytest.raises(ValueError, match=message):
        build()


@pytest.mark.parametrize(
    "build, name",
    [
        (lambda: bert_tiny(layer_norm_epsilon=0), "layer_norm_epsilon"),
        (lambda: T5(**TINY, layer_norm_epsilon=-1e-6), "layer_norm_epsilon"),
        (lambda: RMSNormalization(epsilon=0.0), "epsilon"),
        (lambda: Seq2SeqGenerator(T5(**TINY), temperature=0), "temperature"),
    ],
)
def test_epsilons_and_temperatures_must_be_positive(build, name):
    with pytest.raises(ValueError, match=rf"{name} must be a number in \(0, inf\)"):
        build()


@pytest.mark.parametrize(
    "build, unknown",
    [
        (lambda: bert_tiny(num_layer=1), "num_layer"),
        (lambda: Encoder(**TINY, hidden_size=8), "hidden_size"),
        (lambda: T5(**TINY, n_layers=1), "n_layers"),
        (lambda: to_long_context(bert_tiny(**TINY), 16, windows=4), "windows"),
        (lambda: TextClassifier(bert_tiny(**TINY), 2, num_class=2), "num_class"),
        (lambda: kbert.pretraining.BertPretrainer(bert_tiny(**TINY), objective="nsp"), "objective"),
        (lambda: Seq2SeqGenerator(T5(**TINY), beams=2), "beams"),
        (lambda: MaskedLMMasker(10, 1, [0], mask_prob=0.1), "mask_prob"),
    ],
)
def test_unknown_keyword_arguments_are_named(build, unknown):
    with pytest.raises((TypeError, ValueError), match=unknown):
        build()
