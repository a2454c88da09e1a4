"""kbert.checkpoints.task_head_converter: tiny random `transformers` task models
(`…ForSequenceClassification`, `…ForTokenClassification`, `…ForQuestionAnswering`,
`…ForMultipleChoice`), saved locally, imported with their heads, and compared
logit for logit."""

import json

import keras
import numpy as np
import pytest
from bert_family_checkpoints import FAMILIES, inputs, randomize, rewrite_tensors, tiny_model
from helpers import to_numpy

import kbert
from kbert.checkpoints.task_head_converter import from_huggingface_task

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# float32 on both sides: round-off only (the backbones differ by <= 3e-7).
TOLERANCE = 1e-5
CHOICES = 3


def _batch(family):
    """`inputs()` for `family`: three sequences, two padded; one segment for RoBERTa."""
    pad_id, num_segments = FAMILIES[family][3], 2
    if family == "roberta":
        num_segments = 1
    elif family == "distilbert":
        num_segments = 0
    batch = inputs(pad_id, with_segments=num_segments == 2)
    if num_segments == 1:
        batch["segment_ids"] = np.zeros_like(batch["token_ids"])
    return batch


def _hf_logits(hf_model, batch):
    names = {"token_ids": "input_ids", "padding_mask": "attention_mask"}
    names["segment_ids"] = "token_type_ids"
    hf_inputs = {names[k]: torch.tensor(v, dtype=torch.long) for k, v in batch.items()}
    with torch.no_grad():
        outputs = hf_model(**hf_inputs)
    if hasattr(outputs, "start_logits"):
        return {name: getattr(outputs, name).numpy() for name in ("start_logits", "end_logits")}
    return outputs.logits.numpy()


def _imported(hf_model, tmp_path, **options):
    hf_model.save_pretrained(tmp_path)
    return kbert.from_huggingface_task(tmp_path, **options)


@pytest.mark.parametrize(
    "family, num_labels",
    [("bert", 3), ("bert", 1), ("roberta", 3), ("distilbert", 3), ("albert", 3), ("electra", 3)],
)
def test_sequence_classifier_matches_transformers(family, num_labels, tmp_path):
    name = {"distilbert": "DistilBert"}.get(family, family.capitalize())
    hf_model = tiny_model(family, f"{name}ForSequenceClassification", num_labels=num_labels)
    model = _imported(hf_model, tmp_path)
    assert isinstance(model, kbert.tasks.TextClassifier) and model.num_classes == num_labels
    batch = _batch(family)
    difference = np.abs(to_numpy(model(batch)) - _hf_logits(hf_model, batch)).max()
    print(f"{family} sequence classifier: max abs difference {difference:.1e}")
    assert difference <= TOLERANCE


@pytest.mark.parametrize("family", ["bert", "electra", "distilbert"])
def test_token_classifier_matches_transformers(family, tmp_path):
    name = {"distilbert": "DistilBert"}.get(family, family.capitalize())
    hf_model = tiny_model(family, f"{name}ForTokenClassification", num_labels=5)
    model = _imported(hf_model, tmp_path)
    assert isinstance(model, kbert.tasks.TokenClassifier) and model.num_labels == 5
    batch = _batch(family)
    assert np.abs(to_numpy(model(batch)) - _hf_logits(hf_model, batch)).max() <= TOLERANCE


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_question_answering_matches_transformers(family, tmp_path):
    hf_model = tiny_model(family, f"{family.capitalize()}ForQuestionAnswering")
    model = _imported(hf_model, tmp_path)
    assert isinstance(model, kbert.tasks.SpanQuestionAnswering)
    batch = _batch(family)
    real = batch["padding_mask"] == 1
    outputs, expected = to_numpy(model(batch)), _hf_logits(hf_model, batch)
    for name in ("start_logits", "end_logits"):
        assert np.abs(outputs[name] - expected[name])[real].max() <= TOLERANCE
        assert (outputs[name][~real] == -1e9).all()  # kbert masks the padding


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_multiple_choice_matches_transformers(family, tmp_path):
    hf_model = tiny_model(family, f"{family.capitalize()}ForMultipleChoice")
    model = _imported(hf_model, tmp_path, num_choices=CHOICES)
    assert isinstance(model, kbert.tasks.MultipleChoice) and model.backbone.use_pooler
    flat = _batch(family)  # three sequences: as two examples of three choices
    batch = {k: np.stack([v, v[::-1]]) for k, v in flat.items()}
    difference = np.abs(to_numpy(model(batch)) - _hf_logits(hf_model, batch)).max()
    assert difference <= TOLERANCE


