"""Raw text to batched, masked pretraining examples, as a `tf.data.Dataset`.

The stages: `read_documents` streams documents from text files and folders
(or document strings); a Python generator tokenizes them (many sentences per
tokenizer call), builds pairs or single segments with `sentence_pairs`, packs
them to the sequence length, and shuffles them through a bounded buffer; the
`tf.data` part masks with `MaskedLMMasker` or `SpanMasker` and batches with
static shapes. Only the document buffer of `nsp_pairs` and the shuffle buffer
are held in memory, so a corpus larger than memory streams through.

The objectives (`pretraining_dataset(objective=...)`):

- `mlm_nsp` (BERT): NSP pairs (`nsp_pairs`), 80/10/10 MLM.
- `mlm` (RoBERTa): FULL-SENTENCES packing, 80/10/10 MLM, no pair label.
- `sop` (ALBERT): sentence-order pairs, 80/10/10 MLM.
- `span` (SpanBERT): single segments per document, span masking
  (`SpanMasker`), which uses the tokenizer's word pieces.
- `electra`: FULL-SENTENCES packing, ELECTRA's masking (85% `[MASK]`,
  15% unchanged, no random tokens).
- `clm` (GPT): FULL-SENTENCES packing, nothing masked: each token
  predicts the next (`kbert.tasks.CausalLM`).
- `structbert`: StructBERT's sentence-structural pairs
  (`structbert_pairs`: next / previous / other document, 1/3 each,
  `pair_labels` 0 / 1 / 2), 80/10/10 MLM, then the word-structural
  objective (`TrigramShuffler`: 5% of the unmasked trigrams
  shuffled, their original tokens the targets), for
  `StructBertPretrainer`; `x` adds `order_positions` int32 `(B, 3T)`
  (`T = ceil(0.05 · L / 3) + 3` trigrams), `y` `order_ids` int32 and
  `order_weights` float32 `(B, 3T)`.
- `plm` (XLNet): FULL-SENTENCES packing, span-based partial
  prediction of about 1/6 of the tokens under a random factorization
  order (`PermutationMasker`), for `XLNetPretrainer`; `x` adds
  `permutation_mask` float32 `(B, L, L)` and `target_mapping` float32
  `(B, P, L)` (`P`: `max_predictions`, or `ceil(L/6) + 5` when None).

All randomness is drawn from `seed` alone (never from TensorFlow's global
seed): Python `random.Random` generators for pair creation and shuffling, and
stateless TensorFlow ops for masking, fed a per-example seed the generator
emits. Instances are the same every pass; the shuffle order changes every
pass. Dynamic masking seeds each example by `(pass, position)`, so masks are
fresh every pass; static masking makes `dupe_factor` copies of each instance
seeded by `(instance, copy)`, so the same masks come back every pass (they are
recomputed, which costs the same time as dynamic masking and no memory). Passes
are counted per dataset object: two datasets built with the same `seed` give
the same stream.
"""

import itertools
import os
import random
import re

import numpy as np

from kbert.backend.imports import lazy_import, traced_as_written
from kbert.pretraining.masked_lm_masker import MaskedLMMasker
from kbert.pretraining.permutation_masker import PermutationMasker
from kbert.pretraining.sentence_pairs import (
    document_chunks,
    full_sentences,
    nsp_pairs,
    sop_pairs,
    structbert_pairs,
)
from kbert.pretraining.span_masker import SpanMasker
from kbert.pretraining.trigram_shuffler import TrigramShuffler
from kbert.text.pair_packing import pack

tf = lazy_import("tensorflow")

OBJECTIVES = ("mlm_nsp", "mlm", "sop", "span", "electra", "clm", "plm", "structbert")
MASKING = ("dynamic", "static")
MIN_SEQUENCE_LENGTH = 8
# Lines longer than this are split at sentence ends (one sentence per line otherwise).
LONG_LINE = 200
# After . ! ? and white space, or after a CJK full stop, question or exclamation mark.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])\s*")
_SENTENCES_PER_TOKENIZER_CALL = 2048
_BLOCK = 256  # instances per generator yield


def split_sentences(line):
    """Split a line after sentence-ending punctuation (`.`, `!`, `?` then white space; `。！？`).

    >>> split_sentences("One. Two? Three!")
    ['One.', 'Two?', 'Three!']
    """
    return [part for part in _SENTENCE_END.split(line.strip()) if part]


