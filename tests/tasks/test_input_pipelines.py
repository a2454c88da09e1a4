"""Classification, tagging, multiple-choice and text-to-text pipelines: layout, label alignment, static shapes.

Label alignment is checked against Hugging Face's `BertTokenizerFast` with
`is_split_into_words=True` (its `word_ids`), built on the same vocab.txt, and
for SentencePiece against the `sentencepiece` package, word by word.
"""

import numpy as np
import pytest

pytest.importorskip("tensorflow_text")
transformers = pytest.importorskip("transformers")
sentencepiece = pytest.importorskip("sentencepiece")

import tensorflow as tf  # noqa: E402

from kbert.tasks.input_pipelines import (  # noqa: E402
    index_batches,
    multiple_choice_dataset,
    text_classification_dataset,
    text_to_text_dataset,
    token_classification_dataset,
)
from kbert.text import SentencePieceTokenizer, train_sentence_piece  # noqa: E402

pytestmark = pytest.mark.backend_independent  # tf.data and TensorFlow tokenizers whatever the backend: one run

VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [
    "the", "cat", "sat", "on", "mat", "dog", "ran", "un", "##aff", "##able", "u", "s", ".",
    "paris", "new", "york", "##s", ",", "a", "good", "film", "bad",
]  # fmt: skip
TAGS = ["B-LOC", "B-MISC", "I-LOC", "O"]
SENTENCES = [
    {"words": ["The", "cats", "sat", "in", "New", "York", "."],
     "tags": ["O", "O", "O", "O", "B-LOC", "I-LOC", "O"]},
    {"words": ["Unaffable", "U.S.", "dogs"], "tags": ["O", "B-LOC", "O"]},
    {"words": ["Paris"], "tags": ["B-LOC"]},
    {"words": ["a", "good", "film", ",", "the", "mat", "ran", "on", "the", "dog", "."],
     "tags": ["O"] * 9 + ["B-MISC", "O"]},
]  # fmt: skip


def batches(dataset):
    return [tf.nest.map_structure(lambda t: t.numpy(), element) for element in dataset]


def stacked(dataset):
    """Every batch's arrays concatenated along the batch axis: `(x, y)` of NumPy arrays."""
    elements = batches(dataset)
    return tuple(
        {k: np.concatenate([e[i][k] for e in elements]) for k in elements[0][i]} for i in range(2)
    )


def test_index_batches():
    assert [b.tolist() for b in index_batches(5, 2).as_numpy_iterator()] == [[0, 1], [2, 3], [4]]
    training = index_batches(7, 3, training=True, seed=1)
    assert training.element_spec.shape.as_list() == [3]
    epochs = [np.concatenate(list(training.as_numpy_iterator())) for _ in range(2)]
    assert all(len(set(e)) == 6 and set(e) <= set(range(7)) for e in epochs)
    assert epochs[0].tolist() != epochs[1].tolist()  # reshuffled every epoch
    with pytest.raises(ValueError, match="pad_final_batch is for evaluation"):
        index_batches(5, 2, training=True, pad_final_batch=True)
    with pytest.raises(ValueError, match="do not fill one training batch"):
        index_batches(3, 4, training=True)
    with pytest.raises(ValueError, match="no examples"):
        index_batches(0, 4)
    with pytest.raises(ValueError, match="batch_size"):
        index_batches(3, 0)


def test_text_classification_pairs_and_labels(tokenizer):
    examples = [
        {"text": "The cat sat", "text_pair": "on the mat", "label": "b"},
        {"text": "the dog", "text_pair": "ran ran ran ran ran ran", "label": "a"},
        {"text": "good", "text_pair": "", "label": "b"},
    ]
    x, y = stacked(text_classification_dataset(examples, tokenizer, ["a", "b"], 10, 2))
    cls, sep = tokenizer.cls_id, tokenizer.sep_id
    first = [cls, *tokenizer("The cat sat"), sep, *tokenizer("on the mat"), sep]
    assert x["token_ids"][0].tolist() == first + [0]
    assert x["segment_ids"][0].tolist() == [0] * 5 + [1] * 4 + [0]
    assert x["padding_mask"][0].tolist() == [1] * 9 + [0]
    # Round robin: 7 tokens of room, "the dog" (2) and six "ran" -> 2 + 5.
    assert x["token_ids"][1].tolist() == [cls, 5, 10, sep] + [11] * 5 + [sep]
    assert x["token_ids"][2].tolist() == [cls, 24, sep, sep] + [0] * 6
    assert y["labels"].tolist() == [1, 0, 1] and y["labels"].dtype == np.int32