@pytest.mark.slow(reason="a transformers Longformer built and run beside kbert's (JAX compiles its eager operations)")
def test_longformer_classifier_puts_global_attention_on_cls_like_transformers(tmp_path):
    config = transformers.LongformerConfig(
        **dict(FAMILIES["roberta"][2], attention_window=[4, 6], num_labels=2)
    )
    hf_model = randomize(transformers.LongformerForSequenceClassification(config))
    model = _imported(hf_model, tmp_path)
    assert model.hidden_activation == "tanh"
    batch = _batch("roberta")
    assert np.abs(to_numpy(model(batch)) - _hf_logits(hf_model, batch)).max() <= TOLERANCE


def test_big_bird_classifier_uses_the_config_activation(tmp_path):
    # 11 tokens with blocks of 4: both models take full attention.
    config = transformers.BigBirdConfig(
        **dict(FAMILIES["bert"][2], block_size=4, num_random_blocks=1, num_labels=3)
    )
    hf_model = randomize(transformers.BigBirdForSequenceClassification(config))
    model = _imported(hf_model, tmp_path)
    assert model.hidden_activation == "gelu_approximate"  # BigBird's gelu_new
    batch = _batch("bert")
    assert np.abs(to_numpy(model(batch)) - _hf_logits(hf_model, batch)).max() <= TOLERANCE


def test_roberta_head_layers_and_round_trip(tmp_path):
    hf_model = tiny_model("roberta", "RobertaForSequenceClassification", num_labels=4)
    model = _imported(hf_model, tmp_path / "hf")
    expected = hf_model.classifier.out_proj.weight.detach().numpy().T
    np.testing.assert_array_equal(to_numpy(model.output_dense.kernel), expected)
    assert not model.backbone.use_pooler and model.hidden_activation == "tanh"
    model.save(tmp_path / "classifier.keras")
    restored = keras.saving.load_model(tmp_path / "classifier.keras")
    assert restored.hidden_activation == "tanh" and restored.num_classes == 4
    batch = _batch("roberta")
    np.testing.assert_array_equal(to_numpy(restored(batch)), to_numpy(model(batch)))


def test_masked_lm_matches_transformers_at_every_position(tmp_path):
    hf_model = tiny_model("bert", "BertForMaskedLM")
    model = _imported(hf_model, tmp_path)
    assert type(model).__name__ == "BertPretrainer" and model.pair_head is None and not model.backbone.use_pooler
    batch = _batch("bert")
    expected = _hf_logits(hf_model, batch)
    positions = np.tile(np.arange(batch["token_ids"].shape[1], dtype="int32"), (len(batch["token_ids"]), 1))
    logits = to_numpy(model({**batch, "mask_positions": positions})["mlm_logits"])
    real = batch["padding_mask"] == 1
    np.testing.assert_allclose(logits[real], expected[real], atol=TOLERANCE)


def test_unsupported_heads_and_missing_choices_are_named(tmp_path):
    tiny_model("electra", "ElectraForMultipleChoice").save_pretrained(tmp_path / "electra")
    with pytest.raises(ValueError, match=r"ElectraForMultipleChoice head \(model_type 'electra'\)"):
        from_huggingface_task(tmp_path / "electra", num_choices=2)
    tiny_model("bert", "BertForMultipleChoice").save_pretrained(tmp_path / "bert")
    with pytest.raises(ValueError, match="pass num_choices"):
        from_huggingface_task(tmp_path / "bert")
    tiny_model("distilbert", "DistilBertForMultipleChoice").save_pretrained(tmp_path / "choice")
    with pytest.raises(ValueError, match=r"DistilBertForMultipleChoice head \(model_type 'distilbert'\)"):
        from_huggingface_task(tmp_path / "choice", num_choices=2)
    tiny_model("electra", "ElectraForPreTraining").save_pretrained(tmp_path / "pretraining")
    with pytest.raises(ValueError, match="'ElectraForPreTraining' is not a task architecture"):
        from_huggingface_task(tmp_path / "pretraining")
    config = json.loads((tmp_path / "bert" / "config.json").read_text())
    (tmp_path / "bert" / "config.json").write_text(json.dumps({**config, "architectures": []}))
    with pytest.raises(ValueError, match=r"names the architectures \[\]"):
        from_huggingface_task(tmp_path / "bert", num_choices=2)


def test_a_missing_head_tensor_is_named(tmp_path):
    hf_model = tiny_model("bert", "BertForTokenClassification", num_labels=3)
    hf_model.save_pretrained(tmp_path)
    rewrite_tensors(tmp_path, lambda t: {k: v for k, v in t.items() if k != "classifier.bias"})
    with pytest.raises(ValueError, match=r"lacks 1 tensor\(s\).*classifier\.bias"):
        from_huggingface_task(tmp_path)
