"""Every builder's parameter count equals the published model's (ALGORITHMS.md §8)."""

import keras
import pytest

import kbert

EXPECTED_PARAMETERS = {
    "bert_tiny": 4_385_920,
    "bert_mini": 11_170_560,
    "bert_small": 28_763_648,
    "bert_medium": 41_373_184,
    "bert_base": 109_482_240,
    "bert_large": 335_141_888,
    "roberta_base": 124_645_632,
    "roberta_large": 355_359_744,
    "albert_base": 11_683_584,
    "albert_large": 17_683_968,
    "albert_xlarge": 58_724_864,
    "albert_xxlarge": 222_595_584,
    "electra_small": 13_483_008,
    "electra_base": 108_891_648,
    "electra_large": 334_092_288,
    # Hugging Face google/electra-{small,base,large}-generator configs.
    "electra_small_generator": 13_483_008,
    "electra_base_generator": 33_511_168,
    "electra_large_generator": 50_999_552,
    "distilbert_base": 66_362_880,
    "bigbird_base": 127_468_800,
    "longformer_base": 148_659_456,
}


def test_every_preset_has_an_expected_count():
    assert set(EXPECTED_PARAMETERS) == set(kbert.models.PRESETS)


@pytest.mark.parametrize("name", sorted(EXPECTED_PARAMETERS))
def test_parameter_count(name):
    builder = getattr(kbert.models, name)
    # Variables are created with their shapes but not filled: drawing 300M
    # random numbers would only slow the suite down.
    with keras.StatelessScope(initialize_variables=False):
        model = builder()
    assert model.count_params() == EXPECTED_PARAMETERS[name]
    assert f"{EXPECTED_PARAMETERS[name]:,}" in builder.__doc__


def test_build_reads_the_same_table_with_overrides():
    model = kbert.models.build("bert_tiny", num_layers=1, dropout=0.0)
    assert model.num_layers == 1 and model.dropout == 0.0
    assert len(model.transformer_layers) == 1


def test_albert_shares_one_block():
    model = kbert.models.albert_base(num_layers=3, vocabulary_size=100)
    assert len({id(layer) for layer in model.transformer_layers}) == 1


def test_unknown_builder_name_suggests_close_matches():
    with pytest.raises(ValueError, match="Unknown model 'bert_bsae'.*Did you mean bert_base"):
        kbert.models.build("bert_bsae")


def test_unknown_override_is_rejected():
    with pytest.raises(TypeError, match="Unknown argument.*num_layer"):
        kbert.models.bert_tiny(num_layer=3)
