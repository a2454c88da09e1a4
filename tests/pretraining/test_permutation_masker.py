"""PermutationMasker and pretraining_dataset(objective="plm"): the share of targets, their
spans, the factorization order the masks encode, static shapes, seeds."""

import numpy as np
import pytest
import tensorflow as tf
from test_pretraining_dataset import CLS, PAD, SEP, batches, make_dataset

from kbert.pretraining.permutation_masker import PermutationMasker

pytestmark = pytest.mark.backend_independent  # tf.data maps: the Keras backend plays no part

SPECIAL = [PAD, CLS, SEP]


def masked(length=60, rows=500, seed=(3, 4), pad_from=None):
    ids = np.random.default_rng(0).integers(5, 100, (rows, length)).astype("int32")
    padding = np.ones_like(ids)
    if pad_from is not None:
        padding[:, pad_from:] = 0
        ids[:, pad_from:] = PAD
    out = PermutationMasker(100, SPECIAL)(ids, padding, seed=list(seed))
    return ids, padding, {name: value.numpy() for name, value in out.items()}


def spans(targets):
    """The lengths of the runs of consecutive targets in one row."""
    edges = np.diff(np.concatenate([[0], targets.astype(int), [0]]))
    return np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)


def test_about_a_sixth_of_the_tokens_in_spans_of_at_most_five():
    ids, _, out = masked()
    share = out["mask_weights"].sum() / ids.size
    assert abs(share - 1 / 6) < 0.01, share
    # One span per context block; two touch only when one ends its block and the next
    # starts its own (rare), so a run of targets is one span of 1..5 or, rarely, two.
    lengths = []
    for row in range(len(ids)):
        targets = np.zeros(ids.shape[1], bool)
        targets[out["mask_positions"][row][out["mask_weights"][row] > 0]] = True
        lengths.extend(spans(targets))
    lengths = np.array(lengths)
    assert lengths.min() >= 1 and lengths.max() <= 10
    assert np.mean(lengths > 5) < 0.02
    assert abs(lengths[lengths <= 5].mean() - 3) < 0.2  # uniform over 1..5


def test_targets_are_the_original_tokens_and_the_mapping_is_one_hot():
    ids, _, out = masked(rows=50)
    np.testing.assert_array_equal(out["token_ids"], ids)  # nothing is replaced
    real = out["mask_weights"] > 0
    rows = np.arange(len(ids))[:, None].repeat(real.shape[1], 1)
    np.testing.assert_array_equal(out["mask_ids"][real], ids[rows[real], out["mask_positions"][real]])
    mapping = out["target_mapping"]
    np.testing.assert_array_equal(mapping.sum(-1), 1.0)
    np.testing.assert_array_equal(mapping.argmax(-1), out["mask_positions"])


def test_the_masks_encode_one_factorization_order():
    """Context sees only context; a target sees the context and the targets before it."""
    ids, _, out = masked(rows=100)
    for row in range(len(ids)):
        blocked = out["permutation_mask"][row].astype(bool)
        targets = np.zeros(ids.shape[1], bool)
        targets[out["mask_positions"][row][out["mask_weights"][row] > 0]] = True
        assert not blocked[:, ~targets].any()  # nobody is kept from the context
        assert blocked[np.ix_(~targets, targets)].all()  # the context never sees a target
        on_targets = blocked[np.ix_(targets, targets)]
        assert on_targets.diagonal().all()  # no target sees itself
        # Exactly one of (i sees j, j sees i) for two targets: a strict total order.
        np.testing.assert_array_equal(on_targets ^ on_targets.T, ~np.eye(len(on_targets), dtype=bool))


def test_padding_and_special_tokens_are_never_targets():
    ids, padding, out = masked(rows=100, pad_from=40)
    ids[:, 0] = CLS
    real = out["mask_weights"] > 0
    assert (out["mask_positions"][real] < 40).all()


def test_a_seed_gives_the_same_masks():
    _, _, first = masked(rows=4)
    _, _, again = masked(rows=4)
    _, _, other = masked(rows=4, seed=(5, 6))
    np.testing.assert_array_equal(first["permutation_mask"], again["permutation_mask"])
    assert not np.array_equal(first["mask_positions"], other["mask_positions"])


def test_plm_dataset_has_static_shapes():
    dataset = make_dataset("plm", sequence_length=32)
    x_spec, y_spec = dataset.element_spec
    predictions = PermutationMasker(2, []).predictions_for(32)
    assert x_spec["permutation_mask"].shape == (8, 32, 32)
    assert x_spec["target_mapping"].shape == (8, predictions, 32)
    assert x_spec["token_ids"].shape == (8, 32) and x_spec["token_ids"].dtype == tf.int32
    assert set(y_spec) == {"mask_ids", "mask_weights"} and y_spec["mask_ids"].shape == (8, predictions)
    x, y = batches(dataset, limit=1)[0]
    share = y["mask_weights"].sum() / x["padding_mask"].sum()
    assert 0.08 < share < 0.25


def test_bad_arguments():
    with pytest.raises(ValueError, match="max_span_length"):
        PermutationMasker(10, SPECIAL, max_span_length=0)
    with pytest.raises(ValueError, match="mask_rate"):
        PermutationMasker(10, SPECIAL, prediction_rate=1.5)
