"""Which transformers class holds a kbert model, and the HF module of each of its head's layers.

`exported_head(model, model_type)` is the inverse of `task_head_converter.task_model_for`,
read off the same tables (`SEQUENCE_HEADS`, `MASKED_LM_HEADS`, `PAIR_HEADS`, …):
it gives `(architecture, backbone, {task attribute path: HF module}, pooler)`,
where `pooler` says what becomes of the backbone's pooler: `"keep"` (the class
has one), `"drop"` (it has none, and nothing reads it) or `"classifier"` (a
RoBERTa-style classification head, `tanh(Dense)` on the first token, which is
what kbert's pooler plus `output_dense` compute). A model or head transformers
has no class for, or a setting no class expresses, raises a one-line
`ValueError` that names it.

>>> import kbert
>>> classifier = kbert.tasks.TextClassifier(kbert.models.bert_tiny(num_layers=1), num_classes=2)
>>> exported_head(classifier, "bert")[2:]
({'output_dense': 'classifier'}, 'keep')
"""

from kbert.checkpoints.task_head_converter import (
    GELU_MASKED_LM_TYPES,
    MASKED_LM_HEADS,
    MULTIPLE_CHOICE_TYPES,
    PAIR_HEADS,
    QUESTION_ANSWERING_TYPES,
    SEQUENCE_HEADS,
    TOKEN_CLASSIFICATION_TYPES,
)
from kbert.layers.activations import activation_name
from kbert.models.backbone import Backbone
from kbert.pretraining.bert_pretrainer import BertPretrainer
from kbert.pretraining.xlnet_pretrainer import XLNetPretrainer
from kbert.tasks import CausalLM, MultipleChoice, Seq2SeqLM, SpanQuestionAnswering, TextClassifier, TokenClassifier

# The transformers class-name stem of each model_type.
CLASS_STEMS = {
    "bert": "Bert", "roberta": "Roberta", "roberta-prelayernorm": "RobertaPreLayerNorm", "albert": "Albert",
    "electra": "Electra", "distilbert": "DistilBert", "big_bird": "BigBird", "longformer": "Longformer",
    "t5": "T5", "gpt2": "GPT2", "bart": "Bart", "xlnet": "XLNet",
}
# The class a backbone alone becomes where its outputs include the LM head's logits.
LANGUAGE_MODEL_CLASSES = {"gpt2": "GPT2LMHeadModel", "t5": "T5ForConditionalGeneration",
                          "bart": "BartForConditionalGeneration"}
_WITHOUT_POOLER = ("electra", "distilbert", "xlnet", "t5", "gpt2", "bart")
_SEQUENCE = "ForSequenceClassification"


def _refuse(what, model_type, supported):
    return ValueError(f"No transformers {CLASS_STEMS[model_type]}{what} class holds kbert's head (there is none, "
                      f"or its head differs); kbert writes it for the model_types {sorted(supported)}.")


def has_pooler(model_type, suffix):
    """Whether the transformers class `CLASS_STEMS[model_type] + suffix` has a pooler.

    >>> has_pooler("roberta", "ForSequenceClassification"), has_pooler("bert", "ForSequenceClassification")
    (False, True)
    """
    if model_type in _WITHOUT_POOLER:
        return False
    if model_type == "big_bird" or suffix in ("Model", "ForMultipleChoice", "ForPreTraining"):
        return True
    return suffix == _SEQUENCE and SEQUENCE_HEADS[model_type][0] is None


def _pooler_of(model_type, suffix):
    return "keep" if has_pooler(model_type, suffix) else "drop"


def _check_features(model):
    if model.features != "sequence_output":
        raise ValueError(f"features={model.features!r}: transformers' heads read the last layer's "
                         "sequence_output only.")


def _needs_pooler(model, what):
    if getattr(model.backbone, "pooler", "absent") is None:
        raise ValueError(f"use_pooler=False: transformers' {what} reads a pooler.")