def _sentences(lines):
    sentences = []
    for line in lines:
        line = line.strip()
        if line:
            sentences.extend(split_sentences(line) if len(line) > LONG_LINE else [line])
    return sentences


def corpus_sources(inputs):
    """The corpus as a list of `("file", path)` and `("text", document)` items.

    `inputs` is a file or folder path (`str` or `os.PathLike`), or an iterable
    of paths and document strings. In an iterable, `os.PathLike` items are
    paths; its strings are paths when none of them contains white space, and
    documents otherwise (so mix document strings with `pathlib.Path` paths).
    Folders contribute their files, recursively, in sorted order, hidden ones
    skipped. An iterator is read into memory once here; pass files for a
    corpus larger than memory.

    Raises:
        ValueError: a path that does not exist, an item of another type.
    """
    items = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
    strings_are_paths = not any(
        isinstance(item, str) and any(c.isspace() for c in item) for item in items
    )
    sources = []
    for item in items:
        if isinstance(item, str) and not strings_are_paths:
            sources.append(("text", item))
            continue
        if not isinstance(item, (str, os.PathLike)):
            raise ValueError(
                f"Corpus items must be paths or document strings, got {type(item).__name__}."
            )
        path = os.fspath(item)
        if os.path.isfile(path):
            sources.append(("file", path))
        elif os.path.isdir(path):
            for folder, folders, files in os.walk(path):
                folders[:] = sorted(f for f in folders if not f.startswith("."))
                sources.extend(
                    ("file", os.path.join(folder, name))
                    for name in sorted(files)
                    if not name.startswith(".")
                )
        else:
            raise ValueError(f"Corpus file or folder not found: {path!r}.")
    return sources


def read_documents(inputs):
    """Stream documents (lists of sentence strings) from files, folders or strings.

    In a file, a blank line ends a document, and so does the end of the file.
    Each non-blank line is a sentence; lines over `LONG_LINE` characters are
    split at sentence-ending punctuation. A document string is one document
    whose lines are read the same way. Files are read lazily, line by line,
    one document at a time (a file without blank lines is one document, held
    in memory whole). See `corpus_sources` for what `inputs` may be.

    >>> list(read_documents(["First line.\\nSecond line.", "Another document."]))
    [['First line.', 'Second line.'], ['Another document.']]
    """
    return _documents(corpus_sources(inputs))


def _documents(sources):
    for kind, source in sources:
        if kind == "text":
            document = _sentences(source.splitlines())
            if document:
                yield document
            continue
        with open(source, encoding="utf-8", errors="replace") as f:
            lines = []
            for line in f:
                if line.strip():
                    lines.append(line)
                    continue
                document = _sentences(lines)
                if document:
                    yield document
                lines = []
            document = _sentences(lines)
            if document:
                yield document


def _document_blocks(documents):
    """Consecutive documents in blocks of about `_SENTENCES_PER_TOKENIZER_CALL` sentences."""
    block, count = [], 0
    for document in documents:
        block.append(document)
        count += len(document)
        if count >= _SENTENCES_PER_TOKENIZER_CALL:
            yield block
            block, count = [], 0
    if block:
        yield block


def _tokenized_documents(documents, tokenizer):
    """Documents of token-id sentences, in order, many sentences per tokenizer call."""
    for block in _document_blocks(documents):
        ids = iter(tokenizer([sentence for document in block for sentence in document]))
        for document in block:
            yield [list(next(ids)) for _ in document]


def _check_arguments(objective, masking, sequence_length, batch_size, max_predictions, dupe_factor):
    if objective not in OBJECTIVES:
        raise ValueError(f"Unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}.")
    if masking not in MASKING:
        raise ValueError(f"Unknown masking {masking!r}; choose 'dynamic' or 'static'.")
    if sequence_length < MIN_SEQUENCE_LENGTH:
        raise ValueError(
            f"sequence_length must be at least {MIN_SEQUENCE_LENGTH}, got {sequence_length}."
        )
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}.")
    if not 1 <= max_predictions <= sequence_length:
        raise ValueError(
            f"max_predictions must be in [1, sequence_length={sequence_length}], "
            f"got {max_predictions}."
        )
    if dupe_factor < 1:
        raise ValueError(f"dupe_factor must be at least 1, got {dupe_factor}.")


def default_max_predictions(sequence_length):
    """20 at length 128 (BERT), else `int(0.155 · L)` (ELECTRA), at least 1.

    >>> default_max_predictions(128), default_max_predictions(512)
    (20, 79)
    """
    if sequence_length == 128:
        return 20
    return max(1, int(0.155 * sequence_length))


