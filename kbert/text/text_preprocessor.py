"""What a task model needs to read and write text: its tokenizer, its packing and its label names.

A `TextPreprocessor` rides on a kbert task model (`model.preprocessor`,
see `kbert.training.Task`) and is saved inside its `.keras` file: its
config holds the tokenizer's whole vocabulary (`get_config` of
`WordPieceTokenizer`, `SentencePieceTokenizer`, `BytePairTokenizer`), so
loading the one file is enough. The task models' text-level calls
(`TextClassifier.classify`, `TokenClassifier.tag`, ...) use it to turn
strings into their inputs and their outputs back into text.

The tokenizers are TensorFlow ops. Under JAX or PyTorch, `encode`,
`encode_with_offsets` and `token_ids` of a WordPiece vocabulary run on the
host instead, with the same ids, offsets and packing (`HostWordPiece`,
`pair_packing.pack_rows`), so that a process that only predicts
(`kbert predict`) never imports TensorFlow.
"""

import importlib
import importlib.util

import numpy as np

from kbert.backend.imports import lazy_import
from kbert.backend.ops import tokenizes_on_host
from kbert.text.pair_packing import pack_rows

tf = lazy_import("tensorflow")
# Hugging Face's `tokenizers`, for the host path (`HostWordPiece`); the tokenizer's TensorFlow ops without it.
_HAS_TOKENIZERS = importlib.util.find_spec("tokenizers") is not None

_TOKENIZERS = ("WordPieceTokenizer", "SentencePieceTokenizer", "BytePairTokenizer")
_MODULES = {
    "WordPieceTokenizer": "kbert.text.word_piece_tokenizer",
    "SentencePieceTokenizer": "kbert.text.sentence_piece_tokenizer",
    "BytePairTokenizer": "kbert.text.byte_pair_tokenizer",
}


def _special_ids(tokenizer):
    """`(start, end, pad)`: `[CLS]`/`[SEP]` (WordPiece, ALBERT) or `<s>`/`</s>` (RoBERTa's BPE)."""
    start = getattr(tokenizer, "cls_id", None)
    end = getattr(tokenizer, "sep_id", None)
    if start is None or end is None:
        start, end = getattr(tokenizer, "start_id", None), getattr(tokenizer, "end_id", None)
    if start is None or end is None or getattr(tokenizer, "pad_id", None) is None:
        raise ValueError(f"{type(tokenizer).__name__} has no start, end or padding token to pack "
                         "[CLS] A [SEP] B [SEP] with.")
    return start, end, tokenizer.pad_id


