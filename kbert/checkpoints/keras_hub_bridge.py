"""Weights between kbert and KerasHub: `to_keras_hub(model, preset_dir)` and `from_keras_hub(backbone_or_preset)`.

Both go through the Hugging Face layout, which each side already reads:
kbert writes it (`to_huggingface`'s tables) and KerasHub's own loader reads
it into its backbone (`keras_hub.models.Backbone.from_preset` on a
Hugging Face folder). For the way back, kbert learns where KerasHub puts
each Hugging Face number by loading a folder whose values are their own
indices (each float32's bits hold its index; KerasHub's loader only slices,
transposes and reshapes, which keep the bits), then reads the real
backbone's variables back into the Hugging Face tensors and imports those
with `from_huggingface`.

KerasHub 0.32's backbones fix some settings that kbert lets vary; a model
whose setting differs computes another function there and is refused by name
(`KERAS_HUB_FAMILIES`): its BERT and ALBERT use tanh GELU (`"gelu_approximate"`,
where Google's BERT uses the exact one), its RoBERTa has no segment
table (kbert's one-row table is folded into the positions on the way out),
its GPT-2 a feed-forward width of 4H, its BART as many decoder as encoder
layers. ELECTRA and T5 have KerasHub backbones but no Hugging Face loader
in KerasHub 0.32: their bridge maps the variables directly
(`keras_hub_direct.py`). KerasHub's XLNet is refused: its relative position
table is right for a batch of one sequence only (outputs 1e-2 apart for more).
"""

import json
import os
import tempfile

import keras
import numpy as np

from kbert.checkpoints.huggingface import from_huggingface
from kbert.checkpoints.huggingface_configs import backbone_model_types
from kbert.checkpoints.huggingface_export import export_backbone, write_folder
from kbert.checkpoints.keras_hub_direct import (DIRECT_FAMILIES, from_keras_hub_backbone, keras_hub_tokenizer,
                                               to_keras_hub_backbone)
from kbert.checkpoints.registry import converter_for
from kbert.models.backbone import Backbone
from kbert.models.bart import BART
from kbert.models.encoder import Encoder
from kbert.models.gpt2 import END_ID, GPT2

# model_type -> (KerasHub backbone class, the kbert settings it fixes)
KERAS_HUB_FAMILIES = {
    "bert": ("BertBackbone", {"activation": "gelu_approximate", "layer_norm_epsilon": 1e-12, "num_segments": 2,
                              "use_pooler": True}),
    "roberta": ("RobertaBackbone", {"activation": "gelu", "layer_norm_epsilon": 1e-5, "num_segments": 1,
                                    "position_offset": 2}),
    "albert": ("AlbertBackbone", {"activation": "gelu_approximate", "layer_norm_epsilon": 1e-12, "use_pooler": True}),
    "distilbert": ("DistilBertBackbone", {"activation": "gelu", "layer_norm_epsilon": 1e-12}),
    "gpt2": ("GPT2Backbone", {"layer_norm_epsilon": 1e-5}),
    "bart": ("BartBackbone", {"activation": "gelu", "layer_norm_epsilon": 1e-5, "scale_embedding": False}),
}
# The KerasHub backbones of kbert's families with no bridge, by model_type: (class, how it differs).
UNBRIDGED = {"xlnet": ("XLNetBackbone", "its relative position table is right for one sequence only (it "
                                        "reshapes, not transposes, the (length, batch, hidden) table), so with the "
                                        "same weights a batch of two or more is 1e-2 off XLNet's outputs")}
# Sizes a KerasHub backbone ties to others: (kbert attribute, the value it must have).
_TIED_SIZES = {"gpt2": ("intermediate_dim", lambda b: 4 * b.hidden_dim),
               "bart": ("num_decoder_layers", lambda b: b.num_layers)}
_BASE = 0x00800000  # the smallest normal float32's bits: every index code is a finite, normal float


