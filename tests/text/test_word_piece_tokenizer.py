"""WordPieceTokenizer: id-for-id agreement with Hugging Face's `BertTokenizerFast`.

The reference is built on the same vocab.txt with `BertTokenizerFast(vocab=path)`
(transformers 5 ignores a `vocab_file=` keyword and keeps only the special
tokens). Vocabularies: one learned with `learn_word_piece_vocabulary`, one
written by hand (pieces that make words segment, and words that cannot), and
one learned from the interpreter's bundled documentation (`pydoc_data`).
"""

import itertools
import unicodedata

import numpy as np
import pytest

pytest.importorskip("tensorflow_text")
transformers = pytest.importorskip("transformers")
topics = pytest.importorskip("pydoc_data.topics").topics

import tensorflow as tf  # noqa: E402

from kbert.text import WordPieceTokenizer, learn_word_piece_vocabulary  # noqa: E402

pytestmark = pytest.mark.backend_independent  # the same on every backend: one run

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

TEXTS = [
    "Café au lait, naïve façade — Ångström units!",
    "Die Straße ist groß. STRASSE ẞ",
    "Ελληνικά: ΟΔΟΣ οδός Σίσυφος, ά έ ή",
    "Русский текст: Привет, мир! Ёлка",
    "中文分词测试，日本語のテキストとEnglish mixed 漢字かな",
    "Emoji 😀🎉 👍🏽 family 👨‍👩‍👧 flags 🇫🇷 and ☃ ♥",
    "Prices: $5.00, €3,50 & 100% off!!! a+b=c <tag attr='x'> ~/path/to/file",
    "`code` \"quotes\" ‘curly’ «guillemets» … ¿qué? ¡sí! (a) [b] {c} ^_^ |x| \\y",
    "Numbers 3.14159 1,000,000 2nd 42nd 1e-5 0x1F",
    "tabs\tand\nnewlines\r\nand  multiple   spaces\u00a0nbsp\u2003em\u3000ideographic",
    "control\x00chars\x07here\u200bzero\u200dwidth\ufeffbom\ufffdrepl\x7fdel\x85nel",
    "supercalifragilisticexpialidocious " + "a" * 120 + " " + "é" * 60,
    "İstanbul DŽ ǅ ﬁ ﬂ Å Ω K hello@example.com http://x.y/z?q=1&r=2#frag",
    "",
    "   \n\t ",
]

# Pieces that segment some words ("un ##aff ##able"), leave others without a
# segmentation ("hugging": no "##ging"), and odd entries ("##", "###").
HAND_VOCABULARY = SPECIALS + [
    "the", "un", "##aff", "##able", "hug", "##s", "runn", "##ing", "run", "a", "##a",
    "##aa", "e", "##e", "é", "##é", "caf", "#", "##", "###", ".", ",", "!", "$", "5",
    "##0", "0", "ω", "ß", "中", "straße", "groß", "ελληνικα", "οδοσ",
]  # fmt: skip
HAND_TEXTS = [
    "Unaffable running hugs huggs hugging RUN runs Cafés café CAFE # ## ###a a##a",
    "aaaaa aaaa $5.00 .,! Ω ω ß STRASSE Straße groß GROSS Ελληνικα ΟΔΟΣ 中中文",
]


def write_vocabulary(path, tokens):
    path.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    return str(path)


def reference(path, **kwargs):
    return transformers.BertTokenizerFast(vocab=path, **kwargs)


def reference_ids(hf, texts):
    return [hf(t, add_special_tokens=False)["input_ids"] for t in texts]


def assert_same_ids(ours, hf, texts):
    expected = reference_ids(hf, texts)
    actual = ours(texts)
    for text, a, e in zip(texts, actual, expected):
        if a != e:
            pieces = [ours.id_to_token(i) for i in a]
            pytest.fail(f"{text!r}\n ours: {pieces}\n   hf: {hf.convert_ids_to_tokens(e)}")


