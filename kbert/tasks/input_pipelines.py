"""Fine-tuning examples to batched model inputs, as `tf.data` pipelines with static shapes.

The builders take the examples of `kbert.tasks.readers` (lists of dicts) and
a tokenizer of `kbert.text` (`WordPieceTokenizer`, or `SentencePieceTokenizer`
on a model with `[CLS]` and `[SEP]` pieces, as ALBERT's). As in
`kbert.pretraining.pretraining_dataset`, the examples are tokenized and
packed up front, eagerly and many at a time (tensorflow-text ops, then
`kbert.text.SegmentPacker`), into NumPy arrays; the `tf.data` pipeline then
only gathers batches from them, so it traces in no time and feeds Keras on
every backend.

Every builder returns a `tf.data.Dataset` of `(x, y)` dicts, with the names
the kbert encoders and task models take:

- `x`: `token_ids`, `segment_ids`, `padding_mask`, int32 `(batch, L)`, laid out
  `[CLS] A [SEP] B [SEP]`; `(batch, choices, L)` for multiple choice.
  Question answering adds `question_mask`
  (`kbert.tasks.question_answering_dataset`).
- `y`: `labels`, int32 `(batch,)` class ids (`text_classification_dataset`),
  float32 `(batch,)` for regression, int32 `(batch, L)` tag ids with -1 on the
  tokens without a label (`token_classification_dataset`: every sub-token but
  a word's first, `[CLS]`, `[SEP]` and padding), int32 `(batch,)` the right
  choice (`multiple_choice_dataset`); `start_positions` and `end_positions`,
  int32 `(batch,)`, for question answering.
- text to text (`text_to_text_dataset`, T5): `x` with `encoder_token_ids`,
  `encoder_padding_mask`, `decoder_token_ids`, `decoder_padding_mask`, and
  `y` the target ids `(batch, target_length)`, as `kbert.tasks.Seq2SeqLM` takes.

Examples without labels give `x` alone (for `predict`).

Length buckets (`buckets`, a list of lengths such as
`kbert.text.length_buckets.bucket_lengths(sequence_length)`; `None` pads every
batch to `sequence_length`): each batch is cut to the smallest bucket that
holds its longest row, so a batch of short texts computes no padding it does
not need and XLA compiles one program per bucket. In training, the shuffled
examples are sorted by length within windows of `BUCKET_WINDOW` batches
before batching (the batches are then shuffled again), so a batch holds texts
of similar length; every example is still seen once an epoch.

Batches: with `training=True` the examples are shuffled anew every epoch and
the last partial batch is dropped, so every batch has `batch_size` rows. With
`training=False` they keep their order; the last batch is shorter, or, with
`pad_final_batch=True`, filled up to `batch_size` with empty rows (all inputs
0, labels -1, or NaN for regression): every batch then has the same static
shape (XLA, TPU), and the first `len(examples)` rows of `predict` are the real
ones.
"""

import numpy as np

from kbert.backend.imports import lazy_import, traced_as_written
from kbert.text.length_buckets import row_lengths

tf = lazy_import("tensorflow")

# The label of a token or padded row that has none.
IGNORED_LABEL = -1
# Examples tokenized and packed per eager call.
_BLOCK = 512
_INPUTS = ("token_ids", "segment_ids", "padding_mask")
# Training batches sorted by length together, with length buckets.
BUCKET_WINDOW = 32


def special_token_ids(tokenizer):
    """`(cls_id, sep_id, pad_id)` of a tokenizer (byte-level BPE's `<s>`, `</s>` for `[CLS]`, `[SEP]`, as
    RoBERTa packs); a `ValueError` when it has none."""
    ids = tuple(getattr(tokenizer, name, None) for name in ("cls_id", "sep_id", "pad_id"))
    if None in ids[:2]:
        ids = (getattr(tokenizer, "start_id", None), getattr(tokenizer, "end_id", None), ids[2])
    if None in ids:
        raise ValueError(
            f"{type(tokenizer).__name__} has no [CLS], [SEP] or padding token (cls_id, sep_id, "
            "pad_id); the task datasets pack `[CLS] A [SEP] B [SEP]`."
        )
    return ids


def _packer(sequence_length, special_ids, truncate="round_robin"):
    """A `kbert.text.SegmentPacker` (imported here: `kbert.text` imports TensorFlow)."""
    from kbert.text.segment_packer import SegmentPacker

    return SegmentPacker(sequence_length, *special_ids, truncate=truncate)