def _common(config):
    return {key: config[key] for key in ("vocabulary_size", "num_layers", "num_heads", "hidden_dim",
                                         "intermediate_dim", "dropout")}


def _encoder_arguments(model_type, config):
    fixed = {key: value for key, value in KERAS_HUB_FAMILIES[model_type][1].items()}
    arguments = dict(_common(config), max_positions=config["max_sequence_length"], **fixed)
    if model_type == "roberta":
        arguments["max_positions"] += fixed["position_offset"]
    if model_type == "albert":
        if (config["num_groups"], config["num_inner_repetitions"]) != (1, 1):
            raise ValueError(f"num_groups={config['num_groups']}, num_inner_repetitions="
                             f"{config['num_inner_repetitions']}: kbert shares one block (1, 1).")
        arguments.update(embedding_dim=config["embedding_dim"], share_layers=True, num_segments=config["num_segments"])
    if model_type == "distilbert":
        arguments.update(num_segments=0, use_pooler=False)
    return Encoder(**arguments)


def _kbert_backbone(model_type, config):
    """A kbert backbone (random weights) with the arguments of the KerasHub backbone `config`."""
    if model_type == "gpt2":
        end_id = min(END_ID, config["vocabulary_size"] - 1)  # KerasHub's config keeps no end id
        return GPT2(**_common(config), max_positions=config["max_sequence_length"], end_id=end_id)
    if model_type == "bart":
        return BART(**_common(config), max_positions=config["max_sequence_length"])
    return _encoder_arguments(model_type, config)


def _unbridged(model_type):
    name, difference = UNBRIDGED[model_type]
    bridged = [c for c, _ in KERAS_HUB_FAMILIES.values()] + [d.class_name for d in DIRECT_FAMILIES.values()]
    return ValueError(f"KerasHub 0.32's {name} computes another function: {difference}; bridged: "
                      + ", ".join(bridged) + ".")


def _model_type(keras_hub_backbone):
    name = type(keras_hub_backbone).__name__
    for model_type, (class_name, _) in UNBRIDGED.items():
        if name == class_name:
            raise _unbridged(model_type)
    for model_type, (class_name, _) in KERAS_HUB_FAMILIES.items():
        if name == class_name:
            return model_type
    for model_type, direct in DIRECT_FAMILIES.items():
        if name == direct.class_name:
            return model_type
    raise ValueError(f"A {name} is no KerasHub backbone of a family kbert has.")


def _huggingface_folder(backbone, folder, tokenizer=None, coded=False):
    """Write `backbone` as a Hugging Face folder for KerasHub's loader (index codes as values if `coded`)."""
    family = backbone_model_types(backbone)[0]
    if family in UNBRIDGED:
        raise _unbridged(family)
    model_type, config, tensors = export_backbone(backbone, tokenizer, KERAS_HUB_FAMILIES)
    class_name, fixed = KERAS_HUB_FAMILIES[model_type]
    if model_type in _TIED_SIZES:
        argument, size = _TIED_SIZES[model_type]
        fixed = {**fixed, argument: size(backbone)}
    for argument, value in fixed.items():
        if getattr(backbone, argument) != value:
            raise ValueError(f"{argument}={getattr(backbone, argument)!r}: KerasHub's {class_name} computes "
                             f"{argument}={value!r}.")
    if isinstance(backbone, Encoder):  # KerasHub's loaders name an encoder's tensors as its task classes do
        tensors = {converter_for(model_type).task_prefix + name: array for name, array in tensors.items()}
    if model_type == "roberta":  # KerasHub's RoBERTa has no segment table: its one row joins the positions
        segment = "roberta.embeddings.token_type_embeddings.weight"
        positions = "roberta.embeddings.position_embeddings.weight"
        tensors[positions] = tensors[positions] + tensors[segment]
        tensors[segment] = np.zeros_like(tensors[segment])
    if coded:
        start = 0
        for name in sorted(tensors):
            size = tensors[name].size
            codes = np.arange(_BASE + start, _BASE + start + size, dtype=np.uint32)
            tensors[name] = codes.view(np.float32).reshape(tensors[name].shape)
            start += size
    write_folder(folder, config, tensors, tokenizer, None)
    return model_type, tensors


