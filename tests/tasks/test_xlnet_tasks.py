"""Fine-tuning on XLNet: TextClassifier summarises with the last token (XLNet's <cls>,
left padding) and learns; TokenClassifier learns tags; both compiled."""

import numpy as np
import pytest
from helpers import to_numpy
from task_testing import LENGTH, VOCABULARY, fine_tune

import kbert
from kbert.tasks import TextClassifier, TokenClassifier


def tiny_xlnet():
    return kbert.models.xlnet_tiny(vocabulary_size=VOCABULARY, num_layers=1, num_heads=2,
                                   hidden_dim=16, intermediate_dim=32, dropout=0.0)


def left_padded(seed, batch):
    """Token ids in [3, VOCABULARY), left padding (id 0), one segment."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(LENGTH // 2, LENGTH + 1, size=batch)
    padding_mask = (np.arange(LENGTH)[None] >= LENGTH - lengths[:, None]).astype("int32")
    token_ids = rng.integers(3, VOCABULARY, size=(batch, LENGTH)).astype("int32") * padding_mask
    return {"token_ids": token_ids, "padding_mask": padding_mask,
            "segment_ids": np.zeros_like(token_ids)}


def test_text_classifier_reads_the_last_token():
    model = TextClassifier(tiny_xlnet(), num_classes=3, hidden_activation="tanh", dropout=0.0)
    x = left_padded(0, 4)
    last = to_numpy(model.backbone(x)["sequence_output"])[:, -1]
    expected = to_numpy(model.output_dense(model.hidden_dense(last)))
    np.testing.assert_allclose(to_numpy(model(x)), expected, atol=1e-5)
    pooled = TextClassifier(model.backbone, num_classes=3, dropout=0.0)
    expected = to_numpy(pooled.output_dense(last))
    np.testing.assert_allclose(to_numpy(pooled(x)), expected, atol=1e-5)


@pytest.mark.rotated(reason="a learning check: one backend per run of the suite (tests/conftest.py)")
def test_text_classifier_learns_on_xlnet():
    """The label is the parity of the last token: read straight from the summary."""
    model = TextClassifier(tiny_xlnet(), num_classes=2, hidden_activation="tanh", dropout=0.0)
    x = left_padded(1, 128)
    history = fine_tune(model, x, {"labels": x["token_ids"][:, -1] % 2}, epochs=8)
    held_out = left_padded(2, 64)
    accuracy = (to_numpy(model(held_out)).argmax(-1) == held_out["token_ids"][:, -1] % 2).mean()
    print(f"xlnet classifier: loss {history['loss'][0]:.3f} -> {history['loss'][-1]:.3f}, "
          f"held-out accuracy {accuracy:.2f}")
    assert accuracy >= 0.9


@pytest.mark.rotated(reason="a learning check: one backend per run of the suite (tests/conftest.py)")
def test_token_classifier_learns_on_xlnet():
    model = TokenClassifier(tiny_xlnet(), num_labels=3, dropout=0.0)

    def tags(x):
        return np.where(x["padding_mask"] == 1, x["token_ids"] % 3, -1).astype("int32")

    x = left_padded(3, 64)
    fine_tune(model, x, {"labels": tags(x)}, epochs=6)
    held_out = left_padded(4, 32)
    kept = tags(held_out) >= 0
    accuracy = (to_numpy(model(held_out)).argmax(-1) == tags(held_out))[kept].mean()
    print(f"xlnet tagger: held-out accuracy {accuracy:.2f}")
    assert accuracy >= 0.9  # chance: 1/3
