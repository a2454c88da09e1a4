"""`kbert.to_huggingface` against transformers, in process.

- kbert -> folder -> transformers: a kbert model of each family (and the
  heads kbert builds differently: a pooler read as RoBERTa's classification
  head, pre-LN positions renumbered, ELECTRA's generator) written out and
  loaded by its transformers class gives kbert's outputs to 1e-4, on every backend.
- transformers -> `from_huggingface(_task)` -> `to_huggingface`: every tensor
  of the original state dict comes back equal and transformers loads the folder
  with no missing, unexpected or mis-shaped key; the only keys not written are
  the ones transformers ties or derives (`TIED` below, and its `_tied_weights_keys`).
- bad input: a non-empty folder, a model or setting without a transformers
  class, a model without a tokenizer.
"""

import json
import os

import keras
import numpy as np
import pytest

import kbert
from kbert.checkpoints.huggingface_configs import unexpressed_setting

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

TOLERANCE = 1e-4  # float32 on both sides: round-off only
VOCABULARY = 60
_SMALL = dict(vocabulary_size=VOCABULARY, num_layers=1, num_heads=2, hidden_dim=16, intermediate_dim=32, dropout=0.0)
# family -> the kbert preset and its tiny overrides.
KBERT_FAMILIES = {
    "bert": ("bert_tiny", dict(_SMALL, max_positions=32)),
    "prelayernorm": ("bert_tiny", dict(_SMALL, max_positions=32, normalize_first=True)),
    "roberta": ("roberta_base", dict(_SMALL, max_positions=34)),
    "albert": ("albert_base", dict(_SMALL, embedding_dim=8, max_positions=32)),
    "electra": ("electra_small", dict(_SMALL, embedding_dim=8, max_positions=32)),
    "distilbert": ("distilbert_base", dict(_SMALL, max_positions=32)),
    "bigbird": ("bigbird_base", dict(_SMALL, max_positions=32, attention_kwargs={"block_size": 4,
                                                                                 "num_random_blocks": 1})),
    "longformer": ("longformer_base", dict(_SMALL, max_positions=34, attention_kwargs={"window": 2})),
    "t5": ("t5_small", dict(_SMALL, key_dim=8)),
    "t5_v1_0": ("t5_small", dict(_SMALL, key_dim=8, use_gated_activation=False, activation="relu",
                                 tie_embeddings=True)),
    "gpt2": ("gpt2_tiny", dict(_SMALL, max_positions=32, end_id=VOCABULARY - 1)),
    "bart": ("bart_tiny", dict(_SMALL, max_positions=32)),
    "xlnet": ("xlnet_tiny", _SMALL),
}
SEQUENCE = 8


def _numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x), "float32")


@pytest.fixture(scope="module")
def backbones():
    """One tiny random kbert backbone per family, built on first use."""
    built = {}

    def get(family):
        if family not in built:
            preset, overrides = KBERT_FAMILIES[family]
            keras.utils.set_random_seed(0)
            built[family] = kbert.models.build(preset, **overrides)
            for variable in built[family].weights:  # every weight random, LayerNorms included
                variable.assign(np.random.default_rng(len(built)).normal(0, 0.2, variable.shape))
        return built[family]

    return get


def _inputs():
    rng = np.random.default_rng(0)
    ids = rng.integers(5, VOCABULARY - 1, size=(2, SEQUENCE)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, 5:] = 0
    ids[mask == 0] = 0
    return ids, mask


