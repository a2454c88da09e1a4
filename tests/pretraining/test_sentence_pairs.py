"""NSP / SOP / FULL-SENTENCES / chunk builders (pure Python, backend-independent).

The corpora use unique, increasing token ids, so every token tells which
document and which position it came from.
"""

import math
import random

import numpy as np
import pytest

from kbert.pretraining.sentence_pairs import (
    document_chunks,
    full_sentences,
    nsp_pairs,
    sop_pairs,
    truncate_pair,
)


def make_corpus(num_documents, sentences=(1, 30), tokens=(1, 12), seed=0):
    """Documents of sentences of consecutive ids; returns `(documents, document_of_id)`."""
    rng = random.Random(seed)
    documents, owner, next_id = [], [], 0
    for d in range(num_documents):
        document = []
        for _ in range(rng.randint(*sentences)):
            size = rng.randint(*tokens)
            document.append(list(range(next_id, next_id + size)))
            next_id += size
            owner.extend([d] * size)
        documents.append(document)
    return documents, np.asarray(owner)


def is_run(tokens):
    """Contiguous increasing ids (one stretch of text)."""
    return all(b == a + 1 for a, b in zip(tokens, tokens[1:]))


@pytest.mark.parametrize("sequence_length", [16, 64, 128])
def test_nsp_pairs_layout(sequence_length):
    documents, owner = make_corpus(200)
    pairs = list(nsp_pairs(documents, sequence_length, seed=1))
    assert len(pairs) > 100
    labels = set()
    for tokens_a, tokens_b, label in pairs:
        labels.add(label)
        assert tokens_a and tokens_b
        assert len(tokens_a) + len(tokens_b) <= sequence_length - 3
        # Truncation trims only the ends, so each side stays one stretch of text.
        assert is_run(tokens_a) and is_run(tokens_b)
        if label == 0:  # B is the text right after A in the same document
            assert owner[tokens_a[0]] == owner[tokens_b[0]]
            assert tokens_b[0] > tokens_a[-1]
    assert labels == {0, 1}