class TextPreprocessor:
    """A tokenizer, a sequence length and label names: text to model inputs and back.

    Args:
        tokenizer: a `kbert.text` tokenizer (`WordPieceTokenizer`,
            `SentencePieceTokenizer` or `BytePairTokenizer`).
        sequence_length: the length of every packed row (longer texts are cut).
        labels: the label names (class `i` is `labels[i]`), for classifiers and taggers.
        no_answer_threshold: for question answering (SQuAD 2.0), the null-score
            difference above which the answer is "" (`None`: always a span).

    Example:

    >>> from kbert.text import WordPieceTokenizer
    >>> tokenizer = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad"])
    >>> preprocessor = TextPreprocessor(tokenizer, 6, labels=["negative", "positive"])
    >>> preprocessor.encode(["good", "bad good"])["token_ids"].tolist()
    [[2, 5, 3, 0, 0, 0], [2, 6, 5, 3, 0, 0]]
    >>> TextPreprocessor.from_config(preprocessor.get_config()).labels
    ['negative', 'positive']
    """

    def __init__(self, tokenizer, sequence_length=128, labels=None, no_answer_threshold=None):
        if type(tokenizer).__name__ not in _TOKENIZERS:
            raise ValueError(f"tokenizer must be one of kbert.text's {', '.join(_TOKENIZERS)}; "
                             f"received {type(tokenizer).__name__}.")
        if int(sequence_length) < 3:
            raise ValueError(f"sequence_length must be at least 3; received {sequence_length}.")
        self.tokenizer = tokenizer
        self.sequence_length = int(sequence_length)
        self.labels = None if labels is None else [str(label) for label in labels]
        self.no_answer_threshold = None if no_answer_threshold is None else float(no_answer_threshold)

    def get_config(self):
        """JSON: the tokenizer's class and config (its vocabulary inline), and the other arguments."""
        return {
            "tokenizer": {"class_name": type(self.tokenizer).__name__, "config": self.tokenizer.get_config()},
            "sequence_length": self.sequence_length,
            "labels": self.labels,
            "no_answer_threshold": self.no_answer_threshold,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        tokenizer = config.pop("tokenizer")
        if tokenizer.get("class_name") not in _MODULES:
            raise ValueError(f"Unknown tokenizer class {tokenizer.get('class_name')!r} in a preprocessor config.")
        module = importlib.import_module(_MODULES[tokenizer["class_name"]])
        return cls(getattr(module, tokenizer["class_name"]).from_config(tokenizer["config"]), **config)

    def label_name(self, index):
        """The name of class `index`: the training label, or Hugging Face's `LABEL_{index}`."""
        if self.labels is not None and index < len(self.labels):
            return self.labels[index]
        return f"LABEL_{index}"

    def host_tokenizer(self):
        """The `HostWordPiece` that `encode`, `encode_with_offsets` and `token_ids` tokenize with, or `None`
        where they use the tokenizer's TensorFlow ops: on TensorFlow (`kbert.backend.ops.tokenizes_on_host`),
        for SentencePiece and BPE, without `tokenizers`."""
        if not (tokenizes_on_host() and _HAS_TOKENIZERS and type(self.tokenizer).__name__ == "WordPieceTokenizer"):
            return None
        if getattr(self, "_host", (None,))[0] is not self.tokenizer:  # built once per tokenizer
            from kbert.text.host_word_piece import HostWordPiece

            self._host = (self.tokenizer, HostWordPiece(self.tokenizer))
        return self._host[1]

    def token_ids(self, texts):
        """Each text's token ids (a list of lists), no special tokens added."""
        host = self.host_tokenizer()
        if host is not None:
            return host(texts)
        return [list(ids) for ids in self.tokenizer.tokenize(tf.constant(texts, tf.string)).to_list()]

    def source_ids(self, texts):
        """Each text framed for an encoder-decoder: `<s> text </s>` (BART's BPE) or `text </s>`
        (T5's SentencePiece), cut to `sequence_length`; a list of id lists."""
        end = getattr(self.tokenizer, "end_id", None)
        if end is None:
            raise ValueError(f"{type(self.tokenizer).__name__} has no end token; sources need one.")
        rows = self.token_ids(texts)
        if getattr(self.tokenizer, "add_end", False):
            rows = [row[:-1] for row in rows]
        start = getattr(self.tokenizer, "start_id", None)
        head = [] if start is None else [start]
        room = self.sequence_length - len(head) - 1
        return [head + row[:room] + [end] for row in rows]

    @staticmethod
    def pad(rows, pad_id, left=False, length=None):
        """`(token_ids, padding_mask)`: id lists padded to `length` (None: the longest), on the left for prompts.

        >>> ids, mask = TextPreprocessor.pad([[5, 6], [7]], 0, left=True)
        >>> ids.tolist(), mask.tolist()
        ([[5, 6], [0, 7]], [[1, 1], [0, 1]])
        """
        longest = max(len(row) for row in rows) if length is None else int(length)
        token_ids = np.full((len(rows), longest), pad_id, np.int32)
        padding_mask = np.zeros((len(rows), longest), np.int32)
        for index, row in enumerate(rows):
            place = slice(longest - len(row), longest) if left else slice(0, len(row))
            token_ids[index, place] = row
            padding_mask[index, place] = 1
        return token_ids, padding_mask

    def packer(self):
        """The `SegmentPacker` of `encode`: `[CLS] A [SEP] (B [SEP])` rows of `sequence_length`."""
        from kbert.text.segment_packer import SegmentPacker

        return SegmentPacker(self.sequence_length, *_special_ids(self.tokenizer))

    def encode(self, texts, pairs=None):
        """`[CLS] A [SEP] (B [SEP])` rows of `texts` (and `pairs`): a dict of int32 NumPy arrays
        `token_ids`, `segment_ids`, `padding_mask` of shape `(len(texts), sequence_length)`.

        The rows of `packer()`, which cuts a pair round-robin; `pack_rows` packs the same on the host."""
        if self.host_tokenizer() is not None:
            second = None if pairs is None else self.token_ids(pairs)
            return pack_rows(self.token_ids(texts), second, self.sequence_length, *_special_ids(self.tokenizer))
        packer = self.packer()
        first = self.tokenizer.tokenize(tf.constant(texts, tf.string))
        second = None if pairs is None else self.tokenizer.tokenize(tf.constant(pairs, tf.string))
        return {name: value.numpy() for name, value in packer(first, second).items()}

    def encode_with_offsets(self, texts):
        """`(inputs, offsets)`: `encode(texts)`, and each token's `[start, end)` character span
        in its text, int32 `(len(texts), sequence_length, 2)`, `(-1, -1)` on special and padding tokens."""
        if not hasattr(self.tokenizer, "tokenize_with_offsets"):
            raise ValueError(f"{type(self.tokenizer).__name__} gives no character offsets; tagging needs "
                             "a WordPiece or SentencePiece tokenizer.")
        start, end, pad = _special_ids(self.tokenizer)
        host = self.host_tokenizer()
        if host is not None:
            ids, starts, ends = host.tokenize_with_offsets(texts)
        else:
            ids, starts, ends = (ragged.to_list() for ragged in
                                 self.tokenizer.tokenize_with_offsets(tf.constant(texts, tf.string)))
        room = self.sequence_length - 2
        inputs = {name: np.zeros((len(texts), self.sequence_length), np.int32)
                  for name in ("token_ids", "segment_ids", "padding_mask")}
        inputs["token_ids"][:] = pad
        offsets = np.full((len(texts), self.sequence_length, 2), -1, np.int32)
        for row, (row_ids, row_starts, row_ends) in enumerate(zip(ids, starts, ends)):
            count = min(len(row_ids), room)
            inputs["token_ids"][row, : count + 2] = [start, *row_ids[:count], end]
            inputs["padding_mask"][row, : count + 2] = 1
            offsets[row, 1 : count + 1, 0] = row_starts[:count]
            offsets[row, 1 : count + 1, 1] = row_ends[:count]
        return inputs, offsets

    def token_string(self, token_id):
        """The vocabulary entry of one id (`##s`, `▁the`, `Ġthe`)."""
        lookup = getattr(self.tokenizer, "id_to_token", None) or self.tokenizer.id_to_piece
        token = lookup(int(token_id))
        return token.numpy().decode("utf-8") if hasattr(token, "numpy") else token

    def decode(self, rows, end_id):
        """The text of each row of generated ids, cut before its first `end_id` (the model's)."""
        texts = []
        for row in rows:
            row = [int(i) for i in row]
            texts.append(self._detokenize(row[: row.index(end_id)] if end_id in row else row))
        return texts

    def _detokenize(self, ids):
        if type(self.tokenizer).__name__ == "WordPieceTokenizer":
            return self.tokenizer.detokenize(ids)
        if not ids:
            return ""
        if type(self.tokenizer).__name__ == "BytePairTokenizer":
            return self.tokenizer.detokenize([ids])[0].numpy().decode("utf-8", errors="replace")
        return self.tokenizer.detokenize(tf.constant(ids, tf.int32)).numpy().decode("utf-8", errors="replace")
