"""The named sizes: published parameter counts (docs/algorithms.md §19), overrides, unknown names and arguments."""

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
EXPECTED_T5_PARAMETERS = {
    "t5_tiny": 5_031_552,  # no released model: L2 H128 A2 I512 key width 64, T5's vocabulary
    "t5_small": 60_506_624,
    "t5_base": 222_903_552,
    "t5_large": 737_668_096,
    "t5_v1_1_small": 76_961_152,
    "t5_v1_1_base": 247_577_856,
}

EXPECTED_GPT2_PARAMETERS = {
    "gpt2_tiny": 6_960_768,  # no released model: L2 H128 A2 with GPT-2's vocabulary and positions
    "gpt2_base": 124_439_808,
    "gpt2_medium": 354_823_168,
    "gpt2_large": 774_030_080,
}
# transformers' num_parameters(), which leaves out the final_logits_bias buffer
# (one value per token) that kbert's lm_head holds as its trainable bias.
EXPECTED_BART_PARAMETERS = {"bart_base": 139_420_416, "bart_large": 406_291_456}
FINAL_LOGITS_BIAS = 50_265


def bart_parameters(vocabulary, positions, layers, hidden, intermediate):
    """BART's parameters by hand: tables, embedding norms, blocks and the head's bias."""
    attention = 4 * (hidden * hidden + hidden)
    feed_forward = 2 * hidden * intermediate + intermediate + hidden
    encoder_block = attention + feed_forward + 2 * 2 * hidden
    decoder_block = 2 * attention + feed_forward + 3 * 2 * hidden
    embeddings = vocabulary * hidden + 2 * (positions + 2) * hidden + 2 * 2 * hidden
    return embeddings + layers * (encoder_block + decoder_block) + vocabulary


def test_every_preset_has_an_expected_count():
    assert set(EXPECTED_PARAMETERS) == set(kbert.models.PRESETS)
    assert set(EXPECTED_T5_PARAMETERS) == set(kbert.models.T5_PRESETS)
    assert set(EXPECTED_GPT2_PARAMETERS) == set(kbert.models.GPT2_PRESETS)
    assert set(EXPECTED_BART_PARAMETERS) | {"bart_tiny"} == set(kbert.models.BART_PRESETS)


def test_bart_counts_by_hand_and_the_tiny_one():
    for name, (layers, hidden) in {"bart_base": (6, 768), "bart_large": (12, 1024)}.items():
        by_hand = bart_parameters(50265, 1024, layers, hidden, 4 * hidden)
        assert by_hand == EXPECTED_BART_PARAMETERS[name] + FINAL_LOGITS_BIAS
    with keras.StatelessScope(initialize_variables=False):
        model = kbert.models.bart_tiny()
    tiny = bart_parameters(50265, 1024, 2, 128, 512)
    assert model.count_params() == tiny
    assert f"{tiny:,}" in kbert.models.bart_tiny.__doc__


@pytest.mark.backend_independent  # a record's shapes
@pytest.mark.parametrize("name", sorted(EXPECTED_BART_PARAMETERS))
def test_bart_parameter_count(name):
    builder = getattr(kbert.models, name)
    with keras.StatelessScope(initialize_variables=False):
        model = builder()
    assert isinstance(model, kbert.models.BART)
    assert tuple(model.lm_head.bias.shape) == (FINAL_LOGITS_BIAS,)
    assert model.count_params() == EXPECTED_BART_PARAMETERS[name] + FINAL_LOGITS_BIAS
    assert f"{EXPECTED_BART_PARAMETERS[name]:,} parameters + {FINAL_LOGITS_BIAS:,}" in builder.__doc__
    assert f"{EXPECTED_BART_PARAMETERS[name] + FINAL_LOGITS_BIAS:,}" in builder.__doc__


@pytest.mark.backend_independent  # a record's shapes
@pytest.mark.parametrize("name", sorted(EXPECTED_PARAMETERS))
def test_parameter_count(name):
    builder = getattr(kbert.models, name)
    # Variables are created with their shapes but not filled: drawing 300M
    # random numbers would only slow the suite down.
    with keras.StatelessScope(initialize_variables=False):
        model = builder()
    assert model.count_params() == EXPECTED_PARAMETERS[name]
    assert f"{EXPECTED_PARAMETERS[name]:,}" in builder.__doc__


