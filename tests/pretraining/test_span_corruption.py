"""SpanCorruption: the T5R lengths, the noise-mask statistics, the sentinel layout."""

import numpy as np
import pytest

from kbert.pretraining.span_corruption import SpanCorruption, span_corruption_lengths

tf = pytest.importorskip("tensorflow")

pytestmark = pytest.mark.backend_independent  # tf.data maps: the Keras backend plays no part

VOCABULARY = 32100


@pytest.mark.parametrize(
    "inputs_length, raw, targets", [(512, 568, 114), (128, 141, 29), (1024, 1137, 229)]
)
def test_lengths_match_t5(inputs_length, raw, targets):
    assert span_corruption_lengths(inputs_length) == (raw, targets)
    corruption = SpanCorruption(inputs_length, VOCABULARY)
    assert (corruption.raw_length, corruption.targets_length) == (raw, targets)


def spans(mask):
    """Lengths of the runs of True and of False, in order."""
    runs, current, count = [], mask[0], 0
    for value in mask:
        if value == current:
            count += 1
        else:
            runs.append((bool(current), count))
            current, count = value, 1
    runs.append((bool(current), count))
    return runs


def test_noise_mask_statistics_at_512():
    corruption = SpanCorruption(512, VOCABULARY)
    noise_spans = []
    for i in range(200):
        mask = corruption.noise_mask([3, i]).numpy()
        runs = spans(mask)
        assert mask.sum() == 85  # round(0.15 · 568)
        assert sum(1 for noise, _ in runs if noise) == 28  # round(85 / 3)
        assert runs[0][0] is False and runs[-1][0] is True  # keep first, noise last
        noise_spans += [length for noise, length in runs if noise]
    assert min(noise_spans) >= 1
    assert np.mean(noise_spans) == pytest.approx(85 / 28)
    # Random segmentation: span lengths vary, with a near-geometric spread.
    assert np.std(noise_spans) > 1.0 and max(noise_spans) > 8


def test_inputs_and_targets_layout():
    corruption = SpanCorruption(128, VOCABULARY)
    tokens = np.arange(100, 100 + corruption.raw_length, dtype="int32")
    out = corruption(tokens, seed=[1, 2])
    inputs, targets = out["inputs"].numpy(), out["targets"].numpy()
    mask = corruption.noise_mask([1, 2]).numpy()
    assert inputs.shape == (128,) and targets.shape == (29,)
    assert inputs[-1] == 1 and targets[-1] == 1
    sentinels = [VOCABULARY - 1 - i for i in range(7)]  # <extra_id_0> = 32099, counting down
    assert [t for t in inputs if t >= 32000] == sentinels
    assert [t for t in targets if t >= 32000] == sentinels
    # Rebuild both sides from the mask, independently.
    expected_inputs, expected_targets, span = [], [], -1
    for position, (token, noise) in enumerate(zip(tokens, mask)):
        starts = position == 0 or noise != mask[position - 1]
        if noise and starts:
            span += 1
            expected_inputs.append(sentinels[span])
            expected_targets.append(sentinels[span])
        (expected_targets if noise else expected_inputs).append(token)
    assert inputs[:-1].tolist() == expected_inputs
    assert targets[:-1].tolist() == expected_targets
    # Filling each sentinel of the inputs with its span gives back the text.
    assert sorted(set(inputs[:-1]) - set(sentinels) | set(targets[:-1]) - set(sentinels)) == tokens.tolist()


def test_same_seed_same_mask_and_different_seeds_differ():
    corruption = SpanCorruption(64, 1000)
    a, b = corruption.noise_mask([0, 1]).numpy(), corruption.noise_mask([0, 1]).numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, corruption.noise_mask([0, 2]).numpy())


def test_dataset_has_static_shapes_and_teacher_forcing():
    corruption = SpanCorruption(32, 500)
    ids = np.arange(2, 2 + corruption.raw_length * 5, dtype="int32") % 400 + 2
    dataset = corruption.dataset(ids, batch_size=2, seed=4)
    inputs, targets = dataset.element_spec
    assert inputs["encoder_token_ids"].shape.as_list() == [2, 32]
    assert targets.shape.as_list() == [2, corruption.targets_length]
    batches = list(dataset.as_numpy_iterator())
    assert len(batches) == 2  # 5 chunks, batches of 2, remainder dropped
    x, y = batches[0]
    np.testing.assert_array_equal(x["decoder_token_ids"][:, 1:], y[:, :-1])
    assert np.all(x["decoder_token_ids"][:, 0] == 0)


def test_errors():
    with pytest.raises(ValueError, match="noise_density"):
        SpanCorruption(64, 100, noise_density=1.5)
    with pytest.raises(ValueError, match="expects token_ids of shape"):
        SpanCorruption(64, 100)(np.arange(10), seed=[0, 0])
    with pytest.raises(ValueError, match="at least 3"):
        span_corruption_lengths(2)