@pytest.fixture(scope="module")
def learned_vocabularies(tmp_path_factory):
    """{lowercase: vocab path}, learned from the test texts and some Python docs."""
    corpus = TEXTS * 3 + list(topics.values())[:10]
    folder = tmp_path_factory.mktemp("vocab")
    return {
        lowercase: write_vocabulary(
            folder / f"vocab_{lowercase}.txt",
            learn_word_piece_vocabulary(corpus, 1500, lowercase=lowercase),
        )
        for lowercase in (True, False)
    }


@pytest.fixture(params=[True, False], ids=["uncased", "cased"])
def learned(request, learned_vocabularies):
    """(lowercase, vocab path) for each casing."""
    return request.param, learned_vocabularies[request.param]


def test_learned_vocabulary_matches_reference(learned):
    lowercase, path = learned
    ours = WordPieceTokenizer(path, lowercase=lowercase)
    hf = reference(path, do_lower_case=lowercase)
    assert_same_ids(ours, hf, TEXTS + HAND_TEXTS)
    ids = ours(TEXTS)
    # Words over 100 characters become [UNK]; "é" * 60 (120 bytes) does not.
    assert ids[11].count(ours.unknown_id) == 1
    assert ours.unknown_id not in ids[0]


@pytest.mark.parametrize(
    "lowercase,strip_accents,split_on_cjk",
    list(itertools.product([True, False], [None, True, False], [True, False])),
)
def test_hand_vocabulary_matches_reference(tmp_path, lowercase, strip_accents, split_on_cjk):
    path = write_vocabulary(tmp_path / "vocab.txt", HAND_VOCABULARY)
    ours = WordPieceTokenizer(
        path, lowercase=lowercase, strip_accents=strip_accents, split_on_cjk=split_on_cjk
    )
    hf = reference(
        path,
        do_lower_case=lowercase,
        strip_accents=strip_accents,
        tokenize_chinese_chars=split_on_cjk,
    )
    assert_same_ids(ours, hf, HAND_TEXTS + TEXTS)


def test_hand_vocabulary_segmentation():
    ours = WordPieceTokenizer(HAND_VOCABULARY)
    pieces = [ours.id_to_token(i) for i in ours("Unaffable running hugging")]
    assert pieces == ["un", "##aff", "##able", "runn", "##ing", "[UNK]"]


def test_python_docs_match_reference(tmp_path):
    """Every line of the interpreter's bundled docs (the main job's default corpus)."""
    path = write_vocabulary(
        tmp_path / "vocab.txt", learn_word_piece_vocabulary(topics.values(), 8000)
    )
    lines = [line for text in topics.values() for line in text.split("\n") if line.strip()]
    assert len(lines) > 500
    ours = WordPieceTokenizer(path)
    assert_same_ids(ours, reference(path), lines)
    assert sum(len(ids) for ids in ours(lines)) > sum(len(line.split()) for line in lines)


@pytest.mark.parametrize("lowercase", [True, False], ids=["uncased", "cased"])
def test_every_character_splits_like_reference(tmp_path, lowercase):
    """Words (steps 0-5) for each character of the Basic Multilingual Plane
    assigned in Unicode 3.2, alone and inside words.

    `tokenizers` classifies characters with older Unicode tables than RE2 and
    ICU; the exceptions are the four characters whose category changed since:
    U+166D (Po then So), U+1734 (Mc then Mn), U+1885 and U+1886 (Lo then Mn).
    """
    path = write_vocabulary(tmp_path / "vocab.txt", SPECIALS)
    hf = reference(path, do_lower_case=lowercase).backend_tokenizer
    ours = WordPieceTokenizer(SPECIALS, lowercase=lowercase)
    old = unicodedata.ucd_3_2_0
    chars = [chr(c) for c in range(1, 0x10000) if old.category(chr(c)) not in ("Cn", "Cs")]
    texts = [f"a{c}b{c} {c}" for c in chars]
    expected = [
        [w for w, _ in hf.pre_tokenizer.pre_tokenize_str(hf.normalizer.normalize_str(t))]
        for t in texts
    ]
    words = ours.split_words(tf.constant(texts)).to_list()
    actual = [[w.decode() for w in row] for row in words]
    differ = {f"U+{ord(c):04X}" for c, a, e in zip(chars, actual, expected) if a != e}
    known = {"U+166D", "U+1734", "U+1885", "U+1886"} if lowercase else {"U+166D"}
    assert differ == known