def test_text_classification_regression_padding_and_prediction(tokenizer):
    examples = [
        {"text": "good film", "label": 4.5},
        {"text": "bad", "label": "0.25"},
        {"text": "the"},
    ]
    with pytest.raises(ValueError, match="Example 2 has no 'label'"):
        text_classification_dataset(examples, tokenizer)
    dataset = text_classification_dataset(examples[:2], tokenizer, None, 6, 4, pad_final_batch=True)
    assert dataset.element_spec[0]["token_ids"].shape.as_list() == [4, 6]
    ((x, y),) = batches(dataset)
    assert y["labels"].dtype == np.float32
    np.testing.assert_array_equal(y["labels"], [4.5, 0.25, np.nan, np.nan])
    assert x["token_ids"][:2, :3].tolist() == [[2, 24, 25], [2, 26, 3]]
    # Padded rows are empty: no token, no label.
    assert not x["token_ids"][2:].any() and not x["padding_mask"][2:].any()
    # No labels: x alone, for predict.
    unlabelled = text_classification_dataset([{"text": "the"}], tokenizer, ["a"], 6, 1)
    assert set(unlabelled.element_spec) == {"token_ids", "segment_ids", "padding_mask"}


def test_text_classification_training_static_shapes(tokenizer):
    examples = [{"text": t, "label": str(i % 2)} for i, t in enumerate(["the cat"] * 5)]
    dataset = text_classification_dataset(
        examples, tokenizer, ["0", "1"], 8, 2, training=True, seed=0
    )
    x_spec, y_spec = dataset.element_spec
    assert {k: s.shape.as_list() for k, s in x_spec.items()} == {
        "token_ids": [2, 8],
        "segment_ids": [2, 8],
        "padding_mask": [2, 8],
    }
    assert y_spec["labels"].shape.as_list() == [2] and y_spec["labels"].dtype == tf.int32
    assert len(batches(dataset)) == 2  # the partial batch is dropped


def test_text_classification_errors(tokenizer, tmp_path):
    with pytest.raises(
        ValueError, match=r"Example 1: label 'c' is not one of the labels \['a', 'b'\]"
    ):
        text_classification_dataset(
            [{"text": "x", "label": "a"}, {"text": "y", "label": "c"}], tokenizer, ["a", "b"]
        )
    with pytest.raises(ValueError, match="Example 0 has no 'text_pair'"):
        text_classification_dataset(
            [{"text": "x", "label": "a"}, {"text": "y", "text_pair": "z", "label": "a"}],
            tokenizer,
            ["a"],
        )
    t5_like = SentencePieceTokenizer(train_sentence_piece(["the cat sat on the mat"] * 20, 30))
    with pytest.raises(ValueError, match=r"no \[CLS\], \[SEP\]"):
        text_classification_dataset([{"text": "x", "label": "a"}], t5_like, ["a"])


def word_aligned_reference(hf, sentences, length):
    """(input_ids, labels) from `BertTokenizerFast(is_split_into_words=True)` and its word_ids."""
    encoded = hf([s["words"] for s in sentences], is_split_into_words=True, truncation=True,
                 max_length=length, padding="max_length")  # fmt: skip
    labels = []
    for i, sentence in enumerate(sentences):
        row, previous = [], None
        for word in encoded.word_ids(i):
            first = word is not None and word != previous
            row.append(TAGS.index(sentence["tags"][word]) if first else -1)
            previous = word
        labels.append(row)
    return np.array(encoded["input_ids"]), np.array(labels)


@pytest.mark.parametrize("length", [16, 7])  # 7 cuts the first and the last sentence
def test_token_classification_matches_reference(tokenizer, vocab_path, length):
    dataset = token_classification_dataset(SENTENCES, tokenizer, TAGS, length, 3)
    x, y = stacked(dataset)
    expected_ids, expected_labels = word_aligned_reference(
        transformers.BertTokenizerFast(vocab=vocab_path), SENTENCES, length
    )
    np.testing.assert_array_equal(x["token_ids"], expected_ids)
    np.testing.assert_array_equal(y["labels"], expected_labels)
    np.testing.assert_array_equal(x["padding_mask"], expected_ids != 0)
    assert not x["segment_ids"].any()


