"""Text to model inputs: WordPiece, SentencePiece and byte-level BPE tokenizers, vocabulary
learning, segment packing, ELMo's character ids.

The tokenizers and the packer run on TensorFlow and tensorflow-text whatever
the Keras backend (the text pipeline lives in `tf.data`); they are imported on
first use, so `import kbert` and `import kbert.text` do not import TensorFlow.

>>> from kbert.text import WordPieceTokenizer, SegmentPacker
>>> tokenizer = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "!"])
>>> packer = SegmentPacker(6, start_id=tokenizer.cls_id, end_id=tokenizer.sep_id)
>>> packer(tokenizer.tokenize("Hello!"))["token_ids"].numpy().tolist()
[2, 5, 6, 3, 0, 0]
"""

import importlib

# NumPy only: imported now (the function `character_ids` must shadow its module).
from kbert.text.character_ids import MAX_CHARACTERS, character_ids, split_words, word_character_ids

# Where each TensorFlow-backed public name lives; imported on first use, so
# `kbert.text.pair_packing` and `kbert.text.character_ids` need no TensorFlow.
_HOMES = {
    "BytePairTokenizer": "byte_pair_tokenizer",
    "SegmentPacker": "segment_packer",
    "SentencePieceTokenizer": "sentence_piece_tokenizer",
    "TextPreprocessor": "text_preprocessor",
    "WordPieceTokenizer": "word_piece_tokenizer",
    "learn_byte_pair_vocabulary": "byte_pair_tokenizer",
    "learn_word_piece_vocabulary": "word_piece_vocabulary",
    "train_sentence_piece": "sentence_piece_tokenizer",
}


def __getattr__(name):
    if name not in _HOMES:
        raise AttributeError(f"module 'kbert.text' has no attribute {name!r}")
    return getattr(importlib.import_module(f"kbert.text.{_HOMES[name]}"), name)


__all__ = [
    "BytePairTokenizer",
    "SegmentPacker",
    "SentencePieceTokenizer",
    "character_ids",
    "TextPreprocessor",
    "WordPieceTokenizer",
    "learn_byte_pair_vocabulary",
    "learn_word_piece_vocabulary",
    "split_words",
    "train_sentence_piece",
    "word_character_ids",
]
