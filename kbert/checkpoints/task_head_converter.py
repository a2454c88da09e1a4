"""Hugging Face fine-tuned checkpoints into kbert task models: the backbone and its head.

`from_huggingface_task(path)` reads the architecture named in `config.json`
(`BertForSequenceClassification` …), builds the backbone through the
family's registered converter (`kbert.checkpoints.registry`), wraps it in the
matching `kbert.tasks` model and fills the head from the checkpoint's head
tensors:

- `…ForSequenceClassification` → `TextClassifier`: `classifier` on the
  pooler (BERT, ALBERT); `classifier.dense` + `classifier.out_proj` on
  [CLS] (RoBERTa, XLM-R, CamemBERT and Longformer: tanh; ELECTRA: GELU;
  BigBird: its `hidden_act`); `pre_classifier` + `classifier` (DistilBERT:
  ReLU).
  XLNet: `sequence_summary.summary` (tanh) + `logits_proj` on its last token.
- `…ForTokenClassification` → `TokenClassifier`: `classifier` (every family).
- `…ForQuestionAnswering` → `SpanQuestionAnswering`: `qa_outputs` (every
  family but BigBird and XLNet, whose heads differ).
- `XLNetLMHeadModel` → `XLNetPretrainer`: the tied `lm_loss` and its bias.
- `…ForMaskedLM` → `BertPretrainer` without a pair head (`fill_mask`): the
  transform (dense, LayerNorm) and the tied decoder's bias, named per family
  in `MASKED_LM_HEADS` (ELECTRA's is its generator's).
- `BertForPreTraining`, `BigBirdForPreTraining` (NSP) and `AlbertForPreTraining`
  (SOP) → `BertPretrainer` with its pair head (`PAIR_HEADS`).
- `…ForMultipleChoice` → `MultipleChoice`: `classifier` on the pooler (BERT,
  ALBERT, RoBERTa, XLM-R, CamemBERT, BigBird).

Hugging Face's Longformer heads put global attention on tokens they find
from the separator when none is given; kbert's do so for classification
([CLS]) only: for question answering pass the question tokens as the
inputs' `question_mask`.
"""

import functools
import os

from kbert.checkpoints.registry import converter_for
from kbert.checkpoints.weight_mapping import (
    assign_tensors,
    kbert_activation,
    layer_tensor_names,
    read_config,
)
from kbert.pretraining.bert_pretrainer import BertPretrainer
from kbert.pretraining.xlnet_pretrainer import XLNetPretrainer
from kbert.tasks.multiple_choice import MultipleChoice
from kbert.tasks.span_question_answering import SpanQuestionAnswering
from kbert.tasks.text_classifier import TextClassifier
from kbert.tasks.token_classifier import TokenClassifier

_ONE_LAYER = {"output_dense": "classifier"}
_TWO_LAYERS = {"hidden_dense": "classifier.dense", "output_dense": "classifier.out_proj"}
_ROBERTA_TYPES = ("roberta", "xlm-roberta", "camembert", "roberta-prelayernorm")
_BIGBIRD_ACTIVATION = "the config's hidden_act"

# `…ForSequenceClassification`: model_type -> (hidden activation, {task attribute: HF module}).
SEQUENCE_HEADS = {
    "bert": (None, _ONE_LAYER),
    "albert": (None, _ONE_LAYER),
    **{model_type: ("tanh", _TWO_LAYERS) for model_type in _ROBERTA_TYPES},
    "longformer": ("tanh", _TWO_LAYERS),
    "electra": ("gelu", _TWO_LAYERS),
    "big_bird": (_BIGBIRD_ACTIVATION, _TWO_LAYERS),
    "distilbert": ("relu", {"hidden_dense": "pre_classifier", "output_dense": "classifier"}),
    "xlnet": ("tanh", {"hidden_dense": "sequence_summary.summary", "output_dense": "logits_proj"}),
}
TOKEN_CLASSIFICATION_TYPES = tuple(SEQUENCE_HEADS)
QUESTION_ANSWERING_TYPES = tuple(t for t in SEQUENCE_HEADS if t not in ("big_bird", "xlnet"))
MULTIPLE_CHOICE_TYPES = ("bert", "albert", *_ROBERTA_TYPES, "big_bird")


