"""examples/masking_strategies.py: the offline tagging task's labels, checked by hand."""

import importlib.util
import pathlib

import numpy as np

from kbert.text import WordPieceTokenizer

PATH = pathlib.Path(__file__).resolve().parents[2] / "examples" / "masking_strategies.py"
spec = importlib.util.spec_from_file_location("masking_strategies", PATH)
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)


def test_word_tags():
    tags = [example.TAGS[example.word_tag(word)] for word in ["the", "Python", "NULL", "A", "3.11", ",", "x2"]]
    assert tags == ["lower", "Capitalised", "UPPER", "Capitalised", "number", "punctuation", "number"]


def test_tags_sit_on_first_pieces_of_the_original_words():
    tokenizer = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "##s",
                                    "py", "##thon", "nan", ",", "42"])
    inputs, labels = example.tagging_data(["The cats, Python NaN 42", "the"], tokenizer, length=12)
    # [CLS] the cat ##s , py ##thon nan 42 [SEP]
    np.testing.assert_array_equal(inputs["token_ids"][0, :10], [2, 5, 6, 7, 11, 8, 9, 10, 12, 3])
    lower, cap, number, punct = (example.TAGS.index(t) for t in ("lower", "Capitalised", "number", "punctuation"))
    ignored = example.IGNORED
    assert labels[0].tolist() == [ignored, cap, lower, ignored, punct, cap, ignored, cap, number, ignored,
                                  ignored, ignored]
    assert labels[1].tolist() == [ignored, lower] + [ignored] * 10
    np.testing.assert_array_equal(inputs["padding_mask"][1], [1, 1, 1] + [0] * 9)
