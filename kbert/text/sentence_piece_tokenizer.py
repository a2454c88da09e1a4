"""A SentencePiece tokenizer on tensorflow-text, and training of a SentencePiece model.

`tensorflow_text.SentencepieceTokenizer` runs the model inside TensorFlow
graphs, so tokenizing runs in `tf.data.Dataset.map` whatever the Keras
backend; training uses the `sentencepiece` package (`pip install
sentencepiece`, in the `text` extra), imported when called.
"""

import base64
import io
import os

from kbert.backend.imports import lazy_import
from kbert.text.character_offsets import character_offsets

tf = lazy_import("tensorflow")
tf_text = lazy_import("tensorflow_text")

# The pieces `cls_id` and `sep_id` name, in the spellings of ALBERT's models and XLNet's.
SUMMARY_AND_SEPARATOR = (("[CLS]", "<cls>"), ("[SEP]", "<sep>"))


def train_sentence_piece(
    sentences,
    vocabulary_size,
    model_type="unigram",
    pad_id=0,
    end_id=1,
    unknown_id=2,
    character_coverage=1.0,
    control_symbols=(),
    sentinels=0,
):
    """Train a SentencePiece model on an iterable of sentences; returns the model bytes.

    The ids follow T5: pad 0, EOS 1, unknown 2, no BOS; `control_symbols`
    (e.g. ALBERT's `("[CLS]", "[SEP]")`) come next, pieces that text never
    produces. `sentinels` pieces `<extra_id_i>` are appended above the
    `vocabulary_size` learned ones, `<extra_id_0>` at the top (T5's layout,
    `kbert.pretraining.SpanCorruption`'s); text that spells one out tokenizes
    to it, and it detokenizes to its name. Save the bytes as a `.model` file
    or pass them to `SentencePieceTokenizer` directly.

    Example:
    ```python
    model = train_sentence_piece(["a sentence", "another one", ...], vocabulary_size=500)
    tokenizer = SentencePieceTokenizer(model)
    ```
    """
    import sentencepiece

    if vocabulary_size < 4:
        raise ValueError(f"vocabulary_size must be at least 4; received {vocabulary_size}.")
    buffer = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=buffer,
        vocab_size=vocabulary_size,
        model_type=model_type,
        pad_id=pad_id,
        eos_id=end_id,
        unk_id=unknown_id,
        bos_id=-1,
        character_coverage=character_coverage,
        hard_vocab_limit=False,
        control_symbols=list(control_symbols),
        minloglevel=2,
        num_threads=1,  # one thread: the same sentences give the same model (a run's vocabulary reproduces)
    )
    return _with_sentinels(buffer.getvalue(), sentinels) if sentinels else buffer.getvalue()