def _sequence_head(model, model_type):
    _check_features(model)
    if model_type not in SEQUENCE_HEADS:
        raise _refuse(_SEQUENCE, model_type, SEQUENCE_HEADS)
    activation, modules = SEQUENCE_HEADS[model_type]
    if model_type == "big_bird":
        activation = model.backbone.activation
    ours = model.hidden_activation
    if activation is None and ours is None:
        _needs_pooler(model, f"{CLASS_STEMS[model_type]}{_SEQUENCE}")
        return dict(modules), "keep"
    pooled = getattr(model.backbone, "pooler", None) is not None
    if activation == "tanh" and ours is None and pooled and "hidden_dense" in modules:
        return {"backbone.pooler.dense": modules["hidden_dense"], "output_dense": modules["output_dense"]}, "classifier"
    if ours is not None and activation is not None and activation_name(ours) == activation_name(activation):
        return dict(modules), _pooler_of(model_type, _SEQUENCE)
    expected = "none" if activation is None else repr(activation)
    raise ValueError(f"hidden_activation={ours!r}: {CLASS_STEMS[model_type]}{_SEQUENCE}'s head has a hidden "
                     f"activation of {expected}" + ("" if pooled or activation is None else " (or a pooler)") + ".")


def _masked_lm_head(model, model_type):
    if model_type not in MASKED_LM_HEADS:
        raise _refuse("ForMaskedLM", model_type, MASKED_LM_HEADS)
    if model_type in GELU_MASKED_LM_TYPES and activation_name(model.backbone.activation) != "gelu":
        raise ValueError(f"activation={model.backbone.activation!r}: {CLASS_STEMS[model_type]}'s masked-LM head "
                         "transforms with exact GELU.")
    return dict(MASKED_LM_HEADS[model_type])


def _pretrainer_head(model, model_type):
    modules = _masked_lm_head(model, model_type)
    if model.pair_objective is None:
        return "ForMaskedLM", modules, _pooler_of(model_type, "ForMaskedLM")
    if PAIR_HEADS.get(model_type, (None,))[0] != model.pair_objective:
        families = [t for t, (objective, _) in PAIR_HEADS.items() if objective == model.pair_objective]
        raise ValueError(f"pair_objective={model.pair_objective!r}: transformers has no "
                         f"{CLASS_STEMS[model_type]}ForPreTraining with that head; it has one for {families}. "
                         "Export its backbone: kbert.to_huggingface(model.backbone, folder).")
    _needs_pooler(model, "ForPreTraining's pair head")
    return "ForPreTraining", {**modules, "pair_head": PAIR_HEADS[model_type][1]}, "keep"


def _task_head(model, model_type):
    """`(class-name suffix, modules, pooler)` of a task model or pretrainer."""
    if isinstance(model, TextClassifier):
        return (_SEQUENCE, *_sequence_head(model, model_type))
    if isinstance(model, BertPretrainer):
        return _pretrainer_head(model, model_type)
    simple = {TokenClassifier: ("ForTokenClassification", TOKEN_CLASSIFICATION_TYPES, {"output_dense": "classifier"}),
              SpanQuestionAnswering: ("ForQuestionAnswering", QUESTION_ANSWERING_TYPES, {"span_dense": "qa_outputs"}),
              MultipleChoice: ("ForMultipleChoice", MULTIPLE_CHOICE_TYPES, {"output_dense": "classifier"})}
    suffix, supported, modules = simple[type(model)]
    _check_features(model)
    if model_type not in supported:
        raise _refuse(suffix, model_type, supported)
    if isinstance(model, MultipleChoice):
        _needs_pooler(model, f"{CLASS_STEMS[model_type]}ForMultipleChoice")
    return suffix, modules, _pooler_of(model_type, suffix)


EXPORTED_TASKS = (TextClassifier, TokenClassifier, SpanQuestionAnswering, MultipleChoice, BertPretrainer)


def exported_head(model, model_type):
    """`(architecture, backbone, {task attribute path: HF module}, pooler)` for `model` as a `model_type` model.

    Raises:
        ValueError: a head (or a backbone setting it needs) no transformers class of the family has.
    """
    if isinstance(model, (CausalLM, Seq2SeqLM)):
        model = model.backbone
    if isinstance(model, Backbone):
        name = LANGUAGE_MODEL_CLASSES.get(model_type, f"{CLASS_STEMS[model_type]}Model")
        return name, model, {}, _pooler_of(model_type, "Model")
    if isinstance(model, XLNetPretrainer):
        return "XLNetLMHeadModel", model.backbone, {"lm_head": "lm_loss"}, "drop"
    if model_type in LANGUAGE_MODEL_CLASSES:
        raise ValueError(f"A {type(model).__name__} over a {model_type} backbone has no transformers class.")
    suffix, modules, pooler = _task_head(model, model_type)
    return CLASS_STEMS[model_type] + suffix, model.backbone, modules, pooler