def _load_keras_hub(preset):
    import keras_hub

    return keras_hub.models.Backbone.from_preset(preset, dtype="float32")


def to_keras_hub(model, preset_dir):
    """Write the backbone of `model` as a KerasHub preset that `keras_hub.models.Backbone.from_preset` loads.

    The preset's backbone gives the kbert backbone's outputs. The tokenizer
    goes along when the model has one (its `preprocessor`) and KerasHub has
    the same kind for the family (ELECTRA: WordPiece; T5: SentencePiece; the
    others: what KerasHub reads from a Hugging Face folder). A kbert ELECTRA
    without a pooler (as released) leaves KerasHub's `pooled_dense` as built.

    Raises:
        ValueError: a family KerasHub has no bridged backbone for, or a
            setting its backbone fixes otherwise (named), or a non-empty folder.

    Example:
    ```python
    kbert.to_keras_hub(kbert.models.gpt2_base(), "gpt2_preset")
    keras_hub.models.Backbone.from_preset("gpt2_preset")
    ```
    """
    backbone = model if isinstance(model, Backbone) else getattr(model, "backbone", None)
    if not isinstance(backbone, Backbone):
        raise ValueError(f"{type(model).__name__} wraps no kbert backbone to write as a KerasHub preset.")
    preset_dir = os.fspath(preset_dir)
    if os.path.exists(preset_dir) and os.listdir(preset_dir):
        raise ValueError(f"{preset_dir} is not an empty folder; give a new one.")
    tokenizer = getattr(getattr(model, "preprocessor", None), "tokenizer", None)
    family = backbone_model_types(backbone)[0]
    if family in DIRECT_FAMILIES:
        to_keras_hub_backbone(family, backbone).save_to_preset(preset_dir)
        if tokenizer is not None and keras_hub_tokenizer(family, tokenizer) is not None:
            keras_hub_tokenizer(family, tokenizer).save_to_preset(preset_dir)
        return preset_dir
    with tempfile.TemporaryDirectory() as folder:
        _huggingface_folder(backbone, folder, tokenizer)
        keras_hub_backbone = _load_keras_hub(folder)
        keras_hub_backbone.save_to_preset(preset_dir)
        if tokenizer is not None:
            import keras_hub

            keras_hub.models.Tokenizer.from_preset(folder).save_to_preset(preset_dir)
    return preset_dir


def _same_config(coded, given):
    ignored = ("name", "dtype", "trainable")
    ours = {k: v for k, v in coded.get_config().items() if k not in ignored}
    for key, value in given.get_config().items():
        if key not in ignored and ours.get(key) != value:
            raise ValueError(f"{type(given).__name__} {key}={value!r}: kbert's counterpart gives {ours.get(key)!r}.")


def _kbert_tokenizer(preset):
    """kbert's tokenizer of the same kind as the KerasHub preset's (WordPiece, SentencePiece, byte-level BPE)."""
    import keras_hub

    from kbert.text import BytePairTokenizer, SentencePieceTokenizer, WordPieceTokenizer

    theirs = keras_hub.models.Tokenizer.from_preset(preset)
    if isinstance(theirs, keras_hub.tokenizers.WordPieceTokenizer):
        return WordPieceTokenizer(theirs.get_vocabulary(), lowercase=theirs.lowercase,
                                  strip_accents=bool(theirs.strip_accents), split_on_cjk=theirs.split_on_cjk,
                                  unknown_token=theirs.oov_token)
    if isinstance(theirs, keras_hub.tokenizers.SentencePieceTokenizer):
        return SentencePieceTokenizer(theirs.proto)
    if isinstance(theirs, keras_hub.tokenizers.BytePairTokenizer):
        return BytePairTokenizer(dict(theirs.vocabulary), list(theirs.merges), add_prefix_space=theirs.add_prefix_space)
    raise ValueError(f"A {type(theirs).__name__} is no kind of tokenizer kbert has (WordPiece, SentencePiece, "
                     "byte-level BPE).")


