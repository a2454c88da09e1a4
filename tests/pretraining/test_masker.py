"""The masker base's helpers, on hand-worked rows."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from kbert.pretraining.masker import prediction_slots, word_indices  # noqa: E402

pytestmark = pytest.mark.backend_independent  # tf.data maps: the Keras backend plays no part


def test_word_indices_join_continuation_pieces():
    # ids: [CLS]=1, "play"=5, "##ing"=6, "now"=7, [SEP]=2; 6 is a ## piece
    token_ids = tf.constant([[1, 5, 6, 7, 2]])
    candidate = tf.constant([[False, True, True, True, False]])
    continuation = np.zeros(10, bool)
    continuation[6] = True
    indices = word_indices(token_ids, candidate, continuation).numpy().tolist()
    assert indices == [[0, 1, 1, 2, 3]]
    assert word_indices(token_ids, candidate, None).numpy().tolist() == [[0, 1, 2, 3, 4]]


def test_prediction_slots_in_order_and_padded():
    token_ids = tf.constant([[1, 5, 6, 7, 2]])
    selected = tf.constant([[False, False, True, True, False]])
    slots = {k: v.numpy().tolist() for k, v in prediction_slots(token_ids, selected, 3).items()}
    assert slots == {"mask_positions": [[2, 3, 0]], "mask_ids": [[6, 7, 0]],
                     "mask_weights": [[1.0, 1.0, 0.0]]}