def test_special_tokens_in_text_match_reference(learned):
    lowercase, path = learned
    ours = WordPieceTokenizer(path, lowercase=lowercase)
    texts = [
        "The [MASK] sat on [CLS]the mat[SEP] [PAD]x[UNK]y",
        "a[MASK]b [[MASK]] [mask] [MASK [MA\x00SK] [SEP][SEP]",
    ]
    assert_same_ids(ours, reference(path, do_lower_case=lowercase), texts)
    assert ours("The [MASK] sat.")[1] == ours.mask_id


def test_max_chars_per_word_matches_reference(tmp_path):
    path = write_vocabulary(tmp_path / "vocab.txt", HAND_VOCABULARY)
    texts = ["aaaa aaaaa aaaaaa éééé ééééé éééééé", "a" * 100 + " " + "a" * 101]
    hf = reference(path, do_lower_case=False)
    assert_same_ids(WordPieceTokenizer(path, lowercase=False), hf, texts)
    hf.backend_tokenizer.model.max_input_chars_per_word = 5
    ours = WordPieceTokenizer(path, lowercase=False, max_chars_per_word=5)
    assert_same_ids(ours, hf, texts)
    assert ours(texts[0]).count(ours.unknown_id) == 2
    # Special tokens written in the text are never too long.
    assert_same_ids(ours, hf, ["a [MASK] b"])


def test_tokenize_in_dataset_map_matches_call(learned_vocabularies):
    ours = WordPieceTokenizer(learned_vocabularies[True])
    expected = ours(TEXTS)

    one_by_one = tf.data.Dataset.from_tensor_slices(TEXTS).map(ours.tokenize)
    assert one_by_one.element_spec.shape.as_list() == [None]
    assert one_by_one.element_spec.dtype == tf.int32
    assert [ids.tolist() for ids in one_by_one.as_numpy_iterator()] == expected

    batched = tf.data.Dataset.from_tensor_slices(TEXTS).batch(4).map(ours.tokenize)
    assert isinstance(batched.element_spec, tf.RaggedTensorSpec)
    actual = [row for batch in batched for row in batch.to_list()]
    assert actual == expected


def test_tokenize_shapes_and_dtypes():
    ours = WordPieceTokenizer(HAND_VOCABULARY)
    batch = ours.tokenize(tf.constant(["the hug", "", "runs"]))
    assert isinstance(batch, tf.RaggedTensor)
    assert batch.dtype == tf.int32 and batch.shape.as_list() == [3, None]
    assert batch.to_list() == [[5, 9], [], [13, 10]]
    single = ours.tokenize("the hug")
    assert isinstance(single, tf.Tensor) and single.shape.rank == 1
    assert single.numpy().tolist() == ours("the hug")


def test_detokenize(learned_vocabularies):
    path = learned_vocabularies[True]
    ours = WordPieceTokenizer(path)
    text = "the parser reads tokens, then it builds a tree. isn't it simple? yes!"
    assert ours.unknown_id not in ours(text)
    assert ours.detokenize(ours(text)) == text
    # Batches, tensors, ragged tensors; [PAD] dropped, other special tokens kept.
    assert ours.detokenize(ours([text, "it is"])) == [text, "it is"]
    assert ours.detokenize(ours.tokenize([text])) == [text]
    padded = [ours.cls_id] + ours("it is") + [ours.sep_id, ours.pad_id, ours.pad_id]
    assert ours.detokenize(np.array(padded)) == "[CLS] it is [SEP]"
    # Spaces as Hugging Face's decode gives them.
    hf = reference(path)
    for sample in [text, "a - b ( c ) 'd' e's f've", "x  y."]:
        ids = ours(sample)
        assert ours.detokenize(ids) == hf.decode(ids, clean_up_tokenization_spaces=True)