def _masked_lm_head(transform, layer_norm, decoder):
    return {"mlm_head.transform": transform, "mlm_head.layer_norm": layer_norm, "mlm_head": decoder}


_BERT_MASKED_LM = _masked_lm_head("cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm",
                                  "cls.predictions")
_ROBERTA_MASKED_LM = _masked_lm_head("lm_head.dense", "lm_head.layer_norm", "lm_head")
# `…ForMaskedLM`'s head by model_type: {task attribute path: HF module} (the decoder's: its bias).
MASKED_LM_HEADS = {
    "bert": _BERT_MASKED_LM,
    "big_bird": _BERT_MASKED_LM,
    **{model_type: _ROBERTA_MASKED_LM for model_type in (*_ROBERTA_TYPES, "longformer")},
    "albert": _masked_lm_head("predictions.dense", "predictions.LayerNorm", "predictions"),
    "electra": _masked_lm_head("generator_predictions.dense", "generator_predictions.LayerNorm",
                               "generator_lm_head"),
    "distilbert": _masked_lm_head("vocab_transform", "vocab_layer_norm", "vocab_projector"),
}
# The families whose masked-LM transform is exact GELU whatever the config's hidden_act.
GELU_MASKED_LM_TYPES = (*_ROBERTA_TYPES, "longformer", "electra")
# `…ForPreTraining`: model_type -> (pair objective, its head's HF module).
PAIR_HEADS = {"bert": ("nsp", "cls.seq_relationship"), "big_bird": ("nsp", "cls.seq_relationship"),
              "albert": ("sop", "sop_classifier.classifier")}

# The dropout of a head, by the first of these config keys that is set.
_SEQUENCE_DROPOUT = ("classifier_dropout", "classifier_dropout_prob", "seq_classif_dropout")
_DROPOUT = ("classifier_dropout", "classifier_dropout_prob", "hidden_dropout_prob", "dropout")


def _dropout(config, keys):
    values = [config[key] for key in (*keys, *_DROPOUT) if config.get(key) is not None]
    return values[0] if values else 0.1


def _num_labels(config):
    """The label count of a Hugging Face config (2, Hugging Face's default, when unnamed)."""
    return len(config.get("id2label") or {}) or config.get("num_labels", 2)


def _unsupported(architecture, model_type, supported):
    return ValueError(
        f"kbert cannot import the {architecture} head (model_type {model_type!r}); "
        f"this task is supported for model_types {sorted(supported)}."
    )