def _load(folder, class_name):
    model, info = getattr(transformers, class_name).from_pretrained(folder, output_loading_info=True)
    assert not any(info[key] for key in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    return model.eval()


def _torch(array):
    return torch.tensor(np.asarray(array), dtype=torch.long)


def _encoder_pair(backbone, hf, ids, mask):
    inputs = {"token_ids": ids, "padding_mask": mask}
    if "segment_ids" in backbone.input:
        inputs["segment_ids"] = np.zeros_like(ids)
    hf_inputs = {"input_ids": _torch(ids), "attention_mask": _torch(mask)}
    return inputs, hf_inputs


def _compare(ours, theirs, mask=None):
    ours, theirs = _numpy(ours), np.asarray(theirs.detach().numpy(), "float32")
    if mask is not None:
        ours, theirs = ours[mask.astype(bool)], theirs[mask.astype(bool)]
    np.testing.assert_allclose(ours, theirs, atol=TOLERANCE, rtol=0)


# --- kbert -> folder -> transformers ------------------------------------------------------------------

def _encoder_case(family, class_name):
    def run(backbones, folder):
        backbone = backbones(family)
        kbert.to_huggingface(backbone, folder)
        hf = _load(folder, class_name)
        ids, mask = _inputs()
        inputs, hf_inputs = _encoder_pair(backbone, hf, ids, mask)
        with torch.no_grad():
            theirs = hf(**hf_inputs)
        _compare(backbone(inputs)["sequence_output"], theirs.last_hidden_state, mask)
    return run


def _classifier_case(family, class_name, **options):
    def run(backbones, folder):
        model = kbert.tasks.TextClassifier(backbones(family), num_classes=3, **options)
        kbert.to_huggingface(model, folder)
        hf = _load(folder, class_name)
        assert hf.config.id2label == {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}
        ids, mask = _inputs()
        inputs, hf_inputs = _encoder_pair(model.backbone, hf, ids, mask)
        with torch.no_grad():
            _compare(model(inputs), hf(**hf_inputs).logits)
    return run


def _tagger_case(family, class_name):
    def run(backbones, folder):
        model = kbert.tasks.TokenClassifier(backbones(family), num_labels=4)
        kbert.to_huggingface(model, folder)
        hf = _load(folder, class_name)
        ids, mask = _inputs()
        inputs, hf_inputs = _encoder_pair(model.backbone, hf, ids, mask)
        with torch.no_grad():
            _compare(model(inputs), hf(**hf_inputs).logits, mask)
    return run


def _question_answering_case(family, class_name):
    def run(backbones, folder):
        model = kbert.tasks.SpanQuestionAnswering(backbones(family))
        kbert.to_huggingface(model, folder)
        hf = _load(folder, class_name)
        ids, mask = _inputs()
        inputs, hf_inputs = _encoder_pair(model.backbone, hf, ids, mask)
        outputs = model(inputs)
        with torch.no_grad():
            theirs = hf(**hf_inputs)
        _compare(outputs["start_logits"], theirs.start_logits, mask)
        _compare(outputs["end_logits"], theirs.end_logits, mask)
    return run


def _pretrainer_case(family, class_name, pair_objective):
    def run(backbones, folder):
        model = kbert.pretraining.BertPretrainer(backbones(family), pair_objective=pair_objective)
        kbert.to_huggingface(model, folder)
        hf = _load(folder, class_name)
        ids, mask = _inputs()
        inputs, hf_inputs = _encoder_pair(model.backbone, hf, ids, mask)
        positions = np.array([[1, 2], [3, 4]], "int32")
        outputs = model({**inputs, "mask_positions": positions})
        with torch.no_grad():
            theirs = hf(**hf_inputs)
        logits = theirs.logits if pair_objective is None else theirs.prediction_logits
        _compare(outputs["mlm_logits"], torch.take_along_dim(logits, _torch(positions)[:, :, None], dim=1))
        if pair_objective:
            _compare(outputs["pair_logits"], theirs.seq_relationship_logits if family != "albert"
                     else theirs.sop_logits)
    return run


def _electra_pretrainer_case(backbones, folder):
    model = kbert.pretraining.ElectraPretrainer(backbones("electra"), generator_num_layers=1, generator_hidden_dim=4,
                                                generator_num_heads=1, generator_intermediate_dim=8, seed=1)
    assert kbert.to_huggingface(model, folder) == [os.path.join(folder, "discriminator"),
                                                   os.path.join(folder, "generator")]
    ids, mask = _inputs()
    positions = np.array([[1, 2], [3, 4]], "int32")
    outputs = model({"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": mask,
                     "mask_positions": positions})
    generator = _load(os.path.join(folder, "generator"), "ElectraForMaskedLM")
    discriminator = _load(os.path.join(folder, "discriminator"), "ElectraForPreTraining")
    with torch.no_grad():
        logits = generator(input_ids=_torch(ids), attention_mask=_torch(mask)).logits
        detected = discriminator(input_ids=_torch(_numpy(outputs["discriminator_ids"])),
                                 attention_mask=_torch(mask)).logits
    _compare(outputs["mlm_logits"], torch.take_along_dim(logits, _torch(positions)[:, :, None], dim=1))
    _compare(outputs["discriminator_logits"], detected, mask)


def _seq2seq_case(family, class_name):
    def run(backbones, folder):
        model = backbones(family)
        kbert.to_huggingface(kbert.tasks.Seq2SeqLM(model), folder)
        hf = _load(folder, class_name)
        ids, mask = _inputs()
        decoder_ids = ids[:, :5].copy()
        decoder_mask = np.ones_like(decoder_ids)
        outputs = model({"encoder_token_ids": ids, "encoder_padding_mask": mask,
                         "decoder_token_ids": decoder_ids, "decoder_padding_mask": decoder_mask})
        with torch.no_grad():
            theirs = hf(input_ids=_torch(ids), attention_mask=_torch(mask), decoder_input_ids=_torch(decoder_ids))
        _compare(outputs["logits"], theirs.logits)
    return run


def _gpt2_case(backbones, folder):
    model = backbones("gpt2")
    kbert.to_huggingface(model, folder)
    hf = _load(folder, "GPT2LMHeadModel")
    ids, _ = _inputs()
    with torch.no_grad():
        theirs = hf(input_ids=_torch(ids)).logits
    _compare(model({"token_ids": ids, "padding_mask": np.ones_like(ids)})["logits"], theirs)


def _xlnet_case(backbones, folder):
    model = backbones("xlnet")
    kbert.to_huggingface(model, folder)
    hf = _load(folder, "XLNetModel")
    ids, _ = _inputs()
    full = np.ones_like(ids)
    with torch.no_grad():
        theirs = hf(input_ids=_torch(ids), attention_mask=_torch(full)).last_hidden_state
    _compare(model({"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": full})["sequence_output"],
             theirs)


OUT_CASES = {
    "bert-model": _encoder_case("bert", "BertModel"),
    "bert-classifier": _classifier_case("bert", "BertForSequenceClassification"),
    "bert-pretraining": _pretrainer_case("bert", "BertForPreTraining", "nsp"),
    "prelayernorm-model": _encoder_case("prelayernorm", "RobertaPreLayerNormModel"),
    "prelayernorm-classifier": _classifier_case("prelayernorm", "RobertaPreLayerNormForSequenceClassification"),
    "roberta-tagger": _tagger_case("roberta", "RobertaForTokenClassification"),
    "albert-pretraining": _pretrainer_case("albert", "AlbertForPreTraining", "sop"),
    "electra-pretrainer": _electra_pretrainer_case,
    "distilbert-qa": _question_answering_case("distilbert", "DistilBertForQuestionAnswering"),
    "distilbert-classifier": _classifier_case("distilbert", "DistilBertForSequenceClassification",
                                              hidden_activation="relu"),
    "bigbird-masked-lm": _pretrainer_case("bigbird", "BigBirdForMaskedLM", None),
    "longformer-masked-lm": _pretrainer_case("longformer", "LongformerForMaskedLM", None),
    "t5-v1.1": _seq2seq_case("t5", "T5ForConditionalGeneration"),
    "t5-v1.0": _seq2seq_case("t5_v1_0", "T5ForConditionalGeneration"),
    "bart": _seq2seq_case("bart", "BartForConditionalGeneration"),
    "gpt2": _gpt2_case,
    "xlnet-model": _xlnet_case,
}


# The cases run on TensorFlow and JAX too (all run on PyTorch): what a backend changes is how the
# variables are read (`keras.ops.convert_to_numpy`) and kbert's own forward pass, which its parity
# tests check per backend; the names and layouts are the same everywhere.
EVERY_BACKEND = ("prelayernorm-classifier", "gpt2", "t5-v1.1")


@pytest.mark.filterwarnings("ignore:.*has no preprocessor")
@pytest.mark.parametrize("case", OUT_CASES)
def test_kbert_model_out_to_transformers(case, backbones, tmp_path):
    if keras.backend.backend() != "torch" and case not in EVERY_BACKEND:
        pytest.skip(f"layout only, backend-independent: runs in the torch run ({', '.join(EVERY_BACKEND)} run here)")
    OUT_CASES[case](backbones, str(tmp_path / "exported"))


# --- transformers -> kbert -> transformers -----------------------------------------------------------

_HF = dict(vocab_size=VOCABULARY, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
           max_position_embeddings=40)
# family -> (config class, its keywords, the heads kbert imports)
_ENCODER_HEADS = ("Model", "ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering",
                  "ForMultipleChoice", "ForMaskedLM")
HF_FAMILIES = {
    "Bert": ("BertConfig", _HF, (*_ENCODER_HEADS, "ForPreTraining")),
    "Roberta": ("RobertaConfig", dict(_HF, pad_token_id=1), _ENCODER_HEADS),
    "RobertaPreLayerNorm": ("RobertaPreLayerNormConfig", dict(_HF, pad_token_id=1), _ENCODER_HEADS),
    "Albert": ("AlbertConfig", dict(_HF, embedding_size=8, num_hidden_layers=2), (*_ENCODER_HEADS, "ForPreTraining")),
    "Electra": ("ElectraConfig", dict(_HF, embedding_size=8), _ENCODER_HEADS[:4] + ("ForMaskedLM",)),
    "DistilBert": ("DistilBertConfig", dict(vocab_size=VOCABULARY, dim=16, n_layers=1, n_heads=2, hidden_dim=32,
                                            max_position_embeddings=40), _ENCODER_HEADS[:4] + ("ForMaskedLM",)),
    "BigBird": ("BigBirdConfig", dict(_HF, block_size=4, num_random_blocks=1),
                ("Model", "ForSequenceClassification", "ForTokenClassification", "ForMultipleChoice", "ForMaskedLM",
                 "ForPreTraining")),
    "Longformer": ("LongformerConfig", dict(_HF, pad_token_id=1, attention_window=4), _ENCODER_HEADS[:4] +
                   ("ForMaskedLM",)),
    "XLNet": ("XLNetConfig", dict(vocab_size=VOCABULARY, d_model=16, n_layer=1, n_head=2, d_inner=32),
              ("Model", "ForSequenceClassification", "ForTokenClassification", "LMHeadModel")),
    "T5": ("T5Config", dict(vocab_size=VOCABULARY, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2),
           ("ForConditionalGeneration",)),
    "T5v1.1": ("T5Config", dict(vocab_size=VOCABULARY, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2,
                                feed_forward_proj="gated-gelu", tie_word_embeddings=False),
               ("ForConditionalGeneration",)),
    "GPT2": ("GPT2Config", dict(vocab_size=VOCABULARY, n_embd=16, n_layer=1, n_head=2, n_positions=32,
                                bos_token_id=VOCABULARY - 1, eos_token_id=VOCABULARY - 1), ("LMHeadModel",)),
    "Bart": ("BartConfig", dict(vocab_size=VOCABULARY, d_model=16, encoder_layers=1, decoder_layers=1,
                                encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                decoder_ffn_dim=32, max_position_embeddings=32), ("ForConditionalGeneration",)),
}
# Keys of transformers' state dicts that a folder does not store: they are tied to (or copies of) another
# tensor (besides the model's own `_tied_weights_keys`), or buffers.
TIED = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight",
        "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")
