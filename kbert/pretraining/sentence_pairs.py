"""Pretraining examples from documents of token-id sentences (pure Python).

A *document* is a list of sentences and a *sentence* a list of token ids. The
builders read documents from any iterable, one at a time, so a corpus larger
than memory streams through them; each yields token-id segments that `pack`
turns into fixed-length `[CLS] A [SEP] B [SEP]` rows.

- `nsp_pairs`: BERT's next-sentence pairs (`create_instances_from_document` in
  google-research/bert, docs/algorithms.md §3). BERT draws the random B segment from
  any document of the corpus; here it comes from a bounded buffer of the most
  recently read documents (`document_buffer`, the current one included), which
  keeps memory bounded on a streamed corpus.
- `sop_pairs`: ALBERT's sentence-order pairs: two consecutive segments of one
  document, swapped with p=0.5 (label 1 = swapped).
- `structbert_pairs`: StructBERT's sentence-structural pairs: the next
  segment, the previous one, or one from another document, 1/3 each.
- `full_sentences`: RoBERTa's FULL-SENTENCES packing: whole contiguous
  sentences, crossing document boundaries with an extra separator.
- `document_chunks`: single contiguous segments of one document, cut at
  `sequence_length - 2` tokens regardless of sentence ends (SpanBERT's inputs).

Randomness comes from a `random.Random` (pass an int seed or a generator), so
the same seed gives the same examples.

>>> documents = [[[5, 6, 7], [8, 9]], [[10, 11], [12]]]
>>> all(len(a) + len(b) <= 16 - 3 for a, b, _ in nsp_pairs(documents, 16, seed=0))
True
"""

import collections
import random

# StructBERT's sentence-structural labels.
NEXT_SEGMENT, PREVIOUS_SEGMENT, OTHER_DOCUMENT = 0, 1, 2

# BERT's `short_seq_prob` and `random_next_sentence` tries (docs/algorithms.md §3).
SHORT_SEQUENCE_PROBABILITY = 0.1
_RANDOM_DOCUMENT_TRIES = 10


def _as_rng(seed):
    return seed if isinstance(seed, random.Random) else random.Random(seed)


def _check_length(sequence_length, special_tokens):
    if sequence_length < special_tokens + 2:
        raise ValueError(
            f"sequence_length must be at least {special_tokens + 2}, got {sequence_length}."
        )


def _clean(documents):
    """Documents without empty sentences; empty documents dropped."""
    for document in documents:
        document = [list(sentence) for sentence in document if len(sentence)]
        if document:
            yield document


def truncate_pair(tokens_a, tokens_b, max_tokens, rng):
    """Trim the longer list one token at a time, front or back with p=0.5, in place.

    >>> a, b = [1, 2, 3, 4], [5]
    >>> truncate_pair(a, b, 3, random.Random(0)); len(a) + len(b)
    3
    """
    while len(tokens_a) + len(tokens_b) > max_tokens:
        longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def _chunks(document, target_length):
    """BERT's chunking: `(start, end)` runs of sentences reaching `target_length` tokens."""
    start, length = 0, 0
    for i, sentence in enumerate(document):
        length += len(sentence)
        if i == len(document) - 1 or length >= target_length:
            yield start, i + 1
            start, length = i + 1, 0


def _target_length(max_tokens, rng, short_seq_prob):
    if rng.random() < short_seq_prob:
        return rng.randint(2, max_tokens)
    return max_tokens


def _flatten(sentences):
    return [token for sentence in sentences for token in sentence]


def _pair_setup(sequence_length, seed, document_buffer):
    """`(rng, max_tokens, buffer)` of a pair builder that draws from other documents."""
    _check_length(sequence_length, 3)
    if document_buffer < 1:
        raise ValueError(f"document_buffer must be at least 1, got {document_buffer}.")
    return _as_rng(seed), sequence_length - 3, collections.deque(maxlen=document_buffer)


def _random_segment(buffer, current, length, rng):
    """Tokens of whole sentences, at least `length` of them if the document has them, from a
    random start sentence of a random document of `buffer` other than `current` (when one is
    found in `_RANDOM_DOCUMENT_TRIES` tries)."""
    for _ in range(_RANDOM_DOCUMENT_TRIES):
        other = rng.randint(0, len(buffer) - 1)
        if other != current:
            break
    other_document = buffer[other]
    tokens = []
    for sentence in other_document[rng.randint(0, len(other_document) - 1) :]:
        tokens.extend(sentence)
        if len(tokens) >= length:
            break
    return tokens


