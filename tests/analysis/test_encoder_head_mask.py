"""An Encoder's `head_mask` input: equal to transformers 4's BERT head mask on an imported BERT."""

import numpy as np
import pytest
from bert_heads import HEADS, LAYERS, TOLERANCE, batch, head_masked, imported_bert, torch, torch_inputs
from helpers import to_numpy

import kbert

# Heads off, kept, and scaled; a layer with one head left.
HEAD_MASK = np.array([[1, 0, 1, 1], [0.5, 1, 0, 2], [0, 0, 1, 0]], "float32")


def test_equals_transformers_head_mask(tmp_path):
    reference, encoder = imported_bert(tmp_path)
    inputs = batch()
    with torch.no_grad(), head_masked(reference, torch.tensor(HEAD_MASK)):
        expected = reference(**torch_inputs(inputs))
    outputs = encoder({**inputs, "head_mask": HEAD_MASK})
    np.testing.assert_allclose(to_numpy(outputs["sequence_output"]),
                               expected.last_hidden_state.numpy(), atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(to_numpy(outputs["pooled_output"]),
                               expected.pooler_output.numpy(), atol=TOLERANCE, rtol=0)
    # One mask per sequence, and one per layer as a list: the same outputs.
    per_sequence = np.broadcast_to(HEAD_MASK, (2, LAYERS, HEADS))
    for head_mask in (per_sequence, list(HEAD_MASK)):
        again = encoder({**inputs, "head_mask": head_mask})["sequence_output"]
        np.testing.assert_allclose(to_numpy(again), to_numpy(outputs["sequence_output"]),
                                   atol=1e-6, rtol=0)
    # The internals model takes it too.
    inside = encoder.with_internals(attention_probabilities=False)({**inputs, "head_mask": HEAD_MASK})
    np.testing.assert_allclose(to_numpy(inside["sequence_output"]),
                               to_numpy(outputs["sequence_output"]), atol=1e-6, rtol=0)


def test_the_default_inputs_and_outputs_stay(tmp_path):
    reference, encoder = imported_bert(tmp_path)
    assert sorted(encoder.input) == ["padding_mask", "segment_ids", "token_ids"]
    plain = encoder(batch())["sequence_output"]
    ones = encoder({**batch(), "head_mask": np.ones((LAYERS, HEADS), "float32")})["sequence_output"]
    np.testing.assert_allclose(to_numpy(ones), to_numpy(plain), atol=1e-6, rtol=0)


def test_a_task_model_passes_the_head_mask_on():
    backbone = kbert.models.Encoder(vocabulary_size=99, num_layers=LAYERS, num_heads=HEADS,
                                    hidden_dim=16, intermediate_dim=32, max_positions=16)
    classifier = kbert.tasks.TextClassifier(backbone, num_classes=3)
    inputs = {**batch(), "head_mask": HEAD_MASK}
    expected = classifier.output_dense(backbone(inputs)["pooled_output"])
    np.testing.assert_allclose(to_numpy(classifier(inputs)), to_numpy(expected), atol=1e-6, rtol=0)
    assert not np.allclose(to_numpy(classifier(batch())), to_numpy(expected), atol=0, rtol=1e-3)


@pytest.mark.parametrize("shape", [(LAYERS,), (2, HEADS), (LAYERS, HEADS + 1)])
def test_a_head_mask_of_the_wrong_shape_is_refused(shape):
    backbone = kbert.models.Encoder(vocabulary_size=99, num_layers=LAYERS, num_heads=HEADS,
                                    hidden_dim=16, intermediate_dim=32, max_positions=16)
    with pytest.raises(ValueError, match="head_mask must"):
        backbone({**batch(), "head_mask": np.ones(shape, "float32")})


def test_predict_takes_a_head_mask_per_sequence():
    backbone = kbert.models.Encoder(vocabulary_size=99, num_layers=LAYERS, num_heads=HEADS,
                                    hidden_dim=16, intermediate_dim=32, max_positions=16)
    inputs = batch()
    head_mask = np.broadcast_to(HEAD_MASK, (2, LAYERS, HEADS)).copy()
    predicted = backbone.predict({**inputs, "head_mask": head_mask}, batch_size=1, verbose=0)
    eager = backbone({**inputs, "head_mask": HEAD_MASK})
    np.testing.assert_allclose(predicted["sequence_output"], to_numpy(eager["sequence_output"]),
                               atol=1e-5, rtol=0)