BUFFERS = ("position_ids", "token_type_ids")
HF_CASES = [(family, head) for family, (_, _, heads) in HF_FAMILIES.items() for head in heads]


def _hf_model(family, head, folder):
    config_class, keywords, _ = HF_FAMILIES[family]
    labels = 3 if head in ("ForSequenceClassification", "ForTokenClassification") else 2
    config = getattr(transformers, config_class)(**keywords, num_labels=labels)
    torch.manual_seed(0)
    model = getattr(transformers, family.replace("v1.1", "") + head)(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.2)
    model.save_pretrained(folder)
    return model


def _imported(folder, head):
    if head in ("Model", "ForConditionalGeneration") or head == "LMHeadModel" and "GPT2" in folder:
        return kbert.from_huggingface(folder)
    return kbert.from_huggingface_task(folder, num_choices=2 if head == "ForMultipleChoice" else None)


# The state-dict round trip on TensorFlow and JAX too, for these (all run on PyTorch), as above.
EVERY_BACKEND_BACK = (("Bert", "ForSequenceClassification"), ("GPT2", "LMHeadModel"),
                      ("T5v1.1", "ForConditionalGeneration"))


@pytest.mark.filterwarnings("ignore:.*(has no preprocessor|has no pooler)")
@pytest.mark.parametrize("family, head", [pytest.param(f, h, id=f"{f}{h}") for f, h in HF_CASES])
def test_transformers_state_dict_comes_back(family, head, tmp_path):
    if keras.backend.backend() != "torch" and (family, head) not in EVERY_BACKEND_BACK:
        pytest.skip("names and layouts, backend-independent: runs in the torch run (three cases run here)")
    original = _hf_model(family, head, str(tmp_path / family))
    folder = str(tmp_path / f"{family}-back")
    kbert.to_huggingface(_imported(str(tmp_path / family), head), folder)
    written = safetensors_numpy.load_file(os.path.join(folder, "model.safetensors"))
    state = {name: tensor.numpy() for name, tensor in original.state_dict().items()}
    tied = set(getattr(original, "_tied_weights_keys", None) or ())
    left = {name for name in set(state) - set(written) if name not in tied and not name.endswith(TIED)
            and name.rpartition(".")[2] not in BUFFERS}
    assert not left and not set(written) - set(state), (sorted(left), sorted(set(written) - set(state)))
    for name, array in written.items():
        np.testing.assert_array_equal(array, state[name], err_msg=name)
    _load(folder, family.replace("v1.1", "") + head)
    with open(os.path.join(folder, "config.json")) as f:
        assert json.load(f)["architectures"] == [family.replace("v1.1", "") + head]


