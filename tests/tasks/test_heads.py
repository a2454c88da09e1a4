"""What the task models share: labels with -1 left out, targets checked, heads sized."""

import keras
import numpy as np
import pytest

import kbert
from kbert.tasks.heads import head_dense, labelled, task_targets


def test_labelled_zeroes_ignored_labels_and_weights_them_out():
    labels, weights = labelled(np.array([[3, -1], [-100, 0]]))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(labels), [[3, 0], [0, 0]])
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(weights), [[1, 0], [0, 1]])


def test_task_targets_refuse_sample_weight_and_missing_keys():
    with pytest.raises(ValueError, match="takes no sample_weight"):
        task_targets({"labels": 1}, ("labels",), "Tagger", sample_weight=np.ones(1))
    with pytest.raises(ValueError, match=r"lack \['labels'\]"):
        task_targets({}, ("labels",), "Tagger")


def test_head_dense_uses_the_backbones_initializer_range_and_dtype():
    backbone = kbert.models.bert_tiny(num_layers=1, vocabulary_size=20, initializer_range=0.5)
    dense = head_dense(backbone, 4, "classifier")
    dense.build((None, 128))
    assert dense.dtype_policy.name == backbone.dtype_policy.name
    assert 0.2 < float(np.std(keras.ops.convert_to_numpy(dense.kernel))) < 0.5