def test_vocabulary_api(tmp_path):
    ours = WordPieceTokenizer(HAND_VOCABULARY)
    assert ours.vocabulary == HAND_VOCABULARY
    assert ours.vocabulary_size == len(HAND_VOCABULARY)
    assert (ours.pad_id, ours.unknown_id, ours.cls_id, ours.sep_id, ours.mask_id) == (0, 1, 2, 3, 4)
    assert ours.token_to_id("##aff") == HAND_VOCABULARY.index("##aff")
    assert ours.id_to_token(5) == "the"
    mask = ours.continuation_mask()
    assert mask.dtype == bool and mask.shape == (len(HAND_VOCABULARY),)
    assert mask.tolist() == [t.startswith("##") and len(t) > 2 for t in HAND_VOCABULARY]

    path = tmp_path / "saved" / "vocab.txt"
    path.parent.mkdir()
    ours.save_vocabulary(path)
    assert path.read_text(encoding="utf-8").split("\n")[:-1] == HAND_VOCABULARY
    reloaded = WordPieceTokenizer(path)
    assert reloaded(HAND_TEXTS) == ours(HAND_TEXTS)
    windows = tmp_path / "windows.txt"
    windows.write_bytes("".join(t + "\r\n" for t in HAND_VOCABULARY).encode("utf-8"))
    assert WordPieceTokenizer(windows).vocabulary == HAND_VOCABULARY


def test_custom_unknown_token():
    tokens = ["[PAD]", "<unk>", "[CLS]", "[SEP]", "[MASK]", "a"]
    ours = WordPieceTokenizer(tokens, unknown_token="<unk>")
    assert ours.unknown_id == 1 and ours("a b") == [5, 1]


def test_bad_input(tmp_path):
    with pytest.raises(ValueError, match="not found"):
        WordPieceTokenizer(tmp_path / "missing.txt")
    with pytest.raises(ValueError, match=r"\[MASK\]"):
        WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the"])
    with pytest.raises(ValueError, match=r"<unk>"):
        WordPieceTokenizer(SPECIALS, unknown_token="<unk>")
    with pytest.raises(ValueError, match="twice"):
        WordPieceTokenizer(SPECIALS + ["the", "the"])
    with pytest.raises(ValueError, match="empty"):
        WordPieceTokenizer(write_vocabulary(tmp_path / "empty.txt", []))
    with pytest.raises(ValueError, match="empty token at line 6"):
        WordPieceTokenizer(SPECIALS + [""])
    with pytest.raises(ValueError, match="vocabulary"):
        WordPieceTokenizer({"the": 0})
    with pytest.raises(ValueError, match="max_chars_per_word"):
        WordPieceTokenizer(SPECIALS, max_chars_per_word=0)
    ours = WordPieceTokenizer(SPECIALS)
    with pytest.raises(ValueError, match="strings"):
        ours.tokenize(tf.constant([1, 2]))
    with pytest.raises(ValueError, match="shape"):
        ours.tokenize(tf.constant([["a"]]))
    with pytest.raises(ValueError, match="string or a list of strings"):
        ours([1, 2])
    with pytest.raises(ValueError, match="not in the vocabulary"):
        ours.token_to_id("cat")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        ours.detokenize([0, 7])
    with pytest.raises(ValueError, match="shape"):
        ours.tokenize_with_offsets(tf.constant([["a"]]))


# Offsets: character spans into the original string, as `offset_mapping` of
# `BertTokenizerFast`, and the ids of `tokenize`.

OFFSET_TEXTS = (
    TEXTS
    + HAND_TEXTS
    + [
        "The [MASK] sat[SEP]x on [CLS]the mat [mask] [MA\x00SK]",
        "e\u0301te\u0301 Cafe\u0301 ÉTÉ",  # decomposed accents
        "hu\x07gs a\u200bb \ufeff" + "b" * 120,
    ]
)


