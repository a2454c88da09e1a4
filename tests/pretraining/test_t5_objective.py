"""T5Objective: each of the T5 paper's objectives against a NumPy reference of its examples, and its draws'
statistics (T5 paper, Tables 4 and 6; docs/algorithms.md §26)."""

import numpy as np
import pytest

from kbert.pretraining.span_corruption import SpanCorruption
from kbert.pretraining.t5_objective import RANDOM_TOKEN_SHARE, T5_OBJECTIVES, T5Objective

tf = pytest.importorskip("tensorflow")

pytestmark = pytest.mark.backend_independent  # tf.data maps: the Keras backend plays no part
VOCABULARY, SENTINELS, END, PAD = 500, 100, 1, 0
MASK = VOCABULARY - 1  # <extra_id_0>


def reference(objective, x, draws, inputs_length, targets_length):
    """The example the T5 paper describes, in NumPy, from the same random decisions."""
    noise, split = draws["noise"], int(draws["split"])
    if objective == "prefix_lm":
        inputs, targets = x[:split], x[split:]
    elif objective in ("bert_style", "mass"):
        inputs, targets = np.where(noise, MASK, x), x
        if objective == "bert_style":
            inputs = np.where(draws["random"], draws["replacements"], inputs)
    elif objective == "deshuffle":
        inputs, targets = x[draws["order"]], x
    elif objective == "drop_tokens":
        inputs, targets = x[~noise], x[noise]
    else:  # span_corruption: each run of noise becomes the next sentinel, counting down from the top
        inputs, targets, sentinel = [], [], MASK
        for i, token in enumerate(x):
            if noise[i] and (i == 0 or not noise[i - 1]):  # a span starts: its sentinel in both
                inputs.append(sentinel)
                targets.append(sentinel)
                sentinel -= 1
            (targets if noise[i] else inputs).append(token)
        inputs, targets = np.array(inputs), np.array(targets)

    def padded(ids, length):
        ids = np.concatenate([ids, [END]])
        return np.pad(ids, (0, length - len(ids)), constant_values=PAD)

    return padded(inputs, inputs_length), padded(targets, targets_length)


def _objective(name, inputs_length=32):
    return T5Objective(name, inputs_length, VOCABULARY, num_sentinels=SENTINELS)


@pytest.mark.parametrize("name", T5_OBJECTIVES)
def test_each_objective_matches_the_numpy_reference(name):
    objective = _objective(name)
    rng = np.random.default_rng(0)
    for seed in range(8):
        x = rng.integers(3, VOCABULARY - SENTINELS, objective.raw_length).astype("int32")
        draws = {key: value.numpy() for key, value in objective.draws([seed, 7]).items()}
        example = objective(x, seed=[seed, 7])
        inputs, targets = reference(name, x, draws, objective.inputs_length, objective.targets_length)
        np.testing.assert_array_equal(example["inputs"].numpy(), inputs)
        np.testing.assert_array_equal(example["targets"].numpy(), targets)


def test_lengths_fill_the_inputs():
    lengths = {name: (o.raw_length, o.inputs_length, o.targets_length)
               for name, o in ((name, _objective(name, 128)) for name in T5_OBJECTIVES)}
    assert lengths == {
        "prefix_lm": (127, 128, 127), "bert_style": (127, 128, 128), "deshuffle": (127, 128, 128),
        "mass": (127, 128, 128),
        "span_corruption": (141, 128, 29),  # SpanCorruption's (T5's random_spans_helper)
        "drop_tokens": (149, 128, 23),  # 149 − round(0.15·149) + EOS = 128; 22 dropped + EOS
    }
    assert (SpanCorruption(128, VOCABULARY).raw_length, SpanCorruption(128, VOCABULARY).targets_length) == (141, 29)


def test_draws_have_the_paper_s_statistics():
    objective = _objective("bert_style", 128)
    draws = [{k: v.numpy() for k, v in objective.draws([3, seed]).items()} for seed in range(300)]
    assert all(d["noise"].sum() == round(0.15 * 127) for d in draws)  # 19 corrupted tokens each
    random_share = sum(d["random"].sum() for d in draws) / sum(d["noise"].sum() for d in draws)
    assert random_share == pytest.approx(RANDOM_TOKEN_SHARE, abs=0.02)
    assert all(not (d["random"] & ~d["noise"]).any() for d in draws)
    replacements = np.concatenate([d["replacements"] for d in draws])
    assert replacements.min() >= 3 and replacements.max() < VOCABULARY - SENTINELS  # regular ids only
    positions = np.mean([d["noise"] for d in draws], axis=0)  # every position equally likely
    assert positions.min() > 0.05 and positions.max() < 0.3
    assert all(sorted(d["order"]) == list(range(127)) for d in draws)
    splits = np.array([d["split"] for d in draws])
    assert splits.min() >= 1 and splits.max() <= 126 and 50 < splits.mean() < 77  # uniform on [1, 126]


def test_a_seed_gives_the_same_example_and_another_seed_another():
    objective = _objective("mass")
    x = np.arange(10, 10 + objective.raw_length, dtype="int32")
    first, again, other = (objective(x, seed=s)["inputs"].numpy() for s in ([1, 2], [1, 2], [1, 3]))
    np.testing.assert_array_equal(first, again)
    assert (first != other).any()


def test_dataset_batches_for_seq2seq_with_padding_masks():
    objective = _objective("prefix_lm", 16)
    batches = objective.dataset(np.arange(3, 203, dtype="int32"), batch_size=4, seed=0, repeat=True)
    x, y = next(iter(batches))
    assert x["encoder_token_ids"].shape == (4, 16) and y.shape == (4, objective.targets_length)
    np.testing.assert_array_equal(x["encoder_padding_mask"], x["encoder_token_ids"].numpy() != PAD)
    np.testing.assert_array_equal(x["decoder_padding_mask"], y.numpy() != PAD)
    np.testing.assert_array_equal(x["decoder_token_ids"][:, 1:], y[:, :-1])  # shifted right behind 0
    assert len(list(batches.take(30))) == 30  # endless with repeat (200 ids make 13 chunks a pass)


@pytest.mark.parametrize("arguments, message", [
    (dict(objective="mlm"), "objective"),
    (dict(num_sentinels=497), "No regular ids"),
    (dict(inputs_length=2), "inputs_length must be at least 3"),
])
def test_bad_arguments_are_refused(arguments, message):
    with pytest.raises(ValueError, match=message):
        T5Objective(**{"objective": "mass", "inputs_length": 16, "vocabulary_size": VOCABULARY, **arguments})
