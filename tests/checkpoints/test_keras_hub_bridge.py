"""`kbert.to_keras_hub` and `kbert.from_keras_hub` against KerasHub 0.32, in process, on every backend.

A tiny random kbert backbone of each bridged family is written as a preset;
`keras_hub.models.Backbone.from_preset` loads it and gives kbert's outputs to
1e-4; `from_keras_hub` on that preset gives a kbert backbone with KerasHub's
outputs to 1e-4. A WordPiece tokenizer goes along. Settings KerasHub's
backbones fix otherwise, and its backbones without a bridge, are refused by name.
"""

import keras
import numpy as np
import pytest

import kbert

keras_hub = pytest.importorskip("keras_hub")
pytest.importorskip("tensorflow_text")
TOLERANCE = 1e-4  # float32 on both sides: round-off only
VOCABULARY = 60
_SMALL = dict(vocabulary_size=VOCABULARY, num_layers=1, num_heads=2, hidden_dim=16, intermediate_dim=32, dropout=0.0)
FAMILIES = {
    "bert": ("bert_tiny", dict(_SMALL, max_positions=32, activation="gelu_approximate")),
    "roberta": ("roberta_base", dict(_SMALL, max_positions=34)),
    "albert": ("albert_base", dict(_SMALL, embedding_dim=8, max_positions=32)),
    "distilbert": ("distilbert_base", dict(_SMALL, max_positions=32)),
    "gpt2": ("gpt2_tiny", dict(_SMALL, intermediate_dim=64, max_positions=32, end_id=VOCABULARY - 1)),
    "bart": ("bart_tiny", dict(_SMALL, max_positions=32)),
    # KerasHub has no Hugging Face loader for these: their variables are mapped directly.
    "electra": ("electra_small", dict(_SMALL, embedding_dim=8, max_positions=32, activation="gelu_approximate",
                                      use_pooler=True)),
    "t5": ("t5_tiny", dict(_SMALL, key_dim=4)),
    "t5_v1_1": ("t5_v1_1_small", dict(_SMALL)),
}
# The outputs both backbones have.
SEQ2SEQ_OUTPUTS = ("encoder_sequence_output", "decoder_sequence_output")


def _random(model):
    rng = np.random.default_rng(0)
    for variable in model.weights:  # LayerNorms and biases random too
        variable.assign(rng.normal(0.0, 0.2, variable.shape))
    return model


def _outputs(model, family):
    """The outputs both sides name alike, as NumPy, on a batch with right padding."""
    ids = np.random.default_rng(1).integers(5, VOCABULARY - 1, size=(2, 8)).astype("int32")
    mask = np.ones_like(ids)
    if family in ("bart", "t5", "t5_v1_1"):
        inputs = {"encoder_token_ids": ids, "encoder_padding_mask": mask, "decoder_token_ids": ids[:, :5],
                  "decoder_padding_mask": mask[:, :5]}
        return {key: keras.ops.convert_to_numpy(model(inputs)[key]) for key in SEQ2SEQ_OUTPUTS}
    inputs = {"token_ids": ids, "padding_mask": mask}
    if "segment_ids" in model.input:
        inputs["segment_ids"] = np.zeros_like(ids)
    outputs = model(inputs)
    if not isinstance(outputs, dict):
        outputs = {"sequence_output": outputs}
    keys = ("sequence_output", "pooled_output") if family == "electra" else ("sequence_output",)
    return {key: keras.ops.convert_to_numpy(outputs[key]) for key in keys}


# The families that run on TensorFlow and JAX too (all run on PyTorch); see
# tests/checkpoints/test_huggingface_export.py's EVERY_BACKEND.
EVERY_BACKEND = ("roberta", "bart", "electra", "t5", "t5_v1_1")


@pytest.mark.parametrize("family", FAMILIES)
def test_a_preset_out_and_back_gives_the_same_outputs(family, tmp_path):
    if keras.backend.backend() != "torch" and family not in EVERY_BACKEND:
        pytest.skip(f"layout only, backend-independent: runs in the torch run ({', '.join(EVERY_BACKEND)} run here)")
    preset, overrides = FAMILIES[family]
    ours = _random(kbert.models.build(preset, **overrides))
    kbert.to_keras_hub(ours, str(tmp_path / "preset"))
    theirs = keras_hub.models.Backbone.from_preset(str(tmp_path / "preset"))
    expected = _outputs(ours, family)
    for key, value in _outputs(theirs, family).items():
        np.testing.assert_allclose(value, expected[key], atol=TOLERANCE, rtol=0, err_msg=key)
    back = kbert.from_keras_hub(str(tmp_path / "preset"))
    for key, value in _outputs(back, family).items():
        np.testing.assert_allclose(value, expected[key], atol=TOLERANCE, rtol=0, err_msg=key)


