"""pretraining_dataset: reading, layouts, static shapes, masking modes, seeds, errors.

Most tests use `WordTokenizer`, a tiny stand-in with `kbert.text`'s tokenizer
interface whose ids can be read back; the last one runs the real
`WordPieceTokenizer` end to end.
"""

import zlib

import numpy as np
import pytest
import tensorflow as tf

from kbert.pretraining.pretraining_dataset import (
    LONG_LINE,
    corpus_sources,
    pretraining_dataset,
    read_documents,
    split_sentences,
)

pytestmark = pytest.mark.backend_independent  # tf.data maps: the Keras backend plays no part

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4


class WordTokenizer:
    """Whitespace words; a word of more than 4 letters is a piece plus a `##` piece.

    Ids below `vocabulary_size // 2` start words, the others are `##` pieces.
    """

    pad_id, unknown_id, cls_id, sep_id, mask_id = PAD, UNK, CLS, SEP, MASK

    def __init__(self, vocabulary_size=2000):
        self.vocabulary_size = vocabulary_size
        self.half = vocabulary_size // 2

    def continuation_mask(self):
        return np.arange(self.vocabulary_size) >= self.half

    def _ids(self, word):
        ids = [5 + zlib.crc32(word[:4].encode()) % (self.half - 5)]
        if len(word) > 4:
            ids.append(self.half + zlib.crc32(word[4:].encode()) % self.half)
        return ids

    def __call__(self, texts):
        return [[i for word in text.lower().split() for i in self._ids(word)] for text in texts]


def make_documents(count, seed=0, sentences=(2, 12), words=(3, 12)):
    rng = np.random.default_rng(seed)
    vocabulary = [f"w{i}" for i in range(300)] + [f"long{i}word" for i in range(200)]
    documents = []
    for _ in range(count):
        lines = [
            " ".join(rng.choice(vocabulary, rng.integers(*words))) + "."
            for _ in range(rng.integers(*sentences))
        ]
        documents.append("\n".join(lines))
    return documents


DOCUMENTS = make_documents(120)
X_KEYS = {"token_ids", "segment_ids", "padding_mask", "mask_positions"}
Y_KEYS = {"mask_ids", "mask_weights"}
KEYS = {  # objective -> (x keys, y keys)
    "mlm_nsp": (X_KEYS, Y_KEYS | {"pair_labels"}),
    "sop": (X_KEYS, Y_KEYS | {"pair_labels"}),
    "mlm": (X_KEYS, Y_KEYS),
    "electra": (X_KEYS, Y_KEYS),
    "span": (X_KEYS | {"span_left", "span_right", "span_offsets"}, Y_KEYS),
}


def make_dataset(objective="mlm_nsp", **kwargs):
    arguments = dict(
        objective=objective,
        sequence_length=32,
        batch_size=8,
        seed=0,
        shuffle_buffer=64,
        repeat=False,
    )
    arguments.update(kwargs)
    return pretraining_dataset(arguments.pop("inputs", DOCUMENTS), WordTokenizer(), **arguments)


def batches(dataset, limit=None):
    out = []
    for x, y in dataset:
        out.append(({k: v.numpy() for k, v in x.items()}, {k: v.numpy() for k, v in y.items()}))
        if limit and len(out) == limit:
            break
    return out


def stack(batch_list, part, name):
    index = 0 if part == "x" else 1
    return np.concatenate([b[index][name] for b in batch_list])


def unmasked(x, y):
    """The packed token ids before masking: the targets written back."""
    ids = x["token_ids"].copy()
    rows, slots = np.nonzero(y["mask_weights"] > 0)
    ids[rows, x["mask_positions"][rows, slots]] = y["mask_ids"][rows, slots]
    return ids


# ---------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------


def test_split_sentences():
    sentences = split_sentences("It rains. Does it? Yes!  Fine")
    assert sentences == ["It rains.", "Does it?", "Yes!", "Fine"]
    assert split_sentences("v1.2 is out") == ["v1.2 is out"]
    assert split_sentences("我来了。你好！好的") == ["我来了。", "你好！", "好的"]


