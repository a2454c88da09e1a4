"""`to_huggingface`: a kbert model written as a Hugging Face folder that transformers loads as it is.

The folder holds `config.json` (the family's keys, `architectures`, and
`id2label`/`label2id` from the task's label names), `model.safetensors`
(written with safetensors' NumPy API from the variables, so no PyTorch is
needed on any backend) and the tokenizer's files (`kbert.checkpoints.tokenizer_files`).
The weight names are the import converters' own, inverted
(`Converter.weight_names`, `task_head_converter`'s head tables), so what
`from_huggingface` reads, `to_huggingface` writes back, tensor for tensor.
Tied copies (a decoder tied to the token table, T5's `embed_tokens`) are
left to transformers, which ties them on loading.
"""

import importlib.util
import json
import os
import warnings

import keras
import numpy as np

from kbert.checkpoints.export_heads import EXPORTED_TASKS, MASKED_LM_HEADS, exported_head
from kbert.checkpoints.gpt2_converter import join_fused_attention
from kbert.checkpoints.huggingface_configs import (
    ROBERTA_POSITIONS,
    backbone_model_types,
    huggingface_config,
    roberta_position_table,
    unexpressed_setting,
)
from kbert.checkpoints.registry import converter_for
from kbert.checkpoints.tokenizer_files import write_tokenizer
from kbert.checkpoints.weight_mapping import layer_tensor_names, resolve_sublayer, stored_tensors
from kbert.models.backbone import Backbone
from kbert.pretraining.electra_pretrainer import ElectraPretrainer
from kbert.pretraining.xlnet_pretrainer import XLNetPretrainer
from kbert.tasks import CausalLM, Seq2SeqLM

_POSITIONS = "embeddings.position_embeddings.weight"
_TOP_LEVEL = ("final_logits_bias",)  # BART's: beside `model.`, not under it
_EXPORTED = (Backbone, CausalLM, Seq2SeqLM, XLNetPretrainer, ElectraPretrainer, *EXPORTED_TASKS)


def _refused(model):
    inner = next((name for name in ("backbone", "discriminator", "student") if hasattr(model, name)), None)
    advice = f" Export its backbone: kbert.to_huggingface(model.{inner}, folder)." if inner else ""
    return ValueError(f"{type(model).__name__} has no transformers class (its objective has no head class "
                      f"there).{advice}")


def _pad_id(tokenizer, backbone):
    pad = getattr(tokenizer, "pad_id", None)
    if pad is not None:
        return int(pad)
    return max(getattr(backbone, "position_offset", 0) - 1, 0)


def _backbone_tensors(model_type, backbone, pooler, pad_id):
    """The backbone's tensors under the family's names (no task prefix), the pooler kept or not."""
    converter = converter_for(model_type)
    names = converter.weight_names(backbone, {"lm_head.weight": None})
    if pooler != "keep" and getattr(converter, "pooler", None):
        names = {path: entry for path, entry in names.items() if not entry[0].startswith(converter.pooler + ".")}
    tensors = stored_tensors(backbone, names)
    if model_type == "gpt2":
        tensors = join_fused_attention(tensors)
    if "final_logits_bias" in tensors:
        tensors["final_logits_bias"] = tensors["final_logits_bias"][None, :]
    if model_type in ROBERTA_POSITIONS:
        tensors[_POSITIONS] = roberta_position_table(tensors[_POSITIONS], backbone.position_offset, pad_id)
    return tensors


def _head_tensors(model, modules):
    names = {}
    for path, module in modules.items():
        names.update(layer_tensor_names(resolve_sublayer(model, path, f"head {path!r}: {module!r}"), module))
    return stored_tensors(model, names)


def _prefixed(tensors, prefix):
    return {(name if name in _TOP_LEVEL else prefix + name): array for name, array in tensors.items()}


def _labels(model):
    """`{"id2label", "label2id", "num_labels"}` of a classifier or tagger, else {}."""
    count = getattr(model, "num_classes", None) or getattr(model, "num_labels", None)
    if count is None:
        return {}
    preprocessor = getattr(model, "preprocessor", None)
    names = [preprocessor.label_name(i) if preprocessor else f"LABEL_{i}" for i in range(count)]
    config = {"id2label": dict(enumerate(names)), "label2id": {name: i for i, name in enumerate(names)}}
    if getattr(model, "num_classes", None) == 1:
        config["problem_type"] = "regression"
    return config


