"""The named T5 sizes: published parameter counts, overrides, unknown names."""

import keras
import pytest

import kbert

EXPECTED_PARAMETERS = {
    "t5_small": 60_506_624,
    "t5_base": 222_903_552,
    "t5_large": 737_668_096,
    "t5_v1_1_small": 76_961_152,
    "t5_v1_1_base": 247_577_856,
}


def test_every_t5_preset_has_an_expected_count():
    assert set(EXPECTED_PARAMETERS) == set(kbert.models.T5_PRESETS)


@pytest.mark.parametrize("name", sorted(EXPECTED_PARAMETERS))
def test_parameter_count(name):
    builder = getattr(kbert.models, name)
    with keras.StatelessScope(initialize_variables=False):
        model = builder()
    assert model.count_params() == EXPECTED_PARAMETERS[name]
    assert f"{EXPECTED_PARAMETERS[name]:,}" in builder.__doc__
    assert (model.lm_head is None) == ("v1_1" not in name)


def test_builders_take_overrides_and_reject_unknown_names():
    with keras.StatelessScope(initialize_variables=False):
        model = kbert.models.t5_v1_1_small(num_layers=1, vocabulary_size=50, hidden_dim=16)
    assert model.num_layers == 1 and model.use_gated_activation and model.lm_head is not None
    with pytest.raises(ValueError, match="Did you mean t5_small"):
        kbert.models.build_t5("t5_smal")
    with pytest.raises(TypeError, match="Unknown argument"):
        kbert.models.t5_small(hidden_size=8)