def nsp_pairs(
    documents,
    sequence_length,
    seed=None,
    short_seq_prob=SHORT_SEQUENCE_PROBABILITY,
    document_buffer=1000,
):
    """BERT next-sentence-prediction pairs, streamed.

    For each document: a target length (`sequence_length - 3`, or with
    probability `short_seq_prob` a uniform one in `[2, sequence_length - 3]`);
    sentences fill a chunk up to it; A is the chunk's first `randint(1, n-1)`
    sentences; B is the rest of the chunk, or, with p=0.5 (always for a
    one-sentence chunk), text from a random start sentence of another document
    in the buffer, filled to the remaining length, the unused chunk sentences
    being reused for the next chunk. The pair is then truncated to
    `sequence_length - 3` tokens.

    Args:
        documents: iterable of documents (lists of token-id lists).
        sequence_length: packed length `L`, with `[CLS] A [SEP] B [SEP]`.
        seed: int, `None` or a `random.Random`.
        short_seq_prob: probability of a shorter target length.
        document_buffer: how many recent documents the random B is drawn from.

    Yields:
        `(tokens_a, tokens_b, is_random_next)`: `is_random_next` is 1 when B
        comes from another document (BERT's NSP label), else 0.

    >>> pairs = list(nsp_pairs([[[1, 2], [3, 4], [5, 6]]], 16, seed=1))
    >>> all(len(a) >= 1 and len(b) >= 1 for a, b, _ in pairs)
    True
    """
    rng, max_tokens, buffer = _pair_setup(sequence_length, seed, document_buffer)
    for document in _clean(documents):
        buffer.append(document)
        current = len(buffer) - 1
        target = _target_length(max_tokens, rng, short_seq_prob)
        i = 0
        chunk, chunk_length = [], 0
        while i < len(document):
            chunk.append(document[i])
            chunk_length += len(document[i])
            if i == len(document) - 1 or chunk_length >= target:
                a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                tokens_a = _flatten(chunk[:a_end])
                if len(chunk) == 1 or rng.random() < 0.5:
                    is_random_next = 1
                    tokens_b = _random_segment(buffer, current, target - len(tokens_a), rng)
                    i -= len(chunk) - a_end  # the unused sentences start the next chunk
                else:
                    is_random_next = 0
                    tokens_b = _flatten(chunk[a_end:])
                truncate_pair(tokens_a, tokens_b, max_tokens, rng)
                yield tokens_a, tokens_b, is_random_next
                chunk, chunk_length = [], 0
            i += 1


def _split_chunk(chunk, rng):
    """`(A, B)`, two consecutive parts of a chunk of sentences: at a sentence boundary, or
    inside a lone sentence at a uniform token boundary; None for a one-token chunk."""
    if len(chunk) >= 2:
        a_end = rng.randint(1, len(chunk) - 1)
        return _flatten(chunk[:a_end]), _flatten(chunk[a_end:])
    if len(chunk[0]) >= 2:
        cut = rng.randint(1, len(chunk[0]) - 1)
        return chunk[0][:cut], chunk[0][cut:]
    return None


def sop_pairs(documents, sequence_length, seed=None, short_seq_prob=SHORT_SEQUENCE_PROBABILITY):
    """ALBERT sentence-order pairs: consecutive segments, swapped with p=0.5.

    Chunks and the A/B split follow `nsp_pairs`, but B is always the rest of
    the chunk. A one-sentence chunk is split inside the sentence at a uniform
    token boundary (ALBERT draws a random-document B there instead, which would
    make some label-1 pairs differ by topic rather than order); a one-token
    chunk yields nothing.

    Yields:
        `(tokens_a, tokens_b, is_swapped)`, `is_swapped` 1 when B precedes A in
        the document.

    >>> [(a, b, s) for a, b, s in sop_pairs([[[1, 2], [3, 4]]], 16, seed=0)]
    [([3, 4], [1, 2], 1)]
    """
    _check_length(sequence_length, 3)
    rng = _as_rng(seed)
    max_tokens = sequence_length - 3
    for document in _clean(documents):
        target = _target_length(max_tokens, rng, short_seq_prob)
        for start, end in _chunks(document, target):
            split = _split_chunk(document[start:end], rng)
            if split is None:
                continue
            tokens_a, tokens_b = split
            is_swapped = int(rng.random() < 0.5)
            if is_swapped:
                tokens_a, tokens_b = tokens_b, tokens_a
            truncate_pair(tokens_a, tokens_b, max_tokens, rng)
            yield tokens_a, tokens_b, is_swapped