@pytest.mark.backend_independent  # a record's shapes
@pytest.mark.parametrize("name", sorted(EXPECTED_T5_PARAMETERS))
def test_t5_parameter_count(name):
    builder = getattr(kbert.models, name)
    with keras.StatelessScope(initialize_variables=False):
        model = builder()
    assert isinstance(model, kbert.models.T5)
    assert model.count_params() == EXPECTED_T5_PARAMETERS[name]
    assert f"{EXPECTED_T5_PARAMETERS[name]:,}" in builder.__doc__
    assert (model.lm_head is None) == ("v1_1" not in name)


@pytest.mark.backend_independent  # a record's shapes
@pytest.mark.parametrize("name", sorted(EXPECTED_GPT2_PARAMETERS))
def test_gpt2_parameter_count(name):
    builder = getattr(kbert.models, name)
    with keras.StatelessScope(initialize_variables=False):
        model = builder()
    assert isinstance(model, kbert.models.GPT2)
    assert model.count_params() == EXPECTED_GPT2_PARAMETERS[name]
    assert f"{EXPECTED_GPT2_PARAMETERS[name]:,}" in builder.__doc__


def test_build_reads_the_same_table_with_overrides():
    model = kbert.models.build("bert_tiny", num_layers=1, dropout=0.0)
    assert model.num_layers == 1 and model.dropout == 0.0
    assert len(model.transformer_layers) == 1


def test_build_reads_the_t5_table_too():
    with keras.StatelessScope(initialize_variables=False):
        model = kbert.models.build("t5_v1_1_small", num_layers=1, vocabulary_size=50, hidden_dim=16)
    assert isinstance(model, kbert.models.T5) and model.name == "t5_v1_1_small"
    assert model.num_layers == 1 and model.use_gated_activation and model.lm_head is not None


def test_build_reads_the_elmo_table_too():
    model = kbert.models.build("elmo_small", num_layers=1, hidden_dim=16, cell_dim=32)
    assert isinstance(model, kbert.models.ELMo) and model.name == "elmo_small"
    assert (model.num_layers, len(model.forward_layers), model.cell_clip) == (1, 1, 3.0)
    assert set(kbert.models.ELMO_PRESETS) == {"elmo_original", "elmo_small"}  # counts: test_elmo.py
    with pytest.raises(TypeError, match="Unknown argument.*\\(ELMo\\): vocabulary_size"):
        kbert.models.elmo_small(vocabulary_size=100)


def test_albert_shares_one_block():
    model = kbert.models.albert_base(num_layers=3, vocabulary_size=100)
    assert len({id(layer) for layer in model.transformer_layers}) == 1


@pytest.mark.parametrize("name, close", [("bert_bsae", "bert_base"), ("t5_smal", "t5_small")])
def test_unknown_builder_name_suggests_close_matches(name, close):
    with pytest.raises(ValueError, match=f"Unknown model '{name}'.*Did you mean {close}"):
        kbert.models.build(name)


@pytest.mark.parametrize(
    "builder, typo, model_class",
    [(kbert.models.bert_tiny, "num_layer", "Encoder"), (kbert.models.t5_small, "hidden_size", "T5")],
)
def test_unknown_override_is_named_with_the_valid_arguments(builder, typo, model_class):
    with pytest.raises(TypeError, match=f"Unknown argument.*\\({model_class}\\): {typo}\\. Known: .*num_layers"):
        builder(**{typo: 3})


@pytest.mark.parametrize("local_variable", ["pooler", "x", "inputs", "layer", "kwargs", "self"])
def test_local_variables_and_catch_alls_are_no_arguments(local_variable):
    # The constructor's signature counts, not the names inside its body.
    with pytest.raises(TypeError, match=f"Unknown argument.*: {local_variable}\\."):
        kbert.models.build("bert_tiny", **{local_variable: None})
