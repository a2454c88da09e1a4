"""GPT-2's byte-level BPE tokenizer (also RoBERTa's and BART's), on keras-hub.

`keras_hub.tokenizers.BytePairTokenizer` runs the merges inside TensorFlow
graphs (so in `tf.data.Dataset.map`, whatever the Keras backend) from the
two files every GPT-2-style checkpoint ships: `vocab.json` (token to id; a
space is the byte `Ġ`) and `merges.txt`. keras-hub imports TensorFlow, so it
is imported on first use, from the text pipeline only.

`learn_byte_pair_vocabulary` writes those two files for a corpus with the
`tokenizers` package (in the `text` extra), BART's special tokens first.
"""

import json
import os

from kbert.backend.imports import lazy_import

tf = lazy_import("tensorflow")
keras_hub = lazy_import("keras_hub")

# The special tokens of RoBERTa's and BART's vocabularies, and GPT-2's one.
SPECIAL_TOKENS = {
    "start": "<s>",
    "pad": "<pad>",
    "end": "</s>",
    "unknown": "<unk>",
    "mask": "<mask>",
    "end_of_text": "<|endoftext|>",
}


# BART's (and RoBERTa's) special tokens, at ids 0 .. 4 of a learned vocabulary.
LEARNED_SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")


def learn_byte_pair_vocabulary(texts, vocabulary_size, directory):
    """Learn a byte-level BPE on `texts`; write `vocab.json` and `merges.txt` to `directory`.

    Ids 0 .. 4 are `<s>`, `<pad>`, `</s>`, `<unk>`, `<mask>` (BART's pad 1
    and end 2), then the 256 byte symbols, then the merges. Returns the two
    paths, as `BytePairTokenizer` takes them.

    Example:
    ```python
    vocabulary, merges = learn_byte_pair_vocabulary(articles, 2000, "runs/bpe")
    tokenizer = BytePairTokenizer(vocabulary, merges)
    ```
    """
    import tokenizers

    minimum = len(LEARNED_SPECIAL_TOKENS) + 256
    if vocabulary_size < minimum:
        raise ValueError(
            f"vocabulary_size must be at least {minimum} (the special tokens and 256 bytes); "
            f"received {vocabulary_size}."
        )
    learner = tokenizers.ByteLevelBPETokenizer()
    learner.train_from_iterator(
        texts, vocab_size=vocabulary_size, min_frequency=2,
        special_tokens=list(LEARNED_SPECIAL_TOKENS), show_progress=False,
    )
    os.makedirs(directory, exist_ok=True)
    vocabulary, merges = learner.save_model(os.fspath(directory))
    return vocabulary, merges


def _vocabulary_table(vocabulary):
    """The token-to-id dict of a `vocab.json` path, or of a dict (checked either way)."""
    if isinstance(vocabulary, dict):
        if not vocabulary:
            raise ValueError("The byte-pair vocabulary is empty.")
        return dict(vocabulary)
    return _read_vocabulary(os.fspath(vocabulary))


def _merge_rules(merges):
    """The merge rules (lines) of a `merges.txt` path, or a list of them."""
    if isinstance(merges, (list, tuple)):
        return list(merges)
    merges = os.fspath(merges)
    if not os.path.isfile(merges):
        raise ValueError(f"Byte-pair merges file not found: {merges!r}.")
    with open(merges, encoding="utf-8") as f:
        return [line.rstrip() for line in f]


def _read_vocabulary(vocabulary):
    if not os.path.isfile(vocabulary):
        raise ValueError(f"Byte-pair vocabulary file not found: {vocabulary!r}.")
    with open(vocabulary, encoding="utf-8") as f:
        try:
            table = json.load(f)
        except json.JSONDecodeError as error:
            raise ValueError(f"{vocabulary} is not a JSON token-to-id table: {error}.") from None
    if not isinstance(table, dict) or not table:
        raise ValueError(f"{vocabulary} must hold a non-empty JSON object of token to id.")
    return table