def structbert_pairs(documents, sequence_length, seed=None,
                     short_seq_prob=SHORT_SEQUENCE_PROBABILITY, document_buffer=1000):
    """StructBERT's sentence-structural pairs: next, previous or another document's, 1/3 each.

    Chunks and the A/B split follow `sop_pairs` (two consecutive parts of a
    chunk). Then, with probability 1/3 each (StructBERT §2.2): `NEXT_SEGMENT`
    (0), A then B; `PREVIOUS_SEGMENT` (1), B then A, so the second segment is
    the one that came before; `OTHER_DOCUMENT` (2), A then text from a random
    start sentence of another document in the buffer (as `nsp_pairs` draws
    it). The first document, with no other in the buffer yet, gives no
    other-document pairs: its draws of label 2 are skipped, which keeps each
    label's probability at 1/3.

    Yields:
        `(tokens_a, tokens_b, label)`.

    >>> pairs = list(structbert_pairs([[[1, 2], [3, 4]], [[5, 6], [7, 8]]], 16, seed=3))
    >>> [label for _, _, label in pairs]
    [1, 2]
    """
    rng, max_tokens, buffer = _pair_setup(sequence_length, seed, document_buffer)
    for document in _clean(documents):
        buffer.append(document)
        target = _target_length(max_tokens, rng, short_seq_prob)
        for start, end in _chunks(document, target):
            split = _split_chunk(document[start:end], rng)
            label = rng.randrange(3)
            if split is None or (label == OTHER_DOCUMENT and len(buffer) == 1):
                continue
            tokens_a, tokens_b = split
            if label == PREVIOUS_SEGMENT:
                tokens_a, tokens_b = tokens_b, tokens_a
            elif label == OTHER_DOCUMENT:
                tokens_b = _random_segment(buffer, len(buffer) - 1, target - len(tokens_a), rng)
            truncate_pair(tokens_a, tokens_b, max_tokens, rng)
            yield tokens_a, tokens_b, label


def full_sentences(documents, sequence_length, separator_id):
    """RoBERTa FULL-SENTENCES: whole contiguous sentences packed up to `sequence_length - 2`.

    Sentences are added while they fit; the next sentence that does not fit
    starts the next example. When packing crosses into a new document a
    `separator_id` token goes between them (it counts towards the length). A
    sentence longer than `sequence_length - 2` is cut into pieces of that size.

    Yields:
        token-id lists, each at most `sequence_length - 2` long, to pack as
        `[CLS] tokens [SEP]`.

    >>> list(full_sentences([[[1, 2], [3]], [[4, 5]]], 8, separator_id=99))
    [[1, 2, 3, 99, 4, 5]]
    """
    _check_length(sequence_length, 2)
    max_tokens = sequence_length - 2
    current = []
    for document in _clean(documents):
        new_document = bool(current)
        for sentence in document:
            for begin in range(0, len(sentence), max_tokens):
                piece = sentence[begin : begin + max_tokens]
                needed = len(piece) + int(new_document)
                if current and len(current) + needed > max_tokens:
                    yield current
                    current, new_document = [], False
                if new_document:
                    current.append(separator_id)
                    new_document = False
                current.extend(piece)
    if current:
        yield current


def document_chunks(documents, sequence_length):
    """Single segments: each document's tokens cut into runs of `sequence_length - 2`.

    The last run of a document is shorter; runs never cross documents.

    >>> list(document_chunks([[[1, 2, 3], [4, 5]]], 5))
    [[1, 2, 3], [4, 5]]
    """
    _check_length(sequence_length, 2)
    max_tokens = sequence_length - 2
    for document in _clean(documents):
        tokens = _flatten(document)
        for begin in range(0, len(tokens), max_tokens):
            yield tokens[begin : begin + max_tokens]