def index_batches(count, batch_size, training=False, seed=None, pad_final_batch=False, lengths=None):
    """A dataset of example-index batches, int64 `(batch,)`, -1 on padded rows.

    `training`: shuffled every epoch (from `seed`), partial batch dropped;
    with the examples' `lengths`, sorted by length within windows of
    `BUCKET_WINDOW` batches, the batches then shuffled (see the module docstring).
    Otherwise in order, the last batch short or padded with -1.

    >>> [b.tolist() for b in index_batches(5, 2, pad_final_batch=True).as_numpy_iterator()]
    [[0, 1], [2, 3], [4, -1]]
    >>> batches = index_batches(4, 2, True, seed=0, lengths=[9, 1, 8, 2]).as_numpy_iterator()
    >>> sorted(sorted(batch.tolist()) for batch in batches)  # the long texts together, the short ones too
    [[0, 2], [1, 3]]
    """
    if int(batch_size) < 1:
        raise ValueError(f"batch_size must be at least 1; received {batch_size}.")
    if training and pad_final_batch:
        raise ValueError("pad_final_batch is for evaluation; training drops the partial batch.")
    if training and count < batch_size:
        raise ValueError(
            f"{count} examples do not fill one training batch of {batch_size}; lower batch_size."
        )
    if count == 0:
        raise ValueError("There are no examples.")
    dataset = tf.data.Dataset.range(count)
    if training:
        dataset = dataset.shuffle(count, seed=seed, reshuffle_each_iteration=True)
    if training and lengths is not None:
        return _length_sorted_batches(dataset, lengths, batch_size, seed).apply(
            tf.data.experimental.assert_cardinality(count // batch_size))
    dataset = dataset.batch(batch_size, drop_remainder=training)
    if pad_final_batch:
        dataset = dataset.map(traced_as_written(
            lambda index: tf.ensure_shape(
                tf.pad(index, [[0, batch_size - tf.shape(index)[0]]], constant_values=-1),
                [batch_size],
            )
        ))
    return dataset


def _length_sorted_batches(indices, lengths, batch_size, seed):
    """Shuffled `indices` sorted by length within windows of `BUCKET_WINDOW` batches, batched, the
    batches shuffled within a window's worth; the partial last batch dropped."""
    lengths = tf.constant(np.asarray(lengths), tf.int64)
    window = indices.batch(batch_size * BUCKET_WINDOW)
    window = window.map(lambda index: tf.gather(index, tf.argsort(tf.gather(lengths, index), stable=True)))
    batches = window.unbatch().batch(batch_size, drop_remainder=True)
    return batches.shuffle(BUCKET_WINDOW, seed=seed, reshuffle_each_iteration=True)


def _cut_to_bucket(tensors, buckets, full):
    """The entries of `tensors` shaped like its `padding_mask` cut on their last axis to the smallest of
    `buckets` that holds the batch's longest row (`full` is the padded length)."""
    mask = tensors["padding_mask"]
    longest = tf.reduce_max(tf.reduce_sum(tf.reshape(mask, [-1, full]), axis=1))
    buckets = tf.constant(list(buckets) + [full], tf.int32)
    length = buckets[tf.searchsorted(buckets, tf.reshape(tf.cast(longest, tf.int32), [1]))[0]]
    shape = mask.shape
    return {name: value[..., :length] if value.shape == shape else value for name, value in tensors.items()}


def arrays_dataset(batches, arrays, input_names, target_names=(), buckets=None):
    """`(x, y)` batches gathered from NumPy arrays (one row per example) at `batches` of indices.

    Integer arrays come out int32 and float arrays float32. Padded rows
    (index -1) get zero inputs and no labels (-1, or NaN for floats); `y` is
    left out when there are no `target_names`. With `buckets` (lengths), the
    entries shaped as `padding_mask` (inputs, and per-token labels) are cut
    to the smallest bucket that holds the batch's longest row.

    >>> batches = index_batches(3, 2, pad_final_batch=True)
    >>> arrays = {"token_ids": np.ones((3, 2), np.int8), "labels": np.array([4, 5, 6])}
    >>> dataset = arrays_dataset(batches, arrays, ["token_ids"], ["labels"])
    >>> [y["labels"].tolist() for _, y in dataset.as_numpy_iterator()]
    [[4, 5], [6, -1]]
    """
    tensors = {name: tf.constant(arrays[name]) for name in (*input_names, *target_names)}

    def take(name, real, index, empty):
        tensor = tf.gather(tensors[name], index)
        dtype = tf.float32 if tensor.dtype.is_floating else tf.int32
        shape = [-1] + [1] * (tensor.shape.rank - 1)
        return tf.where(tf.reshape(real, shape), tf.cast(tensor, dtype), tf.cast(empty, dtype))

    def make(index):
        real, index = index >= 0, tf.maximum(index, 0)
        x = {name: take(name, real, index, 0) for name in input_names}
        empty = {name: np.nan if tensors[name].dtype.is_floating else IGNORED_LABEL
                 for name in target_names}  # fmt: skip
        y = {name: take(name, real, index, empty[name]) for name in target_names}
        if buckets is not None and len(buckets) > 1:
            cut = _cut_to_bucket({**x, **{f"y:{name}": value for name, value in y.items()}}, buckets,
                                 int(tensors["padding_mask"].shape[-1]))
            x, y = {name: cut[name] for name in x}, {name: cut[f"y:{name}"] for name in y}
        return (x, y) if target_names else x

    return batches.map(traced_as_written(make), num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def bucketed_dataset(arrays, input_names, target_names, batch_size, training=False, seed=None,
                     pad_final_batch=False, buckets=None):
    """`arrays_dataset` over `index_batches` of the packed `arrays`, by length `buckets` when given.

    >>> mask = np.array([[1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 0, 0]])
    >>> dataset = bucketed_dataset({"padding_mask": mask}, ["padding_mask"], (), 2, buckets=[2, 4])
    >>> [x["padding_mask"].shape for x in dataset.as_numpy_iterator()]
    [(2, 4), (1, 2)]
    """
    lengths = row_lengths(arrays["padding_mask"]) if buckets is not None and len(buckets) > 1 else None
    batches = index_batches(len(arrays["padding_mask"]), batch_size, training, seed, pad_final_batch, lengths)
    return arrays_dataset(batches, arrays, input_names, target_names, buckets)


def _packed_in_blocks(count, pack_block):
    """`pack_block(rows)` over consecutive slices of at most `_BLOCK` rows, concatenated.

    `pack_block` returns a dict of tensors or arrays with one row per example.
    """
    parts = [pack_block(slice(start, start + _BLOCK)) for start in range(0, count, _BLOCK)]
    return {name: np.concatenate([np.asarray(part[name]) for part in parts]) for name in parts[0]}


def _all_or_none(examples, key="label"):
    """Whether the examples have `key` (a label, a pair): all of them (True) or none (False)."""
    count = sum(key in example for example in examples)
    if 0 < count < len(examples):
        missing = next(i for i, example in enumerate(examples) if key not in example)
        raise ValueError(f"Example {missing} has no {key!r}, where others have one.")
    return count > 0


def _label_ids(values, labels, where):
    """Int32 ids of label strings in `labels`; `where(i)` names value `i` in the error."""
    index = {label: i for i, label in enumerate(labels)}
    for i, value in enumerate(values):
        if str(value) not in index:
            raise ValueError(
                f"{where(i)}: label {value!r} is not one of the labels {list(labels)}."
            )
    return np.array([index[str(value)] for value in values], np.int32)


def text_classification_dataset(
    examples,
    tokenizer,
    labels=None,
    sequence_length=128,
    batch_size=32,
    training=False,
    seed=None,
    pad_final_batch=False,
    truncate="round_robin",
    buckets=None,
):
    """Single texts or pairs, packed as `[CLS] A [SEP] B [SEP]`, with their class or value.

    Args:
        examples: dicts with `text`, optionally `text_pair` (all or none), and
            `label` (all or none), as `read_classification` and
            `read_regression` give.
        tokenizer: a `kbert.text` tokenizer with `cls_id`, `sep_id`, `pad_id`.
        labels: the label vocabulary (class `i` is `labels[i]`); `None` for
            regression (float labels).
        sequence_length, batch_size, training, seed, pad_final_batch, buckets:
            see the module docstring.
        truncate: how a pair too long is cut (`SegmentPacker`).

    Returns:
        A `tf.data.Dataset` of `(x, y)`: `x` with `token_ids`, `segment_ids`,
        `padding_mask` int32 `(batch, sequence_length)` (with `buckets`, a
        bucket's length); `y` with `labels`.

    Example:

    >>> from kbert.text import WordPieceTokenizer
    >>> tokenizer = WordPieceTokenizer(
    ...     ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad"])
    >>> examples = [{"text": "good", "label": "pos"}, {"text": "bad", "label": "neg"}]
    >>> dataset = text_classification_dataset(examples, tokenizer, ["neg", "pos"], 4, 2)
    >>> x, y = next(iter(dataset))
    >>> x["token_ids"].numpy().tolist(), y["labels"].numpy().tolist()
    ([[2, 5, 3, 0], [2, 6, 3, 0]], [1, 0])
    """
    index_batches(len(examples), batch_size, training, seed, pad_final_batch)  # its checks, before packing
    packer = _packer(sequence_length, special_token_ids(tokenizer), truncate)
    texts = [example["text"] for example in examples]
    pairs = [e["text_pair"] for e in examples] if _all_or_none(examples, "text_pair") else None

    def pack_block(rows):
        second = None if pairs is None else tokenizer.tokenize(tf.constant(pairs[rows]))
        return packer(tokenizer.tokenize(tf.constant(texts[rows])), second)

    arrays = _packed_in_blocks(len(examples), pack_block)
    if not _all_or_none(examples):
        return bucketed_dataset(arrays, _INPUTS, (), batch_size, training, seed, pad_final_batch, buckets)
    if labels is None:
        arrays["labels"] = np.array([float(example["label"]) for example in examples], np.float32)
    else:
        arrays["labels"] = _label_ids([e["label"] for e in examples], labels, "Example {}".format)
    return bucketed_dataset(arrays, _INPUTS, ["labels"], batch_size, training, seed, pad_final_batch, buckets)


def _word_pieces(tokenizer, words):
    """Sub-token ids of a ragged batch of words `(batch, words, pieces)`; a word
    without any piece (only control characters, say) gets the unknown token."""
    pieces = tokenizer.tokenize(words.flat_values)
    empty = tf.equal(pieces.row_lengths(), 0)
    unknown = tf.fill([tf.reduce_sum(tf.cast(empty, tf.int32))], tokenizer.unknown_id)
    unknown = tf.RaggedTensor.from_row_lengths(unknown, tf.cast(empty, tf.int64))
    pieces = tf.concat([tf.cast(pieces, tf.int32), unknown], axis=1)
    return words.with_flat_values(pieces)


def token_classification_dataset(
    sentences,
    tokenizer,
    labels,
    sequence_length=128,
    batch_size=32,
    training=False,
    seed=None,
    pad_final_batch=False,
    buckets=None,
):
    """Words with tags (NER) to sub-tokens, each word's tag on its first sub-token.

    Each word is tokenized on its own (a word the tokenizer splits, like
    "U.S.", stays one word). The other sub-tokens, `[CLS]`, `[SEP]` and the
    padding get the label -1, left out of the loss and the metric, as in the
    BERT paper. A word that yields no sub-token gets the unknown token, so
    the labelled positions of a row are its words in order; words past
    `sequence_length - 2` sub-tokens are cut.

    Args:
        sentences: dicts with `words` and `tags`, lists of strings of the
            same length (`read_conll`).
        tokenizer: a `kbert.text` tokenizer with `cls_id`, `sep_id`, `pad_id`
            and `unknown_id`.
        labels: the tag vocabulary (tag id `i` is `labels[i]`).
        sequence_length, batch_size, training, seed, pad_final_batch, buckets:
            see the module docstring.

    Returns:
        A `tf.data.Dataset` of `(x, y)`: `x` with `token_ids`, `segment_ids`,
        `padding_mask`, and `y` with `labels`, all int32 `(batch, sequence_length)`.

    Example:

    >>> from kbert.text import WordPieceTokenizer
    >>> tokenizer = WordPieceTokenizer(
    ...     ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "par", "##is"])
    >>> sentences = [{"words": ["Paris", "?"], "tags": ["B-LOC", "O"]}]
    >>> x, y = next(iter(token_classification_dataset(sentences, tokenizer, ["B-LOC", "O"], 6, 1)))
    >>> x["token_ids"].numpy().tolist(), y["labels"].numpy().tolist()
    ([[2, 5, 6, 1, 3, 0]], [[-1, 0, -1, 1, -1, -1]])
    """
    index_batches(len(sentences), batch_size, training, seed, pad_final_batch)  # its checks, before packing
    packer = _packer(sequence_length, special_token_ids(tokenizer))
    label_packer = _packer(sequence_length, [IGNORED_LABEL] * 3)
    tag_ids = []
    for i, sentence in enumerate(sentences):
        words, tags = sentence["words"], sentence["tags"]
        if len(tags) != len(words):
            raise ValueError(f"Sentence {i} has {len(words)} words and {len(tags)} tags.")
        tag_ids.append(_label_ids(tags, labels, f"Sentence {i}, word {{}}".format).tolist())
    words = [sentence["words"] for sentence in sentences]

    def pack_block(rows):
        block = tf.ragged.constant(words[rows], tf.string, ragged_rank=1)
        pieces = _word_pieces(tokenizer, block)
        word_tags = tf.constant([tag for row in tag_ids[rows] for tag in row], tf.int32)
        first = tf.equal(tf.ragged.range(pieces.values.row_lengths()).flat_values, 0)
        word_of_piece = pieces.values.value_rowids()
        piece_tags = tf.where(first, tf.gather(word_tags, word_of_piece), IGNORED_LABEL)
        packed = packer(pieces.merge_dims(1, 2))
        tags = label_packer(pieces.with_flat_values(piece_tags).merge_dims(1, 2))
        return {**packed, "labels": tags["token_ids"]}

    arrays = _packed_in_blocks(len(sentences), pack_block)
    return bucketed_dataset(arrays, _INPUTS, ["labels"], batch_size, training, seed, pad_final_batch, buckets)


def multiple_choice_dataset(
    examples,
    tokenizer,
    sequence_length=128,
    batch_size=16,
    training=False,
    seed=None,
    pad_final_batch=False,
    truncate="round_robin",
    buckets=None,
):
    """Each (context, choice) packed as `[CLS] context [SEP] choice [SEP]`, stacked per example.

    Args:
        examples: dicts with `context`, `choices` (lists of strings, as many
            in every example) and `label` (all or none), as `read_swag` gives.
        tokenizer: a `kbert.text` tokenizer with `cls_id`, `sep_id`, `pad_id`.
        sequence_length, batch_size, training, seed, pad_final_batch, buckets:
            see the module docstring.
        truncate: how a pair too long is cut (`SegmentPacker`).

    Returns:
        A `tf.data.Dataset` of `(x, y)`: `x` with `token_ids`, `segment_ids`,
        `padding_mask` int32 `(batch, choices, sequence_length)`; `y` with
        `labels` int32 `(batch,)`, the index of the right choice.

    Example:

    >>> from kbert.text import WordPieceTokenizer
    >>> tokenizer = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "yes", "no"])
    >>> examples = [{"context": "yes", "choices": ["no", "yes"], "label": 1}]
    >>> x, y = next(iter(multiple_choice_dataset(examples, tokenizer, 6, 1)))
    >>> x["token_ids"].numpy().tolist(), y["labels"].numpy().tolist()
    ([[[2, 5, 3, 6, 3, 0], [2, 5, 3, 5, 3, 0]]], [1])
    """
    index_batches(len(examples), batch_size, training, seed, pad_final_batch)  # its checks, before packing
    packer = _packer(sequence_length, special_token_ids(tokenizer), truncate)
    num_choices = len(examples[0]["choices"])
    for i, example in enumerate(examples):
        if len(example["choices"]) != num_choices:
            raise ValueError(
                f"Example {i} has {len(example['choices'])} choices where example 0 has "
                f"{num_choices}."
            )

    def pack_block(rows):
        block = examples[rows]
        contexts = [example["context"] for example in block for _ in range(num_choices)]
        choices = [choice for example in block for choice in example["choices"]]
        packed = packer(
            tokenizer.tokenize(tf.constant(contexts)), tokenizer.tokenize(tf.constant(choices))
        )
        return {
            name: tf.reshape(t, [-1, num_choices, sequence_length]) for name, t in packed.items()
        }

    arrays = _packed_in_blocks(len(examples), pack_block)
    if not _all_or_none(examples):
        return bucketed_dataset(arrays, _INPUTS, (), batch_size, training, seed, pad_final_batch, buckets)
    arrays["labels"] = np.array([int(example["label"]) for example in examples], np.int32)
    bad = np.flatnonzero((arrays["labels"] < 0) | (arrays["labels"] >= num_choices))
    if bad.size:
        raise ValueError(
            f"Example {bad[0]}: label {arrays['labels'][bad[0]]} is not a choice index."
        )
    return bucketed_dataset(arrays, _INPUTS, ["labels"], batch_size, training, seed, pad_final_batch, buckets)


def _end_terminated(tokenizer, texts, length):
    """Int32 ids `(len(texts), length)`: each text's pieces, cut to `length - 1`, its end id, padding."""
    ids = tf.cast(tokenizer.tokenize(tf.constant(texts)), tf.int32)
    if getattr(tokenizer, "add_end", False):
        ids = ids[:, :-1]
    ends = tf.RaggedTensor.from_tensor(tf.fill([ids.nrows(), 1], tokenizer.end_id))
    ids = tf.concat([ids[:, : length - 1], ends], axis=1)
    return ids.to_tensor(default_value=tokenizer.pad_id, shape=[None, length])


def text_to_text_dataset(
    examples,
    tokenizer,
    sequence_length=128,
    target_length=None,
    batch_size=32,
    training=False,
    seed=None,
    pad_final_batch=False,
):
    """Source texts to encoder inputs and target texts to teacher-forced decoder inputs (T5).

    Sources and targets end with the tokenizer's end id, cut before it when
    too long; the decoder reads the targets shifted right behind the pad id
    (`kbert.models.seq2seq_inputs`), and the loss skips pad targets. Padded
    rows (`pad_final_batch`) are all pad.

    Args:
        examples: dicts with `source` and, for training, `target` (all or
            none), as `read_text_to_text` gives.
        tokenizer: a tokenizer with `end_id` and `pad_id`, such as T5's
            `kbert.text.SentencePieceTokenizer`.
        sequence_length: the length of the sources.
        target_length: the length of the targets; `None`: the longest target
            of `examples`, at most `sequence_length`.
        batch_size, training, seed, pad_final_batch: see the module docstring.

    Returns:
        A `tf.data.Dataset` of `(x, target_ids)`, all int32.

    Example:

    >>> from kbert.text import SentencePieceTokenizer, train_sentence_piece
    >>> tokenizer = SentencePieceTokenizer(train_sentence_piece(["yes no maybe"] * 20, 12))
    >>> examples = [{"source": "maybe", "target": "yes"}]
    >>> x, y = next(iter(text_to_text_dataset(examples, tokenizer, sequence_length=8)))
    >>> pieces = len(tokenizer.tokenize("yes"))  # the target's pieces, then the end id
    >>> y.shape == (1, pieces + 1), int(y[0, -1]) == tokenizer.end_id, x["decoder_token_ids"].shape == y.shape
    (True, True, True)
    """
    from kbert.models.t5 import seq2seq_inputs

    if getattr(tokenizer, "end_id", None) is None or getattr(tokenizer, "pad_id", None) is None:
        raise ValueError(f"{type(tokenizer).__name__} has no end or padding token (end_id, pad_id); "
                         "text to text needs an encoder-decoder's tokenizer, such as T5's SentencePiece model.")
    batches = index_batches(len(examples), batch_size, training, seed, pad_final_batch)
    has_targets = _all_or_none(examples, "target")
    arrays = _packed_in_blocks(len(examples), lambda rows: {
        "source": _end_terminated(tokenizer, [e["source"] for e in examples[rows]], sequence_length),
        "target": _end_terminated(tokenizer, [e.get("target", "") for e in examples[rows]],
                                  target_length or sequence_length),
    })
    targets = arrays["target"]
    if target_length is None:  # cut to the longest
        targets = targets[:, : int((targets != tokenizer.pad_id).sum(-1).max())]
    arrays = seq2seq_inputs(arrays["source"], targets, tokenizer.pad_id, start_id=tokenizer.pad_id)
    if not has_targets:
        return arrays_dataset(batches, arrays, ["encoder_token_ids", "encoder_padding_mask"])
    arrays["target_ids"] = targets
    dataset = arrays_dataset(batches, arrays, list(arrays)[:4], ["target_ids"])
    # Padded rows (label -1) get pad targets, which the loss skips.
    return dataset.map(traced_as_written(
        lambda x, y: (x, tf.where(y["target_ids"] < 0, tokenizer.pad_id, y["target_ids"]))))