def _export(model, model_type, pad_id):
    """`(config, tensors)` of `model` as a `model_type` model; a `ValueError` when that family cannot hold it."""
    architecture, backbone, modules, pooler = exported_head(model, model_type)
    config = huggingface_config(model_type, backbone, pad_id)
    unexpressed = unexpressed_setting(model_type, backbone, config)
    if unexpressed:
        argument, value, expected = unexpressed
        raise ValueError(f"{argument}={value!r}: transformers' {architecture} has no setting for it "
                         f"(its config gives {expected!r}).")
    tensors = _backbone_tensors(model_type, backbone, pooler, pad_id)
    if architecture.endswith("Model") and not architecture.endswith("LMHeadModel") or model_type == "t5":
        return dict(config, architectures=[architecture]), tensors
    tensors = {**_prefixed(tensors, converter_for(model_type).task_prefix), **_head_tensors(model, modules)}
    return dict(config, architectures=[architecture], **_labels(model)), tensors


def _first_export(model, model_types, pad_id):
    """`_export` for the first of `model_types` that can hold `model` (the first one's error if none can)."""
    first_error = None
    for model_type in model_types:
        try:
            return _export(model, model_type, pad_id)
        except ValueError as error:
            first_error = first_error or error
    raise first_error


def _electra_generator(model, pad_id):
    """`(config, tensors)` of an `ElectraPretrainer`'s generator as `ElectraForMaskedLM`."""
    discriminator = model.discriminator
    converter = converter_for("electra")
    if discriminator.activation != "gelu":
        raise ValueError(f"activation={discriminator.activation!r}: ElectraForMaskedLM's generator head "
                         "transforms with exact GELU.")
    pairs = [(layer, module) for attribute, module in converter.embeddings.items()
             if attribute != "projection" and (layer := getattr(discriminator.embeddings, attribute)) is not None]
    pairs += converter.block_modules(model.generator_layers, converter.block_names, converter.block)
    names = {}
    for layer, module in pairs:
        names.update(layer_tensor_names(layer, converter.task_prefix + module))
    head = {path.replace("mlm_head", "generator_head", 1): module
            for path, module in MASKED_LM_HEADS["electra"].items()}
    config = dict(huggingface_config("electra", discriminator, pad_id), architectures=["ElectraForMaskedLM"],
                  hidden_size=model.generator_hidden_dim, num_attention_heads=model.generator_num_heads,
                  intermediate_size=model.generator_intermediate_dim, num_hidden_layers=model.generator_num_layers)
    tensors = {**stored_tensors(model, names), **_head_tensors(model, head)}
    projections = [d for d in (discriminator.embeddings.projection, model.generator_projection) if d is not None]
    if projections and config["embedding_size"] == config["hidden_size"]:
        raise ValueError(f"generator_hidden_dim={model.generator_hidden_dim}: ElectraForMaskedLM has no projection "
                         "when it equals the embedding width, and kbert's generator projects (through the "
                         "discriminator's E→H projection).")
    if projections:
        tensors.update(_composed_projection(projections, converter.task_prefix + "embeddings_project"))
    return config, tensors


def _composed_projection(denses, module):
    """One `Linear`'s tensors for Dense layers applied in turn (kbert's generator reads the embeddings through
    the discriminator's E→H projection, then its own H→G: transformers' generator has one E→G)."""
    kernel, bias = None, None
    for dense in denses:
        k, b = (np.asarray(keras.ops.convert_to_numpy(v), np.float64) for v in (dense.kernel, dense.bias))
        kernel, bias = (k, b) if kernel is None else (kernel @ k, bias @ k + b)
    return {f"{module}.weight": np.ascontiguousarray(kernel.T, np.float32), f"{module}.bias": bias.astype(np.float32)}


def _electra_discriminator(model, pad_id):
    """`(config, tensors)` of an `ElectraPretrainer`'s discriminator as `ElectraForPreTraining`."""
    config, tensors = _export(model.discriminator, "electra", pad_id)
    head = {"discriminator_dense": "discriminator_predictions.dense",
            "discriminator_output": "discriminator_predictions.dense_prediction"}
    tensors = {**_prefixed(tensors, "electra."), **_head_tensors(model, head)}
    return dict(config, architectures=["ElectraForPreTraining"]), tensors


