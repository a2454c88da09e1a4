import numpy as np
import pytest
from elmo_reference import np_projected_lstm
from helpers import STANDARD_CHECKS, LayerCase, padding_mask, random_floats, run_standard_check, to_numpy

from kbert.layers import ProjectedLSTM

LENGTHS = [6, 4, 1]


def case(go_backwards):
    rng = np.random.default_rng(0)
    return LayerCase(
        make_layer=lambda: ProjectedLSTM(cell_dim=8, output_dim=4, cell_clip=3.0, projection_clip=3.0,
                                         go_backwards=go_backwards),
        inputs={"inputs": random_floats(rng, (3, 6, 5)), "padding_mask": padding_mask(LENGTHS, 6)},
        expected_shape=(3, 6, 4),
    )


@pytest.mark.parametrize("go_backwards", [False, True])
@pytest.mark.parametrize("check", STANDARD_CHECKS)
def test_standard(check, go_backwards, tmp_path):
    run_standard_check(check, case(go_backwards), tmp_path)


def _randomized(layer, rng, scale):
    weights = [random_floats(rng, w.shape, scale=scale) for w in layer.get_weights()]
    layer.set_weights(weights)
    return weights  # input, recurrent, bias, projection


@pytest.mark.parametrize("go_backwards", [False, True])
@pytest.mark.parametrize("clip", [None, 0.5])
def test_matches_numpy_reversing_each_row_within_its_length(go_backwards, clip):
    """Large weights make the clips bite (0.5 on the cell and the projection) where set."""
    rng = np.random.default_rng(1)
    x = random_floats(rng, (3, 7, 5), scale=2.0)
    lengths = [7, 3, 5]
    layer = ProjectedLSTM(cell_dim=6, output_dim=4, cell_clip=clip, projection_clip=clip,
                          go_backwards=go_backwards)
    layer(x)
    weights = _randomized(layer, rng, scale=1.0)
    expected = np_projected_lstm(x, lengths, weights, clip, clip, backwards=go_backwards)
    if clip:
        assert np.abs(expected).max() == pytest.approx(clip)
    actual = to_numpy(layer(x, padding_mask=padding_mask(lengths, 7)))
    np.testing.assert_allclose(actual, expected, atol=1e-5, rtol=1e-5)


def test_padding_never_reaches_the_real_steps():
    """Whatever the padded steps hold, the real steps' outputs are the same, in both directions."""
    rng = np.random.default_rng(2)
    x = random_floats(rng, (2, 6, 5))
    noisy = x.copy()
    noisy[:, 3:] = random_floats(rng, (2, 3, 5), scale=100.0)
    mask = padding_mask([3, 3], 6)
    for go_backwards in (False, True):
        layer = ProjectedLSTM(cell_dim=6, output_dim=4, go_backwards=go_backwards)
        clean = to_numpy(layer(x, padding_mask=mask))
        np.testing.assert_array_equal(to_numpy(layer(noisy, padding_mask=mask)), clean)
        assert not clean[:, 3:].any()


def test_forget_bias_starts_at_one():
    layer = ProjectedLSTM(cell_dim=3, output_dim=2)
    layer.build((None, None, 4))
    assert to_numpy(layer.bias).tolist() == [0.0] * 3 + [1.0] * 3 + [0.0] * 6


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="cell_dim"):
        ProjectedLSTM(cell_dim=0, output_dim=2)
    with pytest.raises(ValueError, match="cell_clip"):
        ProjectedLSTM(cell_dim=2, output_dim=2, cell_clip=-1.0)
