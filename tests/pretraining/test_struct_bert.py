"""StructBERT: the word-structural objective (TrigramShuffler), the sentence-structural
pairs (structbert_pairs), pretraining_dataset(objective="structbert") and
StructBertPretrainer, statistically and exactly."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from test_pretraining_dataset import CLS, PAD, SEP, batches, make_dataset

import kbert
from kbert.pretraining.sentence_pairs import (
    NEXT_SEGMENT,
    OTHER_DOCUMENT,
    PREVIOUS_SEGMENT,
    structbert_pairs,
)
from kbert.pretraining.struct_bert_pretrainer import StructBertPretrainer
from kbert.pretraining.trigram_shuffler import TrigramShuffler

LENGTH, ROWS = 60, 3000


def shuffled(rows=ROWS, masked=None, seed=(1, 2)):
    """Rows of distinct ids (so a shuffle shows), shuffled with no masked-LM positions."""
    ids = (np.arange(LENGTH)[None] + 5 + 100 * np.arange(rows)[:, None]).astype("int32")
    masked = np.zeros(ids.shape, bool) if masked is None else masked
    out = TrigramShuffler([PAD, CLS, SEP])(ids, np.ones_like(ids), masked, seed=list(seed))
    return ids, {name: value.numpy() for name, value in out.items()}


def trigrams(out, row):
    """The shuffled trigrams of a row as position triples."""
    positions = out["order_positions"][row][out["order_weights"][row] > 0]
    assert len(positions) % 3 == 0
    return positions.reshape(-1, 3)


def test_five_percent_of_the_trigrams_are_shuffled():
    _, out = shuffled()
    # Trigrams start at a random phase 0, 1, 2: 20, 19 and 19 whole ones in 60 positions.
    candidates = ROWS * (20 + 19 + 19) / 3
    share = out["order_weights"].sum() / 3 / candidates
    assert abs(share - 0.05) < 0.004, share


def test_each_shuffled_trigram_is_a_real_permutation_and_the_targets_are_the_originals():
    ids, out = shuffled(rows=500)
    seen = 0
    for row in range(len(ids)):
        for positions in trigrams(out, row):
            assert positions[1] == positions[0] + 1 and positions[2] == positions[0] + 2
            before, after = ids[row, positions], out["token_ids"][row, positions]
            assert sorted(after) == sorted(before) and not np.array_equal(after, before)
            seen += 1
        np.testing.assert_array_equal(
            out["order_ids"][row][out["order_weights"][row] > 0],
            ids[row, out["order_positions"][row][out["order_weights"][row] > 0]],
        )
        unshuffled = np.ones(LENGTH, bool)
        unshuffled[trigrams(out, row).ravel()] = False
        np.testing.assert_array_equal(out["token_ids"][row, unshuffled], ids[row, unshuffled])
    assert seen > 300


def test_masked_tokens_are_never_shuffled():
    masked = np.zeros((ROWS // 3, LENGTH), bool)
    masked[:, 1::2] = True  # no three unmasked tokens in a row
    _, out = shuffled(rows=ROWS // 3, masked=masked)
    assert out["order_weights"].sum() == 0


def documents(count=2000, sentences=6, words=4):
    """Documents of distinct, increasing ids: where a segment came from can be read off."""
    start, corpus = 10, []
    for _ in range(count):
        document = []
        for _ in range(sentences):
            document.append(list(range(start, start + words)))
            start += words
        corpus.append(document)
    return corpus


def test_pair_labels_a_third_each_and_previous_is_the_swapped_order():
    corpus = documents()
    document_of = {t: d for d, doc in enumerate(corpus) for s in doc for t in s}
    pairs = list(structbert_pairs(corpus, 24, seed=0))
    labels = np.array([label for _, _, label in pairs])
    for label in (NEXT_SEGMENT, PREVIOUS_SEGMENT, OTHER_DOCUMENT):
        assert abs(np.mean(labels == label) - 1 / 3) < 0.03, (label, np.mean(labels == label))
    for a, b, label in pairs:
        if label == OTHER_DOCUMENT:
            assert document_of[a[0]] != document_of[b[0]]
            continue
        first, second = (a, b) if label == NEXT_SEGMENT else (b, a)  # previous: B came first
        assert document_of[a[0]] == document_of[b[0]]
        for segment in (first, second):
            assert segment == list(range(segment[0], segment[0] + len(segment)))
        assert first[-1] < second[0]
        if len(a) + len(b) < 24 - 3:  # nothing truncated: exactly adjacent
            assert second[0] == first[-1] + 1


def test_structbert_dataset_static_shapes_and_targets():
    dataset = make_dataset("structbert", sequence_length=48)
    x_spec, y_spec = dataset.element_spec
    slots = 3 * TrigramShuffler([]).trigrams_for(48)
    assert x_spec["order_positions"].shape == (8, slots)
    assert y_spec["order_ids"].shape == (8, slots) and y_spec["order_weights"].dtype == tf.float32
    assert y_spec["pair_labels"].shape == (8,)
    labels, shuffled_slots = [], 0
    for x, y in batches(dataset):
        labels.extend(y["pair_labels"])
        real = y["order_weights"] > 0
        shuffled_slots += real.sum()
        mask_slots = y["mask_weights"] > 0
        for row in range(len(real)):
            positions = x["order_positions"][row][real[row]]
            assert not set(positions) & set(x["mask_positions"][row][mask_slots[row]])
            assert x["padding_mask"][row, positions].all()
            assert not np.isin(y["order_ids"][row][real[row]], [PAD, CLS, SEP]).any()
    assert set(labels) == {0, 1, 2} and shuffled_slots > 0


@pytest.mark.rotated(reason="a learning check: one backend per run of the suite (tests/conftest.py)")
def test_short_structbert_run_lowers_the_loss():
    x, y = batches(make_dataset("structbert", sequence_length=32), limit=1)[0]
    backbone = kbert.models.bert_tiny(vocabulary_size=2000, num_layers=1, hidden_dim=32,
                                      num_heads=2, intermediate_dim=64, max_positions=32)
    model = StructBertPretrainer(backbone)
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    history = model.fit(x, y, batch_size=8, epochs=30, verbose=0).history
    assert {"mlm_loss", "order_loss", "order_accuracy", "pair_loss", "pair_accuracy"} <= set(history)
    losses = history["loss"]
    print(f"structbert: loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    assert losses[-1] < 0.5 * losses[0]
    assert history["order_loss"][-1] < 0.5 * history["order_loss"][0]