def export_backbone(backbone, tokenizer, families):
    """`(model_type, config, tensors)` of `backbone` as the first of its families in `families` that holds it."""
    model_types = [model_type for model_type in backbone_model_types(backbone) if model_type in families]
    if not model_types:
        raise ValueError(f"A {backbone_model_types(backbone)[0]} {type(backbone).__name__} has no counterpart here; "
                         f"the families: {', '.join(families)}.")
    config, tensors = _first_export(backbone, model_types, _pad_id(tokenizer, backbone))
    return config["model_type"], config, tensors


def _check_folder(folder):
    if os.path.exists(folder) and (not os.path.isdir(folder) or os.listdir(folder)):
        raise ValueError(f"{folder} is not an empty folder; give a new one.")


def write_folder(folder, config, tensors, tokenizer, sequence_length):
    from safetensors.numpy import save_file

    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    if tokenizer is not None:
        write_tokenizer(tokenizer, folder, config["model_type"], sequence_length)


def to_huggingface(model, folder):
    """Write `model` as a Hugging Face folder: `config.json`, `model.safetensors` and its tokenizer's files.

    What becomes of each kbert model (`architectures` in `config.json`):

    - a backbone: `BertModel`, `RobertaModel`, `AlbertModel`, `ElectraModel`,
      `DistilBertModel`, `BigBirdModel`, `LongformerModel`, `XLNetModel`, or
      `RobertaPreLayerNormModel` for pre-LN encoders (`normalize_first=True`,
      the main job's); `GPT2LMHeadModel`, `T5ForConditionalGeneration` and
      `BartForConditionalGeneration` for GPT-2, T5 and BART, whose outputs
      include their logits (as do `CausalLM` and `Seq2SeqLM`);
    - `TextClassifier`, `TokenClassifier`, `SpanQuestionAnswering`,
      `MultipleChoice`: the family's `…ForSequenceClassification`,
      `…ForTokenClassification`, `…ForQuestionAnswering`, `…ForMultipleChoice`,
      with `id2label`/`label2id` from the preprocessor's label names;
    - `BertPretrainer`: `…ForMaskedLM` without a pair head, `BertForPreTraining`
      (NSP) or `AlbertForPreTraining` (SOP) with one; `XLNetPretrainer`:
      `XLNetLMHeadModel`; `ElectraPretrainer`: two folders in `folder`,
      `discriminator` (`ElectraForPreTraining`) and `generator` (`ElectraForMaskedLM`).

    The tokenizer is the model's `preprocessor`'s; a model without one gets
    the weights and config only, with a warning.

    Args:
        model: a kbert backbone, task model or pretrainer (as above).
        folder: a new or empty folder.

    Returns:
        The list of folders written (two for an `ElectraPretrainer`).

    Raises:
        ValueError: `folder` is not empty; the model (ELMo, a pretrainer whose
            objective has no head class) or one of its settings has no
            transformers class; the message names it.

    Example:
    ```python
    kbert.to_huggingface(classifier, "exported")
    transformers.pipeline("text-classification", model="exported")("Shares rose.")
    ```
    """
    folder = os.fspath(folder)
    if not isinstance(model, _EXPORTED):
        raise _refused(model)
    if importlib.util.find_spec("safetensors") is None:
        raise ValueError("kbert.to_huggingface needs safetensors, which is not installed: pip install safetensors "
                         "(or pip install 'kbert[export]').")
    _check_folder(folder)
    preprocessor = getattr(model, "preprocessor", None)
    tokenizer = getattr(preprocessor, "tokenizer", None)
    length = getattr(preprocessor, "sequence_length", None)
    if isinstance(model, ElectraPretrainer):
        pad_id = _pad_id(tokenizer, model.discriminator)
        parts = {"discriminator": _electra_discriminator(model, pad_id), "generator": _electra_generator(model, pad_id)}
        folders = {name: os.path.join(folder, name) for name in parts}
    else:
        backbone = model if isinstance(model, Backbone) else model.backbone
        pad_id = _pad_id(tokenizer, backbone)
        parts = {"": _first_export(model, backbone_model_types(backbone), pad_id)}
        folders = {"": folder}
    for name, (config, tensors) in parts.items():
        write_folder(folders[name], config, tensors, tokenizer, length)
    if tokenizer is None:
        warnings.warn(f"{type(model).__name__} has no preprocessor: {folder} holds the weights and config.json "
                      "but no tokenizer files.", stacklevel=2)
    return list(folders.values())