def assert_offsets_match_reference(ours, hf, texts):
    ids, starts, ends = ours.tokenize_with_offsets(tf.constant(texts))
    assert ids.to_list() == ours(texts)
    encoded = hf(texts, add_special_tokens=False, return_offsets_mapping=True)
    for text, row, start, end, expected_ids, expected in zip(
        texts, ids.to_list(), starts.to_list(), ends.to_list(),
        encoded["input_ids"], encoded["offset_mapping"],
    ):  # fmt: skip
        assert row == expected_ids, text
        assert list(zip(start, end)) == [tuple(span) for span in expected], text


def test_offsets_match_reference(learned):
    lowercase, path = learned
    ours = WordPieceTokenizer(path, lowercase=lowercase)
    assert_offsets_match_reference(ours, reference(path, do_lower_case=lowercase), OFFSET_TEXTS)


@pytest.mark.parametrize("lowercase", [True, False], ids=["uncased", "cased"])
def test_offsets_match_reference_hand_vocabulary(tmp_path, lowercase):
    path = write_vocabulary(tmp_path / "vocab.txt", HAND_VOCABULARY)
    ours = WordPieceTokenizer(path, lowercase=lowercase, max_chars_per_word=8)
    hf = reference(path, do_lower_case=lowercase)
    hf.backend_tokenizer.model.max_input_chars_per_word = 8
    assert_offsets_match_reference(ours, hf, OFFSET_TEXTS)


@pytest.mark.parametrize("lowercase", [True, False], ids=["uncased", "cased"])
def test_offsets_of_every_third_character_match_reference(tmp_path, lowercase):
    """Characters of the Basic Multilingual Plane (every third one assigned in
    Unicode 3.2), alone and inside words: ids and spans as the reference, but
    for the characters whose Unicode category changed (see the test above)."""
    path = write_vocabulary(tmp_path / "vocab.txt", SPECIALS + ["a", "b", "##a", "##b"])
    old = unicodedata.ucd_3_2_0
    chars = [chr(c) for c in range(1, 0x10000, 3) if old.category(chr(c)) not in ("Cn", "Cs")]
    changed = {"\u166d", "\u1734", "\u1885", "\u1886"}
    texts = [f"a{c}b{c} {c}" for c in chars if c not in changed]
    ours = WordPieceTokenizer(path, lowercase=lowercase)
    assert_offsets_match_reference(ours, reference(path, do_lower_case=lowercase), texts)


def test_offsets_hand_worked():
    ours = WordPieceTokenizer(HAND_VOCABULARY, max_chars_per_word=9)
    text = "Unaffáble, Café! hugging [MASK] hu\x07gs aaaaaaaaaa"
    ids, starts, ends = ours.tokenize_with_offsets(text)
    pieces = [ours.id_to_token(i) for i in ids.numpy()]
    spans = [text[s:e] for s, e in zip(starts.numpy(), ends.numpy())]
    assert list(zip(pieces, spans)) == [
        ("un", "Un"), ("##aff", "aff"), ("##able", "áble"),  # the accent is stripped
        (",", ","),  # punctuation is a word of its own
        ("caf", "Caf"), ("##e", "é"),
        ("!", "!"),
        ("[UNK]", "hugging"),  # no segmentation: the whole word
        ("[MASK]", "[MASK]"),
        ("hug", "hu\x07g"), ("##s", "s"),  # the control character is deleted inside the span
        ("[UNK]", "aaaaaaaaaa"),  # over max_chars_per_word
    ]  # fmt: skip
    assert ids.dtype == starts.dtype == ends.dtype == tf.int32


def test_offsets_in_dataset_map():
    ours = WordPieceTokenizer(HAND_VOCABULARY)
    texts = ["the runs", "", "Ω ω café"]
    expected = [row.to_list() for row in ours.tokenize_with_offsets(texts)]
    dataset = tf.data.Dataset.from_tensor_slices(texts).batch(2).map(ours.tokenize_with_offsets)
    batches = [[part.to_list() for part in batch] for batch in dataset]
    assert [sum((b[k] for b in batches), []) for k in range(3)] == expected
    assert expected[2][2] == [1, 3, 7, 8]  # ends of "ω" "ω" "caf" "##e" (Ω lower-cased)