def _segments(objective, documents, sequence_length, rng, separator_id):
    """`(tokens_a, tokens_b or None, pair_label)` for the objective."""
    if objective == "mlm_nsp":
        return nsp_pairs(documents, sequence_length, rng)
    if objective == "sop":
        return sop_pairs(documents, sequence_length, rng)
    if objective == "structbert":
        return structbert_pairs(documents, sequence_length, rng)
    if objective == "span":
        chunks = document_chunks(documents, sequence_length)
    else:  # mlm, electra, clm, plm
        chunks = full_sentences(documents, sequence_length, separator_id)
    return ((tokens, None, 0) for tokens in chunks)


def _shuffled(items, buffer_size, rng):
    """Items through a shuffle buffer of `buffer_size` (tf.data's algorithm)."""
    buffer = []
    for item in items:
        if len(buffer) < buffer_size:
            buffer.append(item)
            continue
        j = rng.randrange(buffer_size)
        yield buffer[j]
        buffer[j] = item
    rng.shuffle(buffer)
    yield from buffer


def pretraining_dataset(
    inputs,
    tokenizer,
    objective="mlm_nsp",
    sequence_length=128,
    batch_size=32,
    max_predictions=None,
    masking="dynamic",
    dupe_factor=10,
    whole_word=False,
    shuffle_buffer=10_000,
    seed=None,
    repeat=True,
    replacement_rates=None,
):
    """Batched pretraining examples `(x, y)` from raw text, for any Keras backend.

    Args:
        inputs: text files and/or folders, or document strings (see
            `read_documents` and `corpus_sources`).
        tokenizer: a `kbert.text.WordPieceTokenizer`, or any object with its
            interface: called on a list of strings it returns lists of ids, and
            it has `vocabulary_size`, `pad_id`, `cls_id`, `sep_id`, `mask_id`
            and `continuation_mask()` (used for `whole_word` and `span`).
        objective: one of `OBJECTIVES` (see the module docstring).
        sequence_length: `L`, at least 8.
        batch_size: `B`; the last partial batch is dropped.
        max_predictions: `P`; `None` gives `default_max_predictions(L)`.
        masking: `"dynamic"` (fresh masks every pass, RoBERTa) or `"static"`
            (`dupe_factor` differently masked copies of each instance, the same
            every pass, BERT).
        dupe_factor: copies per instance under static masking.
        whole_word: whole-word masking (MLM objectives).
        shuffle_buffer: instances in the shuffle buffer (1: no shuffling).
        seed: makes the stream reproducible; `None` draws one.
        repeat: repeat the corpus forever (one pass when False).
        replacement_rates: `(mask_token_rate, random_token_rate)`, the shares of the chosen
            tokens made `[MASK]` and random (BERT Table 8); None: the objective's.

    Returns:
        A `tf.data.Dataset` of `(x, y)` with static shapes (for `clm`, of `x`
        alone: `token_ids` and `padding_mask` int32 `(B, L)`). `x`: `token_ids`,
        `segment_ids`, `padding_mask` int32 `(B, L)`, `mask_positions` int32
        `(B, P)`; for `span` also `span_left`, `span_right`, `span_offsets`
        int32 `(B, P)`; `plm` and `structbert` add theirs (module docstring).
        `y`: `mask_ids` int32 `(B, P)`, `mask_weights` float32
        `(B, P)`, and for `mlm_nsp` and `sop` `pair_labels` int32 `(B,)` (1 =
        random next segment / swapped order), and for `structbert`
        `pair_labels` (0 next, 1 previous, 2 other document), `order_ids`
        int32 and `order_weights` float32 `(B, 3T)`.

    Raises:
        ValueError: unknown objective or masking, sequence length under 8,
            missing file, empty corpus, other out-of-range settings.

    Example:

    ```python
    tokenizer = kbert.text.WordPieceTokenizer("vocab.txt")
    dataset = pretraining_dataset("corpus/", tokenizer, objective="mlm_nsp",
                                  sequence_length=128, batch_size=32, seed=0)
    x, y = next(iter(dataset))
    ```
    """
    if max_predictions is None:
        max_predictions = _default_predictions(objective, sequence_length)
    _check_arguments(objective, masking, sequence_length, batch_size, max_predictions, dupe_factor)
    static = masking == "static"
    instances = _InstanceStream(
        inputs, tokenizer, objective, sequence_length, shuffle_buffer, seed, dupe_factor if static else 0
    )
    masker = _masker(objective, tokenizer, max_predictions, whole_word, replacement_rates)
    shuffler = TrigramShuffler(_special_ids(tokenizer)) if objective == "structbert" else None
    return _ExampleMasker(masker, objective, shuffler).batches(instances.dataset(), batch_size, static, repeat)


