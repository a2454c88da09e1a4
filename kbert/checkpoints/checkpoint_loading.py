"""What `kbert finetune --checkpoint` takes, loaded as a backbone and its tokenizer.

- a Hugging Face folder: `config.json`, the weights, and `vocab.txt`
  (WordPiece; lower-cased unless `tokenizer_config.json` says
  `do_lower_case: false`), `spiece.model` (SentencePiece) or `vocab.json`
  with `merges.txt` (byte-level BPE: RoBERTa);
- a kbert `model.keras` (a backbone, or a pretrainer or task that wraps one,
  as `kbert pretrain` writes), or the run folder that holds it: its tokenizer is the one saved inside it (its
  `preprocessor`), or, for older files, the `vocab.txt` beside it;
- a builder name (`bert_mini`, `t5_small`, ...): random initialisation, the
  from-scratch control, sized to the vocabulary.

`vocabulary` (a `vocab.txt` or `spiece.model`) overrides the tokenizer found
beside the checkpoint; for a builder name without one, a vocabulary is
learned from the training texts: WordPiece for an encoder, SentencePiece
(T5's ids: pad 0, end 1, unknown 2) for a T5, and for an XLNet with its
`<cls>` and `<sep>` pieces.
"""

import json
import os

import keras

from kbert.models.backbone import Backbone

LEARNED_VOCABULARY_SIZE = 8000
# The pieces a SentencePiece vocabulary learned for an XLNet adds: its summary token and separator.
XLNET_PIECES = ("<cls>", "<sep>")


def _tokenizer(path, lowercase=True):
    from kbert.text import SentencePieceTokenizer, WordPieceTokenizer

    if not os.path.isfile(path):
        raise FileNotFoundError(f"--vocabulary file not found: {path}")
    if path.endswith(".model"):
        return SentencePieceTokenizer(path)
    return WordPieceTokenizer(path, lowercase=lowercase)


def _lowercase(folder):
    config_file = os.path.join(folder, "tokenizer_config.json")
    if not os.path.isfile(config_file):
        return True
    with open(config_file, encoding="utf-8") as f:
        return bool(json.load(f).get("do_lower_case", True))


def _vocabulary_beside(folder, checkpoint):
    for name in ("vocab.txt", "spiece.model"):
        if os.path.isfile(os.path.join(folder, name)):
            return os.path.join(folder, name)
    raise FileNotFoundError(
        f"No vocab.txt, spiece.model or vocab.json with merges.txt beside {checkpoint}; pass --vocabulary."
    )


def tokenizer_beside(folder):
    """The tokenizer of the vocabulary files in `folder`, or `None` when it has none.

    `vocab.txt` is WordPiece (lower-cased unless `tokenizer_config.json` says
    `do_lower_case: false`), `spiece.model` SentencePiece, `vocab.json` with
    `merges.txt` byte-level BPE (GPT-2, RoBERTa, BART).
    """
    from kbert.text import BytePairTokenizer

    files = {name: os.path.join(folder, name) for name in ("vocab.txt", "spiece.model", "vocab.json", "merges.txt")}
    if os.path.isfile(files["vocab.json"]) and os.path.isfile(files["merges.txt"]):
        return BytePairTokenizer(files["vocab.json"], files["merges.txt"])
    for name in ("vocab.txt", "spiece.model"):
        if os.path.isfile(files[name]):
            return _tokenizer(files[name], _lowercase(folder))
    return None


def _saved_tokenizer(model, vocabulary, checkpoint):
    """The tokenizer saved in `model` (its preprocessor) unless `vocabulary` is given; else the one beside."""
    saved = getattr(model, "preprocessor", None)
    if vocabulary is None and saved is not None:
        return saved.tokenizer
    return _tokenizer(vocabulary or _vocabulary_beside(os.path.dirname(checkpoint) or ".", checkpoint))