class BytePairTokenizer:
    """Text to byte-level BPE ids and back, as TensorFlow ops (GPT-2, RoBERTa, BART).

    Args:
        vocabulary: path of `vocab.json`, or its token-to-id dict.
        merges: path of `merges.txt`, or its lines (merge rules) as a list.
        add_prefix_space: tokenize a text as if a space preceded it (so its
            first word gets the same ids as inside a sentence).

    Attributes:
        vocabulary_size: the number of ids.
        start_id, pad_id, end_id, unknown_id, mask_id, end_of_text_id: the ids
            of `<s>`, `<pad>`, `</s>`, `<unk>`, `<mask>` and `<|endoftext|>`,
            or `None` where the vocabulary lacks the token. They are never
            split, so `"<mask>"` in a text is the mask id.

    Example:
    ```python
    tokenizer = BytePairTokenizer("vocab.json", "merges.txt")
    ids = tokenizer.tokenize(["Hello world."])  # tf.RaggedTensor of int32
    tokenizer.detokenize(ids)                     # [b"Hello world."]
    ```
    """

    def __init__(self, vocabulary, merges, add_prefix_space=False):
        table = _vocabulary_table(vocabulary)
        merges = _merge_rules(merges)
        self.vocabulary_size = max(table.values()) + 1
        for name, token in SPECIAL_TOKENS.items():
            setattr(self, f"{name}_id", table.get(token))
        self._tokenizer = keras_hub.tokenizers.BytePairTokenizer(
            vocabulary=table,
            merges=merges,
            add_prefix_space=add_prefix_space,
            unsplittable_tokens=[t for t in SPECIAL_TOKENS.values() if t in table],
        )
        self._special_ids = [i for i in (self.start_id, self.pad_id, self.end_id) if i is not None]
        # Traced, so that keras-hub keeps TensorFlow tensors (eagerly, on
        # another backend, it would hand back Python lists).
        # One trace each: a batch of texts, a batch of id sequences.
        self._tokenize = tf.function(
            self._tokenizer._tokenize_tf, input_signature=[tf.TensorSpec([None], tf.string)]
        )
        self._detokenize = tf.function(
            self._tokenizer._detokenize_tf,
            input_signature=[tf.RaggedTensorSpec([None, None], tf.int32)],
        )

    def resources(self):
        """What a TensorFlow export of `tokenize` must track: keras-hub's lookup tables and merge cache
        (a `MutableHashTable`), which a traced function reads but its layer, never built, does not track."""
        tables = tf.Module()
        tables.tables = [value for value in vars(self._tokenizer).values()
                         if isinstance(value, tf.__internal__.tracking.Trackable)
                         and not hasattr(value, "built")]  # the tables, not Keras layers
        return (tables,)

    def get_config(self):
        """The constructor's arguments, the vocabulary and merges inline: JSON that rebuilds the tokenizer."""
        return {"vocabulary": dict(self._tokenizer.vocabulary), "merges": list(self._tokenizer.merges),
                "add_prefix_space": self._tokenizer.add_prefix_space}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def tokenize(self, texts):
        """Strings (scalar or batch) to int32 ids (a `tf.RaggedTensor` for a batch)."""
        texts = tf.convert_to_tensor(texts)
        if texts.dtype != tf.string:
            raise ValueError(f"tokenize takes strings; received dtype {texts.dtype.name}.")
        if texts.shape.rank not in (0, 1):
            raise ValueError(f"tokenize takes a string or a batch of strings; received shape {texts.shape}.")
        ids = self._tokenize(tf.reshape(texts, [-1]))
        return ids[0] if texts.shape.rank == 0 else ids

    def detokenize(self, ids):
        """Ids (a batch) back to strings; `<s>`, `<pad>` and `</s>` are dropped."""
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.ragged.constant(ids, dtype=tf.int32) if isinstance(ids, list) else (
                tf.RaggedTensor.from_tensor(tf.convert_to_tensor(ids, tf.int32)))
        if ids.shape.rank != 2:
            raise ValueError(f"detokenize takes a batch of id sequences; received rank {ids.shape.rank}.")
        keep = tf.reduce_all(tf.not_equal(ids.flat_values[:, None], self._special_ids), axis=-1)
        return self._detokenize(tf.ragged.boolean_mask(ids, ids.with_flat_values(keep)))

    def id_to_token(self, token_id):
        """The vocabulary token of one id (a space is `Ġ`)."""
        return self._tokenizer.id_to_token(int(token_id))