# --- bad input -------------------------------------------------------------------------------------------

@pytest.mark.backend_independent
def test_a_folder_that_is_not_empty_is_refused(backbones, tmp_path):
    (tmp_path / "old.txt").write_text("x")
    with pytest.raises(ValueError, match="is not an empty folder"):
        kbert.to_huggingface(backbones("bert"), str(tmp_path))


@pytest.mark.backend_independent
def test_a_model_without_a_transformers_class_is_refused_naming_what_to_export(backbones):
    elmo = kbert.models.build("elmo_small", hidden_dim=8, cell_dim=16, filters=((1, 4),))
    with pytest.raises(ValueError, match="ELMo has no transformers class"):
        kbert.to_huggingface(elmo, "unused")
    span = kbert.pretraining.SpanBertPretrainer(backbones("bert"))
    with pytest.raises(ValueError, match=r"SpanBertPretrainer has no transformers class.*model\.backbone"):
        kbert.to_huggingface(span, "unused")


@pytest.mark.backend_independent
@pytest.mark.parametrize("model, setting", [
    (lambda b: kbert.models.build("bert_tiny", **KBERT_FAMILIES["prelayernorm"][1], share_layers=True),
     "share_layers=True"),
    (lambda b: kbert.tasks.TextClassifier(b("xlnet"), num_classes=2), "hidden_activation=None"),
    (lambda b: kbert.tasks.TextClassifier(b("bert"), num_classes=2, hidden_activation="tanh"),
     "hidden_activation='tanh'"),
    (lambda b: kbert.tasks.TokenClassifier(b("bert"), num_labels=2, features="last_four"), "features='last_four'"),
    (lambda b: kbert.pretraining.BertPretrainer(b("roberta")), "pair_objective='nsp'"),
], ids=["setting", "xlnet-head", "bert-head", "features", "pretraining-head"])
def test_a_setting_no_transformers_class_expresses_is_named(model, setting, backbones, tmp_path):
    with pytest.raises(ValueError, match=setting.replace("(", r"\(")) as error:
        kbert.to_huggingface(model(backbones), str(tmp_path / "out"))
    assert len(str(error.value).splitlines()) == 1
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.backend_independent
def test_a_model_without_a_tokenizer_writes_weights_and_config_and_warns(backbones, tmp_path):
    with pytest.warns(UserWarning, match="no preprocessor") as caught:
        kbert.to_huggingface(backbones("gpt2"), str(tmp_path))
    assert len(str(caught[0].message).splitlines()) == 1
    assert sorted(os.listdir(tmp_path)) == ["config.json", "model.safetensors"]


@pytest.mark.backend_independent
def test_configs_read_back_to_the_backbones_arguments(backbones):
    from kbert.checkpoints.huggingface_configs import backbone_model_types, huggingface_config

    for family in KBERT_FAMILIES:
        backbone = backbones(family)
        model_type = backbone_model_types(backbone)[0]
        assert unexpressed_setting(model_type, backbone, huggingface_config(model_type, backbone, 0)) is None, family