def test_nsp_random_segment_comes_from_another_recent_document():
    documents, owner = make_corpus(300, sentences=(2, 20))
    pairs = list(nsp_pairs(documents, 64, seed=3, document_buffer=4))
    current = [owner[a[0]] for a, _, _ in pairs]
    other = [owner[b[0]] for _, b, label in pairs if label == 1]
    current_of_random = [c for c, (_, _, label) in zip(current, pairs) if label == 1]
    gaps = np.asarray(current_of_random) - np.asarray(other)
    # The buffer holds the current document and the three before it; after the
    # first few documents, 10 tries essentially always find another one.
    assert np.all((gaps >= 0) & (gaps <= 3))
    assert np.mean(gaps[len(gaps) // 10 :] == 0) < 0.01


def test_nsp_label_balance():
    # Chunks of exactly two sentences (40 tokens each, target 61), short
    # targets off: every chunk draws its label with p=0.5; only a document's
    # last single sentence is forced random (at most 1 chunk in ~67). BERT
    # forces every one-sentence chunk to "random", which on real text lifts
    # the label-1 share above 50%.
    documents = [
        [list(range(d * 4000 + s * 40, d * 4000 + s * 40 + 40)) for s in range(100)]
        for d in range(60)
    ]
    pairs = list(nsp_pairs(documents, 64, seed=0, short_seq_prob=0.0))
    labels = np.asarray([label for _, _, label in pairs], float)
    bound = 3 * math.sqrt(0.25 / len(labels)) + 0.01  # 3-sigma + the forced chunks
    assert abs(labels.mean() - 0.5) < bound, (labels.mean(), bound)


def test_nsp_short_target_with_probability_short_seq_prob():
    # 10-token sentences: a full target (125) gives 125-token pairs except at a
    # document's end; BERT draws a short target once per document.
    documents = [
        [list(range(d * 1000 + s * 10, d * 1000 + s * 10 + 10)) for s in range(60)]
        for d in range(400)
    ]
    first_pairs = {}  # document -> length of its first pair (pairs come in document order)
    for a, b, _ in nsp_pairs(documents, 128, seed=0):
        first_pairs.setdefault(a[0] // 1000, len(a) + len(b))
    first_pairs = list(first_pairs.values())
    assert len(first_pairs) == len(documents)
    share = np.mean(np.asarray(first_pairs) < 115)
    # P(short target) · P(randint(2, 125) < ~110): chunks overshoot the target
    # by up to one 10-token sentence.
    expected = 0.1 * 108 / 124
    assert abs(share - expected) < 3 * math.sqrt(expected * (1 - expected) / len(documents)), share


def test_nsp_is_deterministic_given_seed():
    documents, _ = make_corpus(50)
    first = list(nsp_pairs(documents, 32, seed=7))
    assert first == list(nsp_pairs(iter(documents), 32, seed=random.Random(7)))
    assert first != list(nsp_pairs(documents, 32, seed=8))


def test_sop_pairs_order_and_balance():
    documents, owner = make_corpus(400, sentences=(1, 30))
    pairs = list(sop_pairs(documents, 64, seed=2))
    labels = np.asarray([label for _, _, label in pairs], float)
    for tokens_a, tokens_b, label in pairs:
        assert tokens_a and tokens_b and len(tokens_a) + len(tokens_b) <= 61
        assert is_run(tokens_a) and is_run(tokens_b)
        assert owner[tokens_a[0]] == owner[tokens_b[0]]  # never another document
        first, second = (tokens_a, tokens_b) if label == 0 else (tokens_b, tokens_a)
        assert first[-1] < second[0]
    # Every label is an independent p=0.5 draw: 3-sigma binomial bound.
    assert abs(labels.mean() - 0.5) < 3 * math.sqrt(0.25 / len(labels))


def test_sop_splits_a_one_sentence_document():
    pairs = list(sop_pairs([[[1, 2, 3, 4, 5]], [[9]]], 16, seed=0))
    assert len(pairs) == 1  # the one-token document gives nothing
    tokens_a, tokens_b, label = pairs[0]
    assert sorted(tokens_a + tokens_b) == [1, 2, 3, 4, 5]


def test_full_sentences_packing():
    documents, owner = make_corpus(100, sentences=(1, 20), tokens=(1, 20))
    sequence_length, separator = 128, -1
    examples = list(full_sentences(documents, sequence_length, separator_id=separator))
    sentences = [s for d in documents for s in d]
    starts = {s[0] for s in sentences}
    for i, tokens in enumerate(examples):
        assert len(tokens) <= sequence_length - 2
        real = [t for t in tokens if t != separator]
        assert real[0] in starts and (real[-1] + 1 in starts or real[-1] + 1 == len(owner))
        # A separator exactly where the document changes.
        for left, right in zip(tokens, tokens[1:]):
            if separator not in (left, right):
                assert right == left + 1 and owner[left] == owner[right]
            elif right == separator:
                assert owner[left] != owner[tokens[tokens.index(left) + 2]]
        if i + 1 < len(examples):  # greedy: the next sentence did not fit
            nxt = examples[i + 1]
            next_sentence = next(s for s in sentences if s[0] == nxt[0])
            assert len(tokens) + len(next_sentence) > sequence_length - 2 - 1
    # Nothing lost or reordered.
    flat = [t for tokens in examples for t in tokens if t != separator]
    assert flat == list(range(len(owner)))
    # Sentences of at most 20 tokens pack 126-token examples nearly full.
    fill = np.mean([len(t) for t in examples[:-1]]) / (sequence_length - 2)
    assert fill > 0.9, fill


def test_full_sentences_cuts_overlong_sentences():
    examples = list(full_sentences([[list(range(20))]], 8, separator_id=99))
    assert examples == [list(range(0, 6)), list(range(6, 12)), list(range(12, 18)), [18, 19]]


def test_document_chunks():
    documents, owner = make_corpus(30)
    chunks = list(document_chunks(documents, 32))
    for chunk in chunks:
        assert 1 <= len(chunk) <= 30 and is_run(chunk)
        assert owner[chunk[0]] == owner[chunk[-1]]
    for left, right in zip(chunks, chunks[1:]):
        if owner[left[0]] == owner[right[0]]:
            assert len(left) == 30  # only a document's last chunk is short
    assert [t for c in chunks for t in c] == list(range(len(owner)))


def test_truncate_pair_trims_the_longer_side_at_both_ends():
    fronts = backs = 0
    rng = random.Random(0)
    for _ in range(200):
        a, b = list(range(10)), [100, 101]
        truncate_pair(a, b, 6, rng)
        assert len(a) == 4 and b == [100, 101]
        fronts += a[0] > 0
        backs += a[-1] < 9
    assert fronts > 50 and backs > 50



def test_errors():
    with pytest.raises(ValueError, match="sequence_length must be at least 5"):
        list(nsp_pairs([[[1]]], 4))
    with pytest.raises(ValueError, match="sequence_length must be at least 5"):
        list(sop_pairs([[[1]]], 3))
    with pytest.raises(ValueError, match="sequence_length must be at least 4"):
        list(full_sentences([[[1]]], 3, separator_id=0))
    with pytest.raises(ValueError, match="document_buffer"):
        list(nsp_pairs([[[1]]], 16, document_buffer=0))
