"""The Backbone base: config from the constructor, dtype policy kept, layers set before init."""

import numpy as np

import kbert
from kbert.models.backbone import Backbone


def test_encoder_and_t5_are_backbones_with_round_tripping_configs():
    encoder = kbert.models.bert_tiny(num_layers=1, dtype="mixed_bfloat16")
    t5 = kbert.models.t5_small(vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=8,
                               intermediate_dim=16)
    for model in (encoder, t5):
        assert isinstance(model, Backbone)
        copy = type(model).from_config(model.get_config())
        assert copy.get_config() == model.get_config()
    assert kbert.models.Encoder.from_config(encoder.get_config()).dtype_policy.name == "mixed_bfloat16"


def test_layers_set_before_init_are_the_models_own():
    encoder = kbert.models.bert_tiny(num_layers=1, vocabulary_size=30)
    ids = np.ones((1, 4), "int32")
    outputs = encoder({"token_ids": ids, "segment_ids": 0 * ids, "padding_mask": ids})
    assert encoder.embeddings in encoder.layers
    assert tuple(outputs["sequence_output"].shape) == (1, 4, 128)