def _default_predictions(objective, sequence_length):
    """`P` when `max_predictions` is None: every PLM target, else `default_max_predictions`."""
    if objective == "plm":
        return PermutationMasker(2, []).predictions_for(sequence_length)
    return default_max_predictions(sequence_length)


def _special_ids(tokenizer):
    return [tokenizer.pad_id, tokenizer.cls_id, tokenizer.sep_id]


def _stream_seeds(seed):
    """Three independent seeds from `seed` (a fresh one when None): instances, shuffling, masks."""
    seed = random.SystemRandom().randrange(2**62) if seed is None else int(seed)
    return [int(s) for s in np.random.SeedSequence(seed).generate_state(3, np.uint64) >> 1]


def _stacked(instances):
    """One generator yield: a block of `(token_ids, segment_ids, padding_mask, label, seed)`."""
    token_ids, segment_ids, padding_mask, labels, seeds = zip(*instances)
    return {
        "token_ids": np.stack(token_ids),
        "segment_ids": np.stack(segment_ids),
        "padding_mask": np.stack(padding_mask),
        "pair_labels": np.asarray(labels, np.int32),
        "seed": np.asarray(seeds, np.int64),
    }


class _InstanceStream:
    """The Python side of the pipeline: packed, shuffled instances, each with its mask seed.

    `tf.data.Dataset.from_generator` calls it once per pass; the passes are
    counted here, so each dataset object has its own. Dynamic masking
    (`static_copies=0`) seeds an instance by `(pass, position)`; static
    masking emits `static_copies` copies seeded by `(instance, copy)`, the
    same every pass.
    """

    def __init__(
        self, inputs, tokenizer, objective, sequence_length, shuffle_buffer, seed, static_copies
    ):
        if shuffle_buffer < 1:
            raise ValueError(f"shuffle_buffer must be at least 1, got {shuffle_buffer}.")
        sources = corpus_sources(inputs)
        if next(_documents(sources), None) is None:
            raise ValueError("The corpus is empty: no text in the given files, folders or strings.")
        self.sources = sources
        self.tokenizer = tokenizer
        self.objective = objective
        self.sequence_length = sequence_length
        self.shuffle_buffer = shuffle_buffer
        self.instance_seed, self.shuffle_seed, self.mask_seed = _stream_seeds(seed)
        self.static_copies = static_copies
        self.passes = itertools.count()

    def __call__(self):
        pass_index = next(self.passes)
        shuffle_rng = random.Random(f"{self.shuffle_seed}/{pass_index}")
        stream = _shuffled(self._instances(pass_index), self.shuffle_buffer, shuffle_rng)
        while True:
            block = list(itertools.islice(stream, _BLOCK))
            if not block:
                return
            yield _stacked(block)

    def _instances(self, pass_index):
        """`(token_ids, segment_ids, padding_mask, label, mask seed)` per copy, in corpus order."""
        tokenizer, length = self.tokenizer, self.sequence_length
        documents = _tokenized_documents(_documents(self.sources), tokenizer)
        rng = random.Random(self.instance_seed)
        segments = _segments(self.objective, documents, length, rng, tokenizer.sep_id)
        for index, (tokens_a, tokens_b, label) in enumerate(segments):
            packed = pack(
                tokens_a, tokens_b, length, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id
            )
            for counter in self._mask_counters(index, pass_index):
                yield (*packed, label, (self.mask_seed, counter))

    def _mask_counters(self, index, pass_index):
        """The second halves of instance `index`'s mask seeds: one per copy, unique in the stream."""
        if self.static_copies:
            return range(index * self.static_copies, (index + 1) * self.static_copies)
        return [(pass_index << 40) + index]

    def dataset(self):
        """The instances as an unbatched `tf.data.Dataset` of dicts."""
        rows = tf.TensorSpec((None, self.sequence_length), tf.int32)
        return tf.data.Dataset.from_generator(
            self,
            output_signature={
                "token_ids": rows,
                "segment_ids": rows,
                "padding_mask": rows,
                "pair_labels": tf.TensorSpec((None,), tf.int32),
                "seed": tf.TensorSpec((None, 2), tf.int64),
            },
        ).unbatch()


