"""wrapped_encoder: the Encoder an analysis works on, or a clear error."""

import pytest

import kbert
from kbert.analysis.wrapped_encoder import wrapped_encoder


def test_an_encoder_and_a_task_over_one_give_the_encoder():
    encoder = kbert.models.bert_tiny(num_layers=1, vocabulary_size=50)
    assert wrapped_encoder(encoder, "probe") is encoder
    assert wrapped_encoder(kbert.tasks.TextClassifier(encoder, num_classes=2), "probe") is encoder


def test_other_models_are_refused_with_the_caller_named():
    t5 = kbert.models.t5_small(num_layers=1, vocabulary_size=50, hidden_dim=8, intermediate_dim=16,
                               num_heads=2)
    with pytest.raises(ValueError, match="prune_heads takes a kbert Encoder.*received a T5"):
        wrapped_encoder(t5, "prune_heads")
    with pytest.raises(ValueError, match="received a str"):
        wrapped_encoder("bert", "head_importance")