def test_token_classification_hand_worked(tokenizer):
    sentences = [
        {"words": ["Unaffable", "U.S.", "\u200b", "cat"], "tags": ["O", "B-LOC", "B-MISC", "O"]}
    ]
    ((x, y),) = batches(
        token_classification_dataset(sentences, tokenizer, TAGS, 12, 2, pad_final_batch=True)
    )
    pieces = [tokenizer.id_to_token(i) for i in x["token_ids"][0]]
    assert pieces == [
        "[CLS]",
        "un",
        "##aff",
        "##able",
        "u",
        ".",
        "s",
        ".",
        "[UNK]",
        "cat",
        "[SEP]",
        "[PAD]",
    ]
    # A word's tag on its first sub-token; the zero-width word keeps its tag on [UNK].
    assert y["labels"][0].tolist() == [-1, 3, -1, -1, 0, -1, -1, -1, 1, 3, -1, -1]
    assert y["labels"][1].tolist() == [-1] * 12 and not x["padding_mask"][1].any()


def test_token_classification_training_shapes_and_errors(tokenizer):
    dataset = token_classification_dataset(SENTENCES, tokenizer, TAGS, 16, 2, training=True, seed=3)
    x_spec, y_spec = dataset.element_spec
    assert x_spec["token_ids"].shape.as_list() == y_spec["labels"].shape.as_list() == [2, 16]
    with pytest.raises(ValueError, match="Sentence 1, word 2: label 'B-PER'"):
        token_classification_dataset(
            [SENTENCES[2], {"words": ["a", "b", "c"], "tags": ["O", "O", "B-PER"]}], tokenizer, TAGS
        )
    with pytest.raises(ValueError, match="Sentence 0 has 2 words and 1 tags"):
        token_classification_dataset([{"words": ["a", "b"], "tags": ["O"]}], tokenizer, TAGS)


def test_token_classification_sentence_piece():
    corpus = [" ".join(s["words"]) for s in SENTENCES] * 20
    model = train_sentence_piece(corpus, 60, control_symbols=("[CLS]", "[SEP]"))
    tokenizer = SentencePieceTokenizer(model)
    reference = sentencepiece.SentencePieceProcessor(model_proto=model)
    x, y = stacked(token_classification_dataset(SENTENCES, tokenizer, TAGS, 40, 4))
    for row, sentence in enumerate(SENTENCES):
        pieces = [reference.encode(word) for word in sentence["words"]]
        ids = [tokenizer.cls_id, *[i for p in pieces for i in p], tokenizer.sep_id]
        labels = (
            [-1]
            + [
                label
                for p, t in zip(pieces, sentence["tags"])
                for label in [TAGS.index(t)] + [-1] * (len(p) - 1)
            ]
            + [-1]
        )
        assert x["token_ids"][row, : len(ids)].tolist() == ids
        assert y["labels"][row].tolist() == labels + [-1] * (40 - len(labels))


def test_multiple_choice(tokenizer):
    examples = [
        {"context": "the cat", "choices": ["sat", "ran", "sat on the mat"], "label": 2},
        {"context": "a dog", "choices": ["ran", "sat", "the"], "label": 0},
    ]
    dataset = multiple_choice_dataset(examples, tokenizer, 8, 2, training=True, seed=0)
    assert dataset.element_spec[0]["token_ids"].shape.as_list() == [2, 3, 8]
    x, y = stacked(multiple_choice_dataset(examples, tokenizer, 8, 2))
    pairs = [
        {"text": e["context"], "text_pair": c, "label": "x"} for e in examples for c in e["choices"]
    ]
    expected, _ = stacked(text_classification_dataset(pairs, tokenizer, ["x"], 8, 6))
    for name in ("token_ids", "segment_ids", "padding_mask"):
        np.testing.assert_array_equal(x[name].reshape(6, 8), expected[name])
    assert y["labels"].tolist() == [2, 0]
    with pytest.raises(ValueError, match="Example 1 has 2 choices where example 0 has 3"):
        multiple_choice_dataset(
            [examples[0], {"context": "a", "choices": ["b", "c"], "label": 0}], tokenizer
        )
    with pytest.raises(ValueError, match="Example 1: label 3 is not a choice index"):
        multiple_choice_dataset([examples[0], {**examples[1], "label": 3}], tokenizer)


TEXT_TO_TEXT = [
    {"source": "sentiment: the good film", "target": "positive"},
    {"source": "sentiment: the bad film", "target": "negative"},
    {"source": "sentiment: a film", "target": "the plot was good"},
]