class _ExampleMasker:
    """The `tf.data` side of the pipeline: masks instances into `(x, y)` and batches them."""

    def __init__(self, masker, objective, shuffler=None):
        self.masker = masker
        self.shuffler = shuffler  # StructBERT's word-structural objective, after the masking
        self.with_pair_labels = objective in ("mlm_nsp", "sop", "structbert")

    def __call__(self, example, seed):
        if self.masker is None:  # clm: the text is its own target
            return {"token_ids": example["token_ids"], "padding_mask": example["padding_mask"]}
        masked = self.masker(example["token_ids"], example["padding_mask"], seed=seed)
        x = {
            "token_ids": masked.pop("token_ids"),
            "segment_ids": example["segment_ids"],
            "padding_mask": example["padding_mask"],
            "mask_positions": masked.pop("mask_positions"),
        }
        y = {"mask_ids": masked.pop("mask_ids"), "mask_weights": masked.pop("mask_weights")}
        x.update(masked)  # span: span_left, span_right, span_offsets; plm: its two masks
        if self.with_pair_labels:
            y["pair_labels"] = example["pair_labels"]
        if self.shuffler is not None:
            self._shuffle_trigrams(x, y, tf.random.experimental.stateless_fold_in(seed, 1))
        return x, y

    def _shuffle_trigrams(self, x, y, seed):
        """Shuffle trigrams of `x`'s unmasked tokens in place; the targets go to `x` and `y`."""
        token_ids = x["token_ids"]
        length = token_ids.shape[-1]
        chosen = tf.one_hot(x["mask_positions"], length) * y["mask_weights"][..., None]
        masked = tf.reduce_sum(chosen, axis=-2) > 0
        if token_ids.shape.rank == 1:  # static masking: one example
            shuffled = self.shuffler(token_ids[None], x["padding_mask"][None], masked[None], seed)
            shuffled = {name: value[0] for name, value in shuffled.items()}
        else:
            shuffled = self.shuffler(token_ids, x["padding_mask"], masked, seed)
        x["token_ids"], x["order_positions"] = shuffled["token_ids"], shuffled["order_positions"]
        y["order_ids"], y["order_weights"] = shuffled["order_ids"], shuffled["order_weights"]

    def mask_example(self, example):
        """Static masking: each example (each copy) by its own seed."""
        return self(example, example["seed"])

    def mask_batch(self, example):
        """Dynamic masking: a batch by its first example's seed, unique to (pass, position)."""
        return self(example, example["seed"][0])

    def batches(self, dataset, batch_size, static, repeat):
        """`dataset` masked (before batching when `static`, after otherwise) and batched."""
        if static:
            dataset = dataset.map(traced_as_written(self.mask_example), tf.data.AUTOTUNE)
        if repeat:
            dataset = dataset.repeat()
        dataset = dataset.batch(batch_size, drop_remainder=True)
        if not static:
            dataset = dataset.map(traced_as_written(self.mask_batch), tf.data.AUTOTUNE)
        return dataset.prefetch(tf.data.AUTOTUNE)


def _masker(objective, tokenizer, max_predictions, whole_word, replacement_rates):
    """The objective's masker (None for `clm`), with its replacement rates unless `replacement_rates` are given."""
    if objective == "clm":
        return None
    special = _special_ids(tokenizer)
    if objective == "plm":
        return PermutationMasker(tokenizer.vocabulary_size, special, max_predictions=max_predictions)
    rates = {}
    if replacement_rates is not None:
        rates = dict(zip(("mask_token_rate", "random_token_rate"), replacement_rates, strict=True))
    vocabulary_size = tokenizer.vocabulary_size
    if objective == "span":
        return SpanMasker(
            vocabulary_size,
            tokenizer.mask_id,
            special,
            max_predictions=max_predictions,
            continuation_mask=tokenizer.continuation_mask(),
            **rates,
        )
    options = dict(
        max_predictions=max_predictions,
        whole_word=whole_word,
        continuation_mask=tokenizer.continuation_mask() if whole_word else None,
        **rates,
    )
    if objective == "electra":
        return MaskedLMMasker.electra(vocabulary_size, tokenizer.mask_id, special, **options)
    return MaskedLMMasker(vocabulary_size, tokenizer.mask_id, special, **options)