@pytest.mark.backend_independent
def test_the_wordpiece_tokenizer_goes_along(tmp_path):
    from kbert.text import TextPreprocessor, WordPieceTokenizer

    tokenizer = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "##s", "sat"])
    preset, overrides = FAMILIES["bert"]
    backbone = kbert.models.build(preset, **dict(overrides, vocabulary_size=tokenizer.vocabulary_size))
    classifier = kbert.tasks.TextClassifier(backbone, 2, preprocessor=TextPreprocessor(tokenizer, 8))
    kbert.to_keras_hub(classifier, str(tmp_path))
    theirs = keras_hub.models.Tokenizer.from_preset(str(tmp_path))
    assert np.asarray(theirs("The cats sat")).tolist() == tokenizer(["The cats sat"])[0]
    _, back = kbert.from_keras_hub(str(tmp_path), with_tokenizer=True)
    assert type(back) is WordPieceTokenizer and back(["The cats sat"]) == tokenizer(["The cats sat"])


@pytest.mark.backend_independent
def test_the_sentence_piece_tokenizer_goes_along_with_t5(tmp_path):
    from kbert.text import SentencePieceTokenizer, TextPreprocessor, train_sentence_piece

    tokenizer = SentencePieceTokenizer(train_sentence_piece(["the cat sat on the mat"] * 20, vocabulary_size=40))
    preset, overrides = FAMILIES["t5"]
    backbone = kbert.models.build(preset, **dict(overrides, vocabulary_size=tokenizer.vocabulary_size))
    kbert.to_keras_hub(kbert.tasks.Seq2SeqLM(backbone, preprocessor=TextPreprocessor(tokenizer, 8)), str(tmp_path))
    theirs = keras_hub.models.Tokenizer.from_preset(str(tmp_path))
    expected = tokenizer.tokenize(["the cat sat"]).to_list()
    assert [np.asarray(theirs("the cat sat")).tolist()] == expected
    _, back = kbert.from_keras_hub(str(tmp_path), with_tokenizer=True)
    assert type(back) is SentencePieceTokenizer and back.tokenize(["the cat sat"]).to_list() == expected


@pytest.mark.backend_independent
@pytest.mark.parametrize("model, message", [
    (lambda: kbert.models.build("bert_tiny", **_SMALL), "activation='gelu': KerasHub's BertBackbone computes "
                                                        "activation='gelu_approximate'"),
    (lambda: kbert.models.build("bert_tiny", **_SMALL, normalize_first=True), "roberta-prelayernorm Encoder has "
                                                                             "no counterpart"),
    (lambda: kbert.models.build("gpt2_tiny", **_SMALL, end_id=1), r"intermediate_dim=32: KerasHub's GPT2Backbone "
                                                                  r"computes intermediate_dim=64"),
    (lambda: kbert.models.build("electra_small", **_SMALL, embedding_dim=8), "activation='gelu': KerasHub's "
                                                                             "ElectraBackbone computes"),
    (lambda: kbert.models.build("t5_tiny", **_SMALL, num_buckets=16), "num_buckets=16: KerasHub's T5Backbone "
                                                                      "computes num_buckets=32"),
], ids=["exact-gelu", "pre-ln", "gpt2-width", "electra-exact-gelu", "t5-buckets"])
def test_a_setting_keras_hub_fixes_otherwise_is_named(model, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        kbert.to_keras_hub(model(), str(tmp_path))


@pytest.mark.backend_independent
def test_a_keras_hub_backbone_without_a_bridge_is_refused():
    xlnet = keras_hub.models.XLNetBackbone(vocabulary_size=30, num_layers=1, num_heads=2, hidden_dim=8,
                                           intermediate_dim=16)
    message = "XLNetBackbone computes another function: its relative position table is right for one sequence only"
    with pytest.raises(ValueError, match=message):
        kbert.from_keras_hub(xlnet)