def test_text_to_text_layout_against_sentencepiece():
    corpus = [text for example in TEXT_TO_TEXT for text in example.values()] * 20
    model = train_sentence_piece(corpus, 40)
    reference = sentencepiece.SentencePieceProcessor(model_proto=model)
    tokenizer = SentencePieceTokenizer(model)
    elements = batches(text_to_text_dataset(TEXT_TO_TEXT, tokenizer, sequence_length=12, batch_size=2,
                                            pad_final_batch=True))
    x = {name: np.concatenate([e[0][name] for e in elements]) for name in elements[0][0]}
    y = np.concatenate([e[1] for e in elements])
    targets = [reference.encode(e["target"])[:11] + [1] for e in TEXT_TO_TEXT]  # cut to 12 with the end id 1
    longest = max(map(len, targets))
    assert y.shape == (4, longest) and min(map(len, targets)) < longest  # the longest; a padded fourth row
    for row, example in enumerate(TEXT_TO_TEXT):
        source = reference.encode(example["source"])[:11] + [1]
        assert x["encoder_token_ids"][row].tolist() == source + [0] * (12 - len(source))
        assert x["encoder_padding_mask"][row].tolist() == [1] * len(source) + [0] * (12 - len(source))
        target = targets[row] + [0] * (longest - len(targets[row]))
        assert y[row].tolist() == target
        assert x["decoder_token_ids"][row].tolist() == [0] + target[:-1]  # shifted right behind pad
        assert x["decoder_padding_mask"][row].tolist() == [int(t != 0) for t in target]
    assert not y[3].any() and not x["encoder_padding_mask"][3].any()  # pad targets: no loss


def test_text_to_text_lengths_sources_alone_and_errors(tokenizer):
    model = train_sentence_piece([e["source"] for e in TEXT_TO_TEXT] * 20, 30)
    sentence_piece = SentencePieceTokenizer(model, add_end=True)  # its own end id is not doubled
    x, y = next(iter(text_to_text_dataset(TEXT_TO_TEXT[:2], sentence_piece, 32, target_length=5, batch_size=2)))
    assert y.shape == (2, 5) and int(tf.reduce_sum(tf.cast(y == 1, tf.int32))) == 2
    assert int(tf.reduce_sum(tf.cast(x["encoder_token_ids"] == 1, tf.int32))) == 2
    x = next(iter(text_to_text_dataset([{"source": "a film"}], sentence_piece, 8, batch_size=1)))
    assert sorted(x) == ["encoder_padding_mask", "encoder_token_ids"]
    with pytest.raises(ValueError, match="WordPieceTokenizer has no end or padding token"):
        text_to_text_dataset(TEXT_TO_TEXT, tokenizer)


def _lengths(dataset):
    """Per batch: its token length and its rows' real lengths."""
    return [(x["padding_mask"].shape[-1], x["padding_mask"].sum(-1).tolist()) for x, _ in batches(dataset)]


def _bucket(rows, buckets=(8, 16, 32)):
    return min(bucket for bucket in buckets if bucket >= max(rows))


@pytest.mark.backend_independent
def test_length_buckets_in_training_and_evaluation(tokenizer):
    """Evaluation: in order, each batch the rows of fixed padding cut to its bucket. Training: each epoch
    every example once, in batches of neighbours in length order (one window here), cut to their bucket."""
    words = ["the", "cat", "sat", "on", "mat", "dog"]
    examples = [{"text": " ".join(words[: 1 + i % 6] * (1 + i // 6)), "label": "good" if i % 2 else "bad"}
                for i in range(24)]  # 3 to 26 tokens
    options = dict(labels=["bad", "good"], sequence_length=32, batch_size=4, buckets=[8, 16, 32])
    fixed = batches(text_classification_dataset(examples, tokenizer, **{**options, "buckets": None}))
    bucketed = batches(text_classification_dataset(examples, tokenizer, **options))
    assert len(bucketed) == len(fixed) == 6
    for (x, y), (fixed_x, fixed_y) in zip(bucketed, fixed):
        length = _bucket(fixed_x["padding_mask"].sum(-1))
        assert {name: value.shape for name, value in x.items()} == dict.fromkeys(x, (4, length))
        for name in x:
            np.testing.assert_array_equal(x[name], fixed_x[name][:, :length])
        np.testing.assert_array_equal(y["labels"], fixed_y["labels"])
    training = text_classification_dataset(examples, tokenizer, training=True, seed=3, **options)
    assert int(training.cardinality()) == 6
    everything = sorted(np.concatenate([x["padding_mask"].sum(-1) for x, _ in fixed]).tolist())
    orders = []
    for _ in range(2):  # two epochs
        epoch = _lengths(training)
        assert all(length == _bucket(rows) for length, rows in epoch)
        assert sum(sorted((sorted(rows) for _, rows in epoch)), []) == everything
        orders.append([rows for _, rows in epoch])
    assert orders[0] != orders[1]  # the batches are shuffled anew each epoch