def _with_sentinels(model, sentinels):
    """The model bytes with `<extra_id_{sentinels-1}>` … `<extra_id_0>` appended as user-defined pieces."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model)
    for index in reversed(range(sentinels)):
        piece = proto.pieces.add()
        piece.piece, piece.score = f"<extra_id_{index}>", 0.0
        piece.type = sentencepiece_model_pb2.ModelProto.SentencePiece.USER_DEFINED
    return proto.SerializeToString()


class SentencePieceTokenizer:
    """Text to SentencePiece ids and back, as TensorFlow ops (T5, ALBERT).

    Args:
        model: a `.model` file path, or its bytes (e.g. from `train_sentence_piece`).
        add_end: append the EOS id to every tokenized text (T5 inputs end with it).

    Attributes:
        vocabulary_size, pad_id, end_id, unknown_id; `cls_id` and `sep_id`,
        the ids of the pieces `[CLS]` and `[SEP]` (ALBERT's models) or
        `<cls>` and `<sep>` (XLNet's); `None` when the model has neither (T5).

    Example:
    ```python
    tokenizer = SentencePieceTokenizer("spiece.model", add_end=True)
    ids = tokenizer.tokenize(["Hello world."])  # tf.RaggedTensor of int32
    tokenizer.detokenize(ids)                     # [b"Hello world."]
    ```
    """

    def __init__(self, model, add_end=False):
        if isinstance(model, (str, os.PathLike)):
            path = os.fspath(model)
            if not os.path.isfile(path):
                raise ValueError(f"SentencePiece model file not found: {path!r}.")
            with open(path, "rb") as f:
                model = f.read()
        if not isinstance(model, bytes) or not model:
            raise ValueError("model must be a .model file path or the model's bytes.")
        self.model = model
        self.add_end = bool(add_end)
        ops = self._ops()
        self.vocabulary_size = int(ops.vocab_size())
        ids = ops.string_to_id(["<pad>", "</s>", "<unk>"]).numpy().tolist()
        self.pad_id, self.end_id, self.unknown_id = ids
        self.cls_id, self.sep_id = (self._first_piece_id(ops, pieces) for pieces in SUMMARY_AND_SEPARATOR)

    def get_config(self):
        """The constructor's arguments, the model's bytes in base64: JSON that rebuilds the tokenizer."""
        return {"model": base64.b64encode(self.model).decode("ascii"), "add_end": self.add_end}

    @classmethod
    def from_config(cls, config):
        return cls(base64.b64decode(config["model"]), config.get("add_end", False))

    def _ops(self):
        """A tensorflow-text tokenizer over the model, made anew for each use (milliseconds).

        One kept from the constructor would not do: `tf.random.set_seed`
        (which `keras.utils.set_random_seed` calls) clears TensorFlow's kernel
        caches, and with them the model of every SentencePiece op made before.
        """
        return tf_text.SentencepieceTokenizer(model=self.model, out_type=tf.int32, add_eos=self.add_end)

    @classmethod
    def _first_piece_id(cls, ops, pieces):
        """The id of the first of `pieces` the model has, or `None`."""
        return next((i for i in (cls._piece_id(ops, piece) for piece in pieces) if i is not None), None)

    @staticmethod
    def _piece_id(ops, piece):
        """The id of `piece`, or `None` when the model has no such piece."""
        piece_id = int(ops.string_to_id(piece))
        found = ops.id_to_string(piece_id).numpy().decode() == piece
        return piece_id if found else None

    def tokenize(self, texts):
        """Strings (scalar or batch) to int32 ids (a `tf.RaggedTensor` for a batch)."""
        return self._ops().tokenize(texts)

    def tokenize_with_offsets(self, texts):
        """Token ids, and the character span of each token in the original text.

        The span `[start, end)` counts characters (code points, as Python's
        `str` indexing). The white space a piece's `▁` stands for is left
        out of its span, so a piece spans the characters it covers, and a
        piece that is only `▁` spans nothing (an empty span where the next
        word starts); the end token (with `add_end`) has an empty span at the
        end of the text.

        Args:
            texts: `tf.string` tensor of shape `(n,)`, or a scalar.

        Returns:
            `(ids, starts, ends)`: int32 `tf.RaggedTensor`s of shape `(n, None)`
            (1-D tensors for a scalar input).
        """
        texts = tf.convert_to_tensor(texts)
        rank = texts.shape.rank
        if texts.dtype != tf.string or rank not in (0, 1):
            raise ValueError(
                "`tokenize_with_offsets` takes a scalar string or a 1-D batch of strings. "
                f"Received dtype {texts.dtype.name} and shape {texts.shape}."
            )
        texts = tf.reshape(texts, [-1])
        ids, starts, ends = self._ops().tokenize_with_offsets(texts)
        text = tf.gather(texts, ids.value_rowids())
        is_end = tf.equal(ids.flat_values, self.end_id)
        ends = tf.where(is_end, tf.cast(tf.strings.length(text), tf.int64), ends.flat_values)
        starts = tf.where(is_end, ends, starts.flat_values)
        piece = tf.strings.substr(text, starts, ends - starts)
        unspaced = tf.strings.regex_replace(piece, r"^[\s\p{Z}]+", "")
        starts = ends - tf.cast(tf.strings.length(unspaced), tf.int64)
        starts = character_offsets(texts, ids.with_flat_values(starts))
        ends = character_offsets(texts, ids.with_flat_values(ends))
        if rank == 0:
            return ids[0], starts[0], ends[0]
        return ids, starts, ends

    def detokenize(self, ids):
        """Ids back to strings; pad and EOS ids are dropped."""
        ids = tf.convert_to_tensor(ids) if not isinstance(ids, tf.RaggedTensor) else ids
        keep = tf.logical_and(tf.not_equal(ids, self.pad_id), tf.not_equal(ids, self.end_id))
        if isinstance(ids, tf.RaggedTensor):
            ids = tf.ragged.boolean_mask(ids, keep)
        else:
            ids = tf.ragged.boolean_mask(ids, keep) if ids.shape.rank > 1 else ids[keep]
        return self._ops().detokenize(ids)

    def id_to_piece(self, ids):
        """The piece strings of ids."""
        return self._ops().id_to_string(ids)