def _backbone_of(model, path):
    """The backbone a saved model holds: itself, or the one its pretrainer or task wraps."""
    for candidate in (model, getattr(model, "backbone", None), getattr(model, "discriminator", None),
                      getattr(model, "student", None)):
        if isinstance(candidate, Backbone):
            return candidate
    raise ValueError(f"{path} holds a {type(model).__name__}, which wraps no kbert backbone.")


def _learned_tokenizer(texts, checkpoint):
    """A vocabulary learned from `texts` for the builder `checkpoint`: SentencePiece for a T5 or an
    XLNet (with XLNet's `<cls>` and `<sep>` pieces), WordPiece for the others."""
    from kbert.models import T5_PRESETS, XLNET_PRESETS
    from kbert.text import (SentencePieceTokenizer, WordPieceTokenizer, learn_word_piece_vocabulary,
                            train_sentence_piece)

    if not texts:
        raise ValueError("No vocabulary given and no training text to learn one from.")
    if checkpoint in T5_PRESETS or checkpoint in XLNET_PRESETS:
        control_symbols = XLNET_PIECES if checkpoint in XLNET_PRESETS else ()
        return SentencePieceTokenizer(train_sentence_piece(texts, LEARNED_VOCABULARY_SIZE,
                                                           control_symbols=control_symbols))
    return WordPieceTokenizer(learn_word_piece_vocabulary(texts, LEARNED_VOCABULARY_SIZE), lowercase=True)


def _run_model(checkpoint):
    """The `model.keras` of a kbert run folder (`kbert pretrain` or `finetune` output), else `checkpoint`."""
    saved = os.path.join(checkpoint, "model.keras")
    if os.path.isdir(checkpoint) and os.path.isfile(saved) and not os.path.isfile(os.path.join(checkpoint,
                                                                                               "config.json")):
        return saved
    return checkpoint


def _check_vocabulary(backbone, tokenizer, checkpoint):
    if tokenizer.vocabulary_size > backbone.vocabulary_size:
        raise ValueError(
            f"The vocabulary has {tokenizer.vocabulary_size:,} tokens but {checkpoint} has "
            f"{backbone.vocabulary_size:,} rows in its token table."
        )


def load_checkpoint(checkpoint, vocabulary=None, texts=()):
    """`(backbone, tokenizer)` for `checkpoint`: a folder, a `.keras` file or a builder name.

    Raises:
        FileNotFoundError: a path that does not exist, or no vocabulary beside it.
        ValueError: an unknown builder name, a saved model with no kbert
            backbone, or a vocabulary larger than the model's token table.

    Example:
    >>> backbone, tokenizer = load_checkpoint("bert_tiny", texts=["a small example text"] * 4)
    >>> backbone.vocabulary_size == tokenizer.vocabulary_size
    True
    """
    from kbert.checkpoints.huggingface import from_huggingface
    from kbert.models import build

    checkpoint = _run_model(os.fspath(checkpoint))
    if os.path.isdir(checkpoint):
        backbone = from_huggingface(checkpoint)
        beside = None if vocabulary else tokenizer_beside(checkpoint)
        tokenizer = beside or _tokenizer(vocabulary or _vocabulary_beside(checkpoint, checkpoint),
                                         _lowercase(checkpoint))
    elif checkpoint.endswith(".keras"):
        if not os.path.isfile(checkpoint):
            raise FileNotFoundError(f"--checkpoint file not found: {checkpoint}")
        import kbert.pretraining  # noqa: F401  (registers the pretrainers a saved model may be)
        model = keras.saving.load_model(checkpoint)
        backbone = _backbone_of(model, checkpoint)
        tokenizer = _saved_tokenizer(model, vocabulary, checkpoint)
    elif "/" in checkpoint or os.sep in checkpoint:  # a path, where builder names have none
        raise FileNotFoundError(f"--checkpoint not found: {checkpoint}")
    else:
        learned = vocabulary is None
        tokenizer = _learned_tokenizer(list(texts), checkpoint) if learned else _tokenizer(vocabulary)
        backbone = build(checkpoint, vocabulary_size=tokenizer.vocabulary_size)
    _check_vocabulary(backbone, tokenizer, checkpoint)
    return backbone, tokenizer