def test_read_documents_from_files_and_folders(tmp_path):
    long_line = " ".join(["Word word word."] * 20)  # > LONG_LINE characters
    assert len(long_line) > LONG_LINE
    (tmp_path / "a.txt").write_text("One.\nTwo.\n\n\n  \nThree.\n" + long_line + "\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("Four.\r\nFive.")
    (tmp_path / "sub" / ".hidden").write_text("Never read.")
    documents = list(read_documents(tmp_path))
    assert documents == [
        ["One.", "Two."],
        ["Three."] + ["Word word word."] * 20,
        ["Four.", "Five."],
    ]
    assert list(read_documents(str(tmp_path / "a.txt")))[0] == ["One.", "Two."]
    # Mixed: paths and document strings (strings with white space are text).
    mixed = list(read_documents([tmp_path / "sub" / "b.txt", "Six.\nSeven eight."]))
    assert mixed == [["Four.", "Five."], ["Six.", "Seven eight."]]
    assert corpus_sources(iter(["a b", "Single."])) == [("text", "a b"), ("text", "Single.")]
    assert corpus_sources([str(tmp_path / "a.txt")]) == [("file", str(tmp_path / "a.txt"))]


def test_files_stream_into_examples(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    for i in range(3):
        (folder / f"part{i}.txt").write_text("\n\n".join(DOCUMENTS[i * 40 : (i + 1) * 40]))
    from_files = batches(make_dataset(inputs=folder))
    from_strings = batches(make_dataset())
    assert len(from_files) == len(from_strings) > 5
    for (xf, _), (xs, _) in zip(from_files, from_strings):
        np.testing.assert_array_equal(xf["token_ids"], xs["token_ids"])


# ---------------------------------------------------------------------------
# Contract: keys, shapes, dtypes
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("masking", ["dynamic", "static"])
@pytest.mark.parametrize("objective", sorted(KEYS))
def test_static_shapes_and_keys(objective, masking):
    dataset = make_dataset(objective, masking=masking, max_predictions=6, dupe_factor=2)
    x_spec, y_spec = dataset.element_spec
    x_keys, y_keys = KEYS[objective]
    assert set(x_spec) == x_keys and set(y_spec) == y_keys
    for name, spec in x_spec.items():
        width = 6 if name.startswith(("mask", "span")) else 32
        assert spec.shape == (8, width) and spec.dtype == tf.int32, name
    assert y_spec["mask_ids"].shape == (8, 6) and y_spec["mask_ids"].dtype == tf.int32
    assert y_spec["mask_weights"].shape == (8, 6) and y_spec["mask_weights"].dtype == tf.float32
    if "pair_labels" in y_spec:
        assert y_spec["pair_labels"].shape == (8,) and y_spec["pair_labels"].dtype == tf.int32
    x, y = batches(dataset, limit=1)[0]
    assert x["token_ids"].shape == (8, 32) and y["mask_weights"].shape == (8, 6)


def test_default_max_predictions():
    assert make_dataset(sequence_length=128).element_spec[0]["mask_positions"].shape[1] == 20
    assert make_dataset(sequence_length=64).element_spec[0]["mask_positions"].shape[1] == 9


# ---------------------------------------------------------------------------
# Layouts
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("objective", ["mlm_nsp", "sop"])
def test_pair_layout(objective):
    data = batches(make_dataset(objective, sequence_length=48))
    labels = stack(data, "y", "pair_labels")
    assert set(labels) == {0, 1}
    for x, y in data:
        ids = unmasked(x, y)
        for row in range(len(ids)):
            length = x["padding_mask"][row].sum()
            np.testing.assert_array_equal(x["padding_mask"][row], np.arange(48) < length)
            assert ids[row, 0] == CLS and ids[row, length - 1] == SEP
            first_sep = int(np.flatnonzero(ids[row] == SEP)[0])
            assert 1 < first_sep < length - 2  # both segments non-empty
            assert list(np.flatnonzero(ids[row, :length] == SEP)) == [first_sep, length - 1]
            expected = np.zeros(48, np.int32)
            expected[first_sep + 1 : length] = 1
            np.testing.assert_array_equal(x["segment_ids"][row], expected)
            assert not ids[row, length:].any()


@pytest.mark.parametrize("objective", ["mlm", "electra", "span"])
def test_single_segment_layout(objective):
    data = batches(make_dataset(objective, sequence_length=64))
    fills = []
    for x, y in data:
        ids = unmasked(x, y)
        assert not x["segment_ids"].any()
        for row in range(len(ids)):
            length = x["padding_mask"][row].sum()
            assert ids[row, 0] == CLS and ids[row, length - 1] == SEP
            fills.append(length / 64)
    if objective == "span":  # one document per example; a document's tail is short
        assert np.mean(np.asarray(fills) == 1.0) > 0.3
    else:  # FULL-SENTENCES crosses documents (with a [SEP]) and packs nearly full
        assert np.mean(fills) > 0.85, np.mean(fills)
        inner = [unmasked(x, y)[:, 1:-1] for x, y in data]
        assert any((block == SEP).any() for block in inner)


def test_clm_examples_are_the_packed_text_itself():
    dataset = make_dataset("clm", sequence_length=64)
    spec = dataset.element_spec
    assert set(spec) == {"token_ids", "padding_mask"}  # x alone: the text is its own target
    assert all(s.shape == (8, 64) and s.dtype == tf.int32 for s in spec.values())
    mlm = batches(make_dataset("mlm", sequence_length=64, max_predictions=64))
    clm = [{k: v.numpy() for k, v in x.items()} for x in dataset]
    assert len(clm) == len(mlm)
    for x, (mlm_x, mlm_y) in zip(clm, mlm):  # the same packing (FULL-SENTENCES), unmasked
        np.testing.assert_array_equal(x["token_ids"], unmasked(mlm_x, mlm_y))
        np.testing.assert_array_equal(x["padding_mask"], mlm_x["padding_mask"])
        assert not (x["token_ids"] == MASK).any()


def test_masking_statistics_through_the_pipeline():
    data = batches(make_dataset("mlm", sequence_length=128, batch_size=16, max_predictions=128))
    for x, y in data:
        ids = unmasked(x, y)
        real = x["padding_mask"].sum(axis=1)
        expected = np.maximum(1, np.round(0.15 * real))  # half to even, as Python's round
        np.testing.assert_array_equal(y["mask_weights"].sum(axis=1), expected)
        positions = x["mask_positions"][y["mask_weights"] > 0]
        rows = np.nonzero(y["mask_weights"] > 0)[0]
        assert not np.isin(ids[rows, positions], [PAD, CLS, SEP]).any()
        assert np.all(x["padding_mask"][rows, positions] == 1)


@pytest.mark.parametrize("objective", ["mlm", "span"])
@pytest.mark.parametrize("mask_rate, random_rate", [(1.0, 0.0), (0.0, 0.0), (0.0, 1.0), (0.8, 0.2)])
def test_replacement_rates(objective, mask_rate, random_rate):
    """BERT Table 8's choices: the chosen tokens become [MASK], a random token or stay as asked."""
    data = batches(make_dataset(objective, sequence_length=64, batch_size=16,
                                replacement_rates=(mask_rate, random_rate)))
    ids, targets = [], []
    for x, y in data:
        rows, slots = np.nonzero(y["mask_weights"] > 0)
        ids.append(x["token_ids"][rows, x["mask_positions"][rows, slots]])
        targets.append(y["mask_ids"][rows, slots])
    ids, targets = np.concatenate(ids), np.concatenate(targets)
    masked, kept = ids == MASK, (ids == targets) & (ids != MASK)
    assert len(ids) > 500
    # Shares of [MASK] / unchanged (a random draw may hit the original): within 0.05 of the rates.
    assert abs(masked.mean() - mask_rate) < 0.05
    assert abs(kept.mean() - (1 - mask_rate - random_rate)) < 0.05
    if random_rate == 0.0:
        assert not (~masked & ~kept).any()


def test_whole_word_option():
    tokenizer = WordTokenizer()
    data = batches(make_dataset("mlm_nsp", whole_word=True, sequence_length=64))
    continuation = tokenizer.continuation_mask()
    for x, y in data:
        ids = unmasked(x, y)
        chosen = np.zeros(ids.shape, bool)
        rows, slots = np.nonzero(y["mask_weights"] > 0)
        chosen[rows, x["mask_positions"][rows, slots]] = True
        pieces = continuation[ids] & (np.roll(ids, 1, axis=1) > SEP)
        # A piece is chosen exactly when the token before it is.
        assert np.array_equal(chosen[pieces], np.roll(chosen, 1, axis=1)[pieces])


# ---------------------------------------------------------------------------
# Randomness
# ---------------------------------------------------------------------------


def masked_rows(data):
    """Sorted rows of (masked ids, positions): a pass's content, whatever its order."""
    rows = [
        tuple(x["token_ids"][i]) + tuple(x["mask_positions"][i])
        for x, _ in data
        for i in range(len(x["token_ids"]))
    ]
    return sorted(rows)


def original_rows(data):
    return sorted(tuple(row) for x, y in data for row in unmasked(x, y))


def test_static_masking_repeats_masks_every_pass():
    dataset = make_dataset("mlm_nsp", masking="static", dupe_factor=3, batch_size=1)
    first, second = batches(dataset), batches(dataset)
    assert masked_rows(first) == masked_rows(second)
    order = [[x["token_ids"].tolist() for x, _ in data] for data in (first, second)]
    assert order[0] != order[1]  # reshuffled
    # dupe_factor differently masked copies of every instance.
    originals = original_rows(first)
    assert len(originals) == 3 * len(set(originals))
    assert len(set(masked_rows(first))) > 2 * len(set(originals))


def test_dynamic_masking_differs_every_pass():
    dataset = make_dataset("mlm_nsp", batch_size=1)
    first, second = batches(dataset), batches(dataset)
    assert original_rows(first) == original_rows(second)  # the same instances
    same = set(masked_rows(first)) & set(masked_rows(second))
    assert len(same) < 0.05 * len(first)


def test_same_seed_same_stream():
    def stream(seed, objective):
        dataset = make_dataset(objective, inputs=DOCUMENTS[:15], seed=seed, repeat=True)
        return batches(dataset, limit=40)  # several passes over the corpus

    for objective in ("mlm_nsp", "span"):
        a, b, c = stream(3, objective), stream(3, objective), stream(4, objective)
        for (xa, ya), (xb, yb) in zip(a, b):
            for name in xa:
                np.testing.assert_array_equal(xa[name], xb[name])
            for name in ya:
                np.testing.assert_array_equal(ya[name], yb[name])
        assert any(
            not np.array_equal(xa["token_ids"], xc["token_ids"]) for (xa, _), (xc, _) in zip(a, c)
        )


def test_seed_is_independent_of_the_global_seed():
    tf.random.set_seed(1)
    a = batches(make_dataset(seed=5), limit=3)
    tf.random.set_seed(2)
    b = batches(make_dataset(seed=5), limit=3)
    for (xa, _), (xb, _) in zip(a, b):
        np.testing.assert_array_equal(xa["token_ids"], xb["token_ids"])


def test_nsp_label_balance_in_the_pipeline():
    documents = make_documents(300, seed=1, sentences=(20, 30), words=(3, 6))
    dataset = make_dataset("mlm_nsp", inputs=documents, sequence_length=64)
    labels = stack(batches(dataset), "y", "pair_labels")
    # BERT forces one-sentence chunks to "random", so the share sits a bit over 0.5.
    assert 0.45 < labels.mean() < 0.6, labels.mean()


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


def test_errors(tmp_path):
    tokenizer = WordTokenizer()
    with pytest.raises(ValueError, match="not found: .*missing.txt"):
        pretraining_dataset(tmp_path / "missing.txt", tokenizer)
    with pytest.raises(ValueError, match="not found"):
        pretraining_dataset([str(tmp_path / "nowhere")], tokenizer)
    (tmp_path / "empty.txt").write_text("\n \n\n")
    with pytest.raises(ValueError, match="corpus is empty"):
        pretraining_dataset(tmp_path / "empty.txt", tokenizer)
    (tmp_path / "folder").mkdir()
    with pytest.raises(ValueError, match="corpus is empty"):
        pretraining_dataset(tmp_path / "folder", tokenizer)
    with pytest.raises(ValueError, match="corpus is empty"):
        pretraining_dataset([], tokenizer)
    with pytest.raises(ValueError, match="Unknown objective 'gpt'"):
        pretraining_dataset(DOCUMENTS, tokenizer, objective="gpt")
    with pytest.raises(ValueError, match="sequence_length must be at least 8, got 7"):
        pretraining_dataset(DOCUMENTS, tokenizer, sequence_length=7)
    with pytest.raises(ValueError, match="Unknown masking"):
        pretraining_dataset(DOCUMENTS, tokenizer, masking="sometimes")
    with pytest.raises(ValueError, match="max_predictions must be in"):
        pretraining_dataset(DOCUMENTS, tokenizer, sequence_length=16, max_predictions=17)
    with pytest.raises(ValueError, match="dupe_factor"):
        pretraining_dataset(DOCUMENTS, tokenizer, masking="static", dupe_factor=0)
    with pytest.raises(ValueError, match="batch_size"):
        pretraining_dataset(DOCUMENTS, tokenizer, batch_size=0)
    with pytest.raises(ValueError, match="paths or document strings"):
        pretraining_dataset([3], tokenizer)


# ---------------------------------------------------------------------------
# The real tokenizer
# ---------------------------------------------------------------------------


def test_end_to_end_with_word_piece_tokenizer(tmp_path):
    text = pytest.importorskip("kbert.text", reason="kbert.text (tensorflow-text) is not available")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(
        "\n\n".join(
            "The quick brown fox jumps over the lazy dog. " * 3
            + "\nPack my box with five dozen liquor jugs!\nSphinx of black quartz, judge my vow."
            for _ in range(30)
        )
    )
    vocabulary = text.learn_word_piece_vocabulary(corpus.read_text().splitlines(), 200)
    tokenizer = text.WordPieceTokenizer(vocabulary)
    for objective in ("mlm_nsp", "span"):
        dataset = pretraining_dataset(
            corpus,
            tokenizer,
            objective=objective,
            sequence_length=32,
            batch_size=4,
            seed=0,
            shuffle_buffer=16,
            whole_word=True,
        )
        x, y = next(iter(dataset))
        ids = x["token_ids"].numpy()
        assert ids.shape == (4, 32) and (ids[:, 0] == tokenizer.cls_id).all()
        assert (ids == tokenizer.mask_id).any()
        assert ids.max() < tokenizer.vocabulary_size
        assert y["mask_weights"].numpy().sum() > 0