def task_model_for(architecture, config, backbone, num_choices=None):
    """The kbert task model for a Hugging Face `architecture`, and its head's HF modules.

    Returns:
        `(model, {task attribute: HF module})`.

    Raises:
        ValueError: an architecture or family without a kbert head, or a
            multiple-choice head without `num_choices`.

    >>> import kbert
    >>> backbone = kbert.models.bert_tiny(num_layers=1)
    >>> config = {"model_type": "bert"}
    >>> model, modules = task_model_for("BertForQuestionAnswering", config, backbone)
    >>> type(model).__name__, modules
    ('SpanQuestionAnswering', {'span_dense': 'qa_outputs'})
    """
    model_type = config.get("model_type")
    if architecture == "XLNetLMHeadModel":
        return XLNetPretrainer(backbone), {"lm_head": "lm_loss"}
    if architecture.endswith("ForMaskedLM"):
        if model_type not in MASKED_LM_HEADS:
            raise _unsupported(architecture, model_type, MASKED_LM_HEADS)
        return BertPretrainer(backbone, pair_objective=None), MASKED_LM_HEADS[model_type]
    if architecture.endswith("ForPreTraining") and model_type in PAIR_HEADS:
        objective, module = PAIR_HEADS[model_type]
        return BertPretrainer(backbone, pair_objective=objective), {**MASKED_LM_HEADS[model_type], "pair_head": module}
    if architecture.endswith("ForSequenceClassification"):
        if model_type not in SEQUENCE_HEADS:
            raise _unsupported(architecture, model_type, SEQUENCE_HEADS)
        activation, modules = SEQUENCE_HEADS[model_type]
        if activation == _BIGBIRD_ACTIVATION:
            activation = kbert_activation(config.get("hidden_act", "gelu_new"))
        dropout = _dropout(config, _SEQUENCE_DROPOUT)
        return TextClassifier(backbone, _num_labels(config), dropout, activation), modules
    if architecture.endswith("ForTokenClassification"):
        if model_type not in TOKEN_CLASSIFICATION_TYPES:
            raise _unsupported(architecture, model_type, TOKEN_CLASSIFICATION_TYPES)
        return TokenClassifier(backbone, _num_labels(config), _dropout(config, ())), _ONE_LAYER
    if architecture.endswith("ForQuestionAnswering"):
        if model_type not in QUESTION_ANSWERING_TYPES:
            raise _unsupported(architecture, model_type, QUESTION_ANSWERING_TYPES)
        return SpanQuestionAnswering(backbone), {"span_dense": "qa_outputs"}
    if architecture.endswith("ForMultipleChoice"):
        if model_type not in MULTIPLE_CHOICE_TYPES:
            raise _unsupported(architecture, model_type, MULTIPLE_CHOICE_TYPES)
        if num_choices is None:
            raise ValueError(
                f"{architecture} checkpoints do not store the number of choices: "
                "pass num_choices (SWAG: 4)."
            )
        return MultipleChoice(backbone, num_choices, _dropout(config, ())), _ONE_LAYER
    raise ValueError(
        f"{architecture!r} is not a task architecture kbert imports; expected one ending "
        "in ForSequenceClassification, ForTokenClassification, ForQuestionAnswering, "
        "ForMultipleChoice or ForMaskedLM, a BERT, BigBird or ALBERT ForPreTraining or XLNetLMHeadModel "
        "(kbert.from_huggingface loads a backbone alone)."
    )


def _architecture(config, config_file):
    architectures = config.get("architectures") or []
    if len(architectures) != 1:
        raise ValueError(
            f"{config_file} names the architectures {architectures}; a task checkpoint "
            "names one, such as BertForSequenceClassification."
        )
    return architectures[0]


def from_huggingface_task(path, num_choices=None, **overrides):
    """Build a kbert task model, head included, from a local Hugging Face task checkpoint.

    See the module docstring for the architectures and families. The
    backbone is built and filled as `kbert.from_huggingface` does;
    the head's Dense layers then take the checkpoint's head tensors. Every
    variable is filled, or the error names the tensor that is missing.

    Args:
        path: directory with `config.json` (naming one architecture, e.g.
            `BertForSequenceClassification`) and the weights.
        num_choices: choices per example, for `…ForMultipleChoice` (which
            checkpoints do not store).
        **overrides: backbone constructor arguments that replace those read
            from the config, e.g. `dtype="mixed_bfloat16"`, `dropout=0.0`.

    Returns:
        A `TextClassifier`, `TokenClassifier`, `SpanQuestionAnswering`,
        `MultipleChoice`, `BertPretrainer` or `XLNetPretrainer`.

    Example:
    ```python
    # Saved beforehand: BertForSequenceClassification(...).save_pretrained(path)
    classifier = kbert.from_huggingface_task(path)
    classifier(inputs)  # == the transformers model's logits
    ```
    """
    directory = os.fspath(path)
    config = read_config(directory)
    config_file = os.path.join(directory, "config.json")
    architecture = _architecture(config, config_file)
    if architecture.endswith("ForMaskedLM") and config.get("model_type") != "big_bird":  # no pooler there
        overrides = {"use_pooler": False, **overrides}
    try:
        converter = converter_for(config.get("model_type"))
    except ValueError as error:
        raise ValueError(f"{error} (in {config_file})") from None
    backbone, tensors, backbone_tensors = converter.read_backbone(config, directory, overrides)
    model, modules = task_model_for(architecture, config, backbone, num_choices)
    names = converter.weight_names(backbone, tensors)
    for attribute, module in modules.items():
        layer = functools.reduce(getattr, attribute.split("."), model)
        names.update(layer_tensor_names(layer, module))
    hint = converter.missing_tensor_hint(config)
    assign_tensors(model, names, tensors, directory, hint, must_read=backbone_tensors)
    return model