def from_keras_hub(backbone_or_preset, with_tokenizer=False):
    """The kbert backbone of a KerasHub backbone (or preset folder) of a bridged family, with its weights.

    Args:
        backbone_or_preset: a KerasHub backbone, or a preset folder (or name)
            that `keras_hub.models.Backbone.from_preset` loads.
        with_tokenizer: also read the preset's tokenizer as kbert's of the same
            kind (`WordPieceTokenizer`, `SentencePieceTokenizer`,
            `BytePairTokenizer`) and return `(backbone, tokenizer)`; needs a
            preset, not a backbone.

    Raises:
        ValueError: a backbone of a family with no bridge, a setting kbert's
            counterpart computes otherwise (named), or, with `with_tokenizer`,
            a backbone object or a tokenizer of another kind.

    Example:
    ```python
    backbone = kbert.from_keras_hub(keras_hub.models.Backbone.from_preset("bert_tiny_en_uncased"))
    ```

    With the tokenizer, from a preset that `to_keras_hub` wrote:
    >>> import tempfile
    >>> from kbert.text import TextPreprocessor, WordPieceTokenizer
    >>> tokenizer = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat"])
    >>> small = dict(vocabulary_size=8, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16)
    >>> encoder = kbert.models.build("bert_tiny", **small, max_positions=16, activation="gelu_approximate")
    >>> classifier = kbert.tasks.TextClassifier(encoder, 2, preprocessor=TextPreprocessor(tokenizer, 8))
    >>> preset = kbert.to_keras_hub(classifier, tempfile.mkdtemp())
    >>> backbone, back = kbert.from_keras_hub(preset, with_tokenizer=True)
    >>> type(backbone).__name__, back(["the cat sat"])[0] == tokenizer(["the cat sat"])[0]
    ('Encoder', True)
    """
    if with_tokenizer:
        if not isinstance(backbone_or_preset, (str, os.PathLike)):
            raise ValueError("with_tokenizer=True reads the tokenizer from a preset: give its folder, not a backbone.")
        return from_keras_hub(backbone_or_preset), _kbert_tokenizer(os.fspath(backbone_or_preset))
    given = backbone_or_preset
    if isinstance(given, (str, os.PathLike)):
        given = _load_keras_hub(os.fspath(given))
    model_type = _model_type(given)
    if model_type in DIRECT_FAMILIES:
        return from_keras_hub_backbone(model_type, given)
    backbone = _kbert_backbone(model_type, given.get_config())
    with tempfile.TemporaryDirectory() as folder:
        _, tensors = _huggingface_folder(backbone, os.path.join(folder, "coded"), coded=True)
        coded = _load_keras_hub(os.path.join(folder, "coded"))
        _same_config(coded, given)
        names = sorted(tensors)
        sizes = [tensors[name].size for name in names]
        flat = np.zeros(sum(sizes), np.float32)
        for code, value in zip(coded.weights, given.weights):
            indices = keras.ops.convert_to_numpy(code.value).view(np.uint32).ravel().astype(np.int64) - _BASE
            flat[indices] = np.asarray(keras.ops.convert_to_numpy(value.value), np.float32).ravel()
        pieces = np.split(flat, np.cumsum(sizes)[:-1])
        decoded = {name: piece.reshape(tensors[name].shape) for name, piece in zip(names, pieces)}
        with open(os.path.join(folder, "coded", "config.json")) as f:
            config = json.load(f)
        write_folder(os.path.join(folder, "decoded"), config, decoded, None, None)
        return from_huggingface(os.path.join(folder, "decoded"))
