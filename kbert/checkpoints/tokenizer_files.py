"""A kbert tokenizer written as the files transformers' `AutoTokenizer` reads (the inverse of `tokenizer_beside`).

- `WordPieceTokenizer`: `vocab.txt` and a `tokenizer_config.json` naming
  `BertTokenizer` with kbert's lower-casing, accent and CJK settings;
- `SentencePieceTokenizer`: `spiece.model` (T5's, ALBERT's or XLNet's tokenizer class, by family);
- `BytePairTokenizer`: `vocab.json` and `merges.txt` (GPT-2's, BART's or RoBERTa's class).

`write_tokenizer` returns the names of the files it wrote.
"""

import base64
import json
import os

# The transformers tokenizer class of each kind of kbert tokenizer, by model_type (`None`: any other).
_SENTENCE_PIECE_CLASSES = {"t5": "T5Tokenizer", "xlnet": "XLNetTokenizer", None: "AlbertTokenizer"}
_BYTE_PAIR_CLASSES = {"gpt2": "GPT2Tokenizer", "bart": "BartTokenizer", None: "RobertaTokenizer"}
_MERGES_HEADER = "#version: 0.2"


def _write(folder, name, text):
    with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
        f.write(text)


def _word_piece(tokenizer, folder, model_type):
    tokenizer.save_vocabulary(os.path.join(folder, "vocab.txt"))
    return {"tokenizer_class": "BertTokenizer", "do_lower_case": tokenizer.lowercase,
            "strip_accents": tokenizer.strip_accents, "tokenize_chinese_chars": tokenizer.split_on_cjk,
            "unk_token": tokenizer.unknown_token, "pad_token": "[PAD]", "cls_token": "[CLS]",
            "sep_token": "[SEP]", "mask_token": "[MASK]"}, ["vocab.txt"]


def _sentence_piece(tokenizer, folder, model_type):
    with open(os.path.join(folder, "spiece.model"), "wb") as f:
        f.write(base64.b64decode(tokenizer.get_config()["model"]))
    name = _SENTENCE_PIECE_CLASSES.get(model_type, _SENTENCE_PIECE_CLASSES[None])
    config = {"tokenizer_class": name}
    if name == "T5Tokenizer":
        config["extra_ids"] = 0  # kbert's T5 ids are the model's pieces, no sentinels appended
    return config, ["spiece.model"]


def _byte_pair(tokenizer, folder, model_type):
    config = tokenizer.get_config()
    _write(folder, "vocab.json", json.dumps(config["vocabulary"], ensure_ascii=False))
    merges = [m for m in config["merges"] if not m.startswith("#version")]
    _write(folder, "merges.txt", "\n".join([_MERGES_HEADER, *merges]) + "\n")
    name = _BYTE_PAIR_CLASSES.get(model_type, _BYTE_PAIR_CLASSES[None])
    return {"tokenizer_class": name, "add_prefix_space": config["add_prefix_space"]}, ["vocab.json", "merges.txt"]


_WRITERS = {"WordPieceTokenizer": _word_piece, "SentencePieceTokenizer": _sentence_piece,
            "BytePairTokenizer": _byte_pair}


def write_tokenizer(tokenizer, folder, model_type, sequence_length=None):
    """Write `tokenizer`'s files and `tokenizer_config.json` into `folder`; the names written, a list.

    Example:
    >>> import tempfile
    >>> from kbert.text import WordPieceTokenizer
    >>> folder = tempfile.mkdtemp()
    >>> write_tokenizer(WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]), folder, "bert")
    ['vocab.txt', 'tokenizer_config.json']
    """
    kind = type(tokenizer).__name__
    if kind not in _WRITERS:
        raise ValueError(f"A {kind} has no transformers tokenizer files; expected one of {', '.join(_WRITERS)}.")
    config, names = _WRITERS[kind](tokenizer, folder, model_type)
    if sequence_length is not None:
        config["model_max_length"] = int(sequence_length)
    _write(folder, "tokenizer_config.json", json.dumps(config, indent=2))
    return [*names, "tokenizer_config.json"]
