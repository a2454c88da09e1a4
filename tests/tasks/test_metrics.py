"""The fine-tuning metrics against hand-worked cases and the official scripts' edge cases.

SQuAD numbers are worked by hand from the rules of the official `evaluate-v1.1.py`
and `evaluate-v2.0.py`; entity cases from seqeval's documented examples and its
conlleval chunk rules; GLUE values from their formulas in NumPy.
"""

import warnings

import numpy as np
import pytest

from kbert.tasks.metrics import (
    GLUE_METRICS,
    answer_f1,
    entity_f1,
    glue_scores,
    normalize_answer,
    squad_scores,
    text_to_text_scores,
)

pytestmark = pytest.mark.backend_independent  # NumPy and scikit-learn metrics: the same on every backend, one run


def squad(*questions, context="unused"):
    """A SQuAD JSON dict with one paragraph; each question is (id, [gold texts])."""
    qas = [{"id": qid, "answers": [{"text": text, "answer_start": 0} for text in answers]}
           for qid, answers in questions]
    return {"version": "test", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]}


# --- SQuAD ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text, normalized", [
    ("The Cat", "cat"),                      # lower case, article
    ("an apple a day", "apple day"),         # every article, as whole words only
    ("theory anthem", "theory anthem"),      # ... not inside words
    ("U.S.A.", "usa"),                       # punctuation removed, not replaced by spaces
    ("rock-n-roll", "rocknroll"),
    ("  many\t\nspaces  ", "many spaces"),   # whitespace collapsed
    ("the, the!", ""),                       # nothing left
    ("Ünïcode «quotes»", "ünïcode «quotes»"),  # only ASCII punctuation is removed
])
def test_normalize_answer(text, normalized):
    assert normalize_answer(text) == normalized


@pytest.mark.parametrize("gold, prediction, f1", [
    ("cat cat dog", "cat cat cat", 2 / 3),   # repeated tokens match as often as both hold them
    ("a cat sat", "The cat.", 2 * 1 * 0.5 / 1.5),  # P = 1/1, R = 1/2 after normalization
    ("cat", "dog", 0.0),
    ("", "", 1.0),                           # both empty: agree
    ("the", "", 1.0),                        # normalizes to empty
    ("", "cat", 0.0),
    ("cat", "an", 0.0),
])
def test_answer_f1(gold, prediction, f1):
    assert answer_f1(gold, prediction) == pytest.approx(f1, abs=1e-12)


def test_squad_v1_max_over_gold_answers():
    dataset = squad(("q1", ["Denver Broncos", "The Denver Broncos", "Broncos"]),
                    ("q2", ["Santa Clara, California", "Levi's Stadium"]),
                    ("q3", ["1990"]))
    predictions = {"q1": "the broncos!", "q2": "Levi's Stadium in Santa Clara", "q3": "1990s"}
    scores = squad_scores(predictions, dataset)
    # q1 exact via "Broncos"; q2 best F1: vs "Levi's Stadium": P 2/5 (levis stadium in santa clara), R 2/2 -> 4/7,
    #   vs "Santa Clara, California": P 2/5, R 2/3 -> 0.5; q3: 0
    assert scores == {
        "exact": pytest.approx(100 / 3), "f1": pytest.approx(100 * (1 + 4 / 7 + 0) / 3), "total": 3,
        "HasAns_exact": pytest.approx(100 / 3), "HasAns_f1": pytest.approx(100 * (1 + 4 / 7) / 3),
        "HasAns_total": 3,
    }


def test_squad_v2_unanswerable_and_split():
    dataset = squad(("has1", ["the mat"]), ("has2", ["cat"]), ("no1", []), ("no2", []))
    predictions = {"has1": "Mat", "has2": "", "no1": "", "no2": "a mat"}
    scores = squad_scores(predictions, dataset)
    assert scores == {
        "exact": 50.0, "f1": 50.0, "total": 4,
        "HasAns_exact": 50.0, "HasAns_f1": 50.0, "HasAns_total": 2,  # "" on an answerable question is wrong
        "NoAns_exact": 50.0, "NoAns_f1": 50.0, "NoAns_total": 2,     # only "" is right when there is no answer
    }


def test_squad_gold_answers_that_normalize_to_nothing_are_dropped():
    # evaluate-v2.0.py keeps only gold answers with text left after normalization; if none is left the
    # gold is "", yet the question still counts as answerable (it has answers).
    dataset = squad(("q1", ["The", "cat"]), ("q2", ["the"]))
    scores = squad_scores({"q1": "the", "q2": ""}, dataset)
    assert scores["exact"] == 50.0 and scores["HasAns_total"] == 2 and "NoAns_total" not in scores


def test_squad_missing_prediction_scores_zero_with_a_warning():
    dataset = squad(("q1", ["cat"]), ("q2", ["dog"]))
    with pytest.warns(UserWarning, match="1 of 2 questions have no prediction.*'q2'"):
        scores = squad_scores({"q1": "cat", "extra": "ignored"}, dataset)
    assert scores["exact"] == 50.0 and scores["total"] == 2


def test_squad_best_no_answer_threshold():
    dataset = squad(("q1", ["cat"]), ("q2", []), ("q3", ["dog"]), ("q4", []))
    predictions = {"q1": "cat", "q2": "x", "q3": "bird", "q4": ""}
    probabilities = {"q1": 0.2, "q2": 0.6, "q3": 0.9, "q4": 0.1}
    scores = squad_scores(predictions, dataset, no_answer_probabilities=probabilities)
    # All "": 2 right (q2, q4). Answering in rising order: q4 +0, q1 +1 -> 3 (thresh 0.2), q2 -1, q3 +0.
    assert scores["exact"] == 50.0
    assert (scores["best_exact"], scores["best_exact_thresh"]) == (75.0, 0.2)
    assert (scores["best_f1"], scores["best_f1_thresh"]) == (75.0, 0.2)
    assert isinstance(scores["best_f1_thresh"], float)


def test_squad_best_threshold_counts_partial_f1():
    dataset = squad(("q1", ["big red cat"]), ("q2", []))
    scores = squad_scores({"q1": "red cat", "q2": "x"}, dataset, no_answer_probabilities={"q1": 0.5, "q2": 0.4})
    # All "": 1 (q2). q2 first: -1 -> 0; then q1: + F1 0.8 (exact 0) -> 0.8: never above 1.
    assert (scores["best_f1"], scores["best_f1_thresh"]) == (50.0, 0.0)
    scores = squad_scores({"q1": "red cat", "q2": ""}, dataset, no_answer_probabilities={"q1": 0.5, "q2": 0.4})
    assert scores["best_f1"] == pytest.approx(90.0) and scores["best_f1_thresh"] == 0.5
    assert (scores["best_exact"], scores["best_exact_thresh"]) == (50.0, 0.0)


@pytest.mark.parametrize("predictions, dataset, probabilities, message", [
    ({"q1": "a"}, {"paragraphs": []}, None, "'data' list"),
    ([("q1", "a")], squad(("q1", ["a"])), None, "must be a dict"),
    ({"q1": None}, squad(("q1", ["a"])), None, "question 'q1' must be a string"),
    ({"q1": "a"}, squad(("q1", ["a"]), ("q1", ["b"])), None, "'q1' appears twice"),
    ({"q1": "a"}, {"data": [{"paragraphs": [{"qas": [{"id": "q1"}]}]}]}, None, "'answers' list"),
    ({}, {"data": []}, None, "no questions"),
    ({"q1": "a", "q2": ""}, squad(("q1", ["a"]), ("q2", [])), {"q1": 0.3}, "no value for question 'q2'"),
])
def test_squad_bad_input(predictions, dataset, probabilities, message):
    with pytest.raises(ValueError, match=message):
        squad_scores(predictions, dataset, no_answer_probabilities=probabilities)


# --- entity F1 -----------------------------------------------------------------------------

def scores(true, predicted):
    result = entity_f1(true, predicted)
    return result["precision"], result["recall"], result["f1"]


def test_entity_f1_seqeval_examples():
    # seqeval's own docstring examples (micro average).
    true = [["O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    predicted = [["O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    assert scores(true, predicted) == (0.5, 0.5, 0.5)
    true = [["O", "O", "B-MISC", "I-MISC", "B-MISC", "O", "O"], ["B-PER", "I-PER", "O"]]
    predicted = [["O", "O", "B-MISC", "I-MISC", "B-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    assert scores(true, predicted) == pytest.approx((2 / 3, 2 / 3, 2 / 3))


@pytest.mark.parametrize("true, predicted, expected", [
    # I- after O starts a chunk (IOB1 / broken IOB2 read leniently)
    (["B-PER", "I-PER", "O"], ["I-PER", "I-PER", "O"], (1.0, 1.0, 1.0)),
    # I- after a tag of another type starts a new chunk: PER(0,0), LOC(1,2)
    (["B-PER", "B-LOC", "I-LOC"], ["B-PER", "I-LOC", "I-LOC"], (1.0, 1.0, 1.0)),
    # B- after I- of the same type splits: two entities, not one
    (["B-PER", "I-PER", "B-PER"], ["B-PER", "I-PER", "I-PER"], (0.0, 0.0, 0.0)),
    # a type mismatch on the same span is a miss and a false alarm
    (["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "I-ORG", "O", "B-LOC"], (0.5, 0.5, 0.5)),
    # a span off by one token is wrong
    (["B-PER", "I-PER", "O"], ["B-PER", "I-PER", "I-PER"], (0.0, 0.0, 0.0)),
    # IOBES: S- is a one-token chunk, E- closes, E- then I- starts again
    (["S-PER", "B-LOC", "E-LOC", "O"], ["S-PER", "B-LOC", "E-LOC", "I-LOC"], (2 / 3, 1.0, 0.8)),
    # the bare B/I tags are chunks of type "_"
    (["B", "I", "O"], ["B", "I", "O"], (1.0, 1.0, 1.0)),
    # nothing predicted, or nothing true: 0 (seqeval's zero_division default), not an error
    (["B-PER", "O"], ["O", "O"], (0.0, 0.0, 0.0)),
    (["O", "O"], ["B-PER", "O"], (0.0, 0.0, 0.0)),
    (["O", "O"], ["O", "O"], (0.0, 0.0, 0.0)),
])
def test_entity_f1_chunk_rules(true, predicted, expected):
    assert scores([true], [predicted]) == pytest.approx(expected)


def test_entity_f1_chunks_do_not_cross_sentences():
    true = [["O", "B-PER"], ["I-PER", "O"]]  # two entities: one ends each sentence
    assert scores(true, [["O", "B-PER"], ["O", "O"]]) == pytest.approx((1.0, 0.5, 2 / 3))
    assert scores(true, true) == (1.0, 1.0, 1.0)


def test_entity_f1_tags_without_prefix_are_read_as_seqeval_reads_them():
    # seqeval reads "PER" as tag "P" of type "ER": "PER PER" is one chunk, of another type than B-PER's.
    with pytest.warns(UserWarning, match="'PER' is not a B-/I-/E-/S- or O tag"):
        assert scores([["PER", "PER", "O"]], [["PER", "PER", "O"]]) == (1.0, 1.0, 1.0)
    with pytest.warns(UserWarning):
        assert scores([["B-PER", "I-PER", "O"]], [["PER", "PER", "O"]]) == (0.0, 0.0, 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        entity_f1([["B-PER", "O", "S", "E-X"]], [["O"] * 4])  # prefixed tags: no warning


def test_entity_f1_accepts_tuples_and_arrays():
    true = (("B-PER", "I-PER"), np.array(["O", "B-LOC"]))
    assert scores(true, [["B-PER", "I-PER"], ["O", "B-LOC"]]) == (1.0, 1.0, 1.0)


@pytest.mark.parametrize("true, predicted, message", [
    ([["O", "B-PER"], ["O"]], [["O", "B-PER"], ["O", "O"]], "Sentence 1 has 1 true tags but 2 predicted tags"),
    ([["O"]], [["O"], ["O"]], "1 true tag sequences but 2 predicted"),
    ([["O", ""]], [["O", "O"]], "Sentence 0 has the tag ''"),
    ([["O"]], [[3]], "Sentence 0 has the tag 3"),
])
def test_entity_f1_bad_input(true, predicted, message):
    with pytest.raises(ValueError, match=message):
        entity_f1(true, predicted)


# --- GLUE ----------------------------------------------------------------------------------

def test_glue_metrics_table():
    assert GLUE_METRICS["cola"] == ("matthews_correlation",)
    assert GLUE_METRICS["stsb"] == ("pearson", "spearman")
    assert GLUE_METRICS["mrpc"] == GLUE_METRICS["qqp"] == ("accuracy", "f1")
    for task in ("sst2", "mnli", "mnli_matched", "mnli_mismatched", "qnli", "rte"):
        assert GLUE_METRICS[task] == ("accuracy",)


def test_glue_classification_metrics():
    labels, predictions = [1, 1, 0, 0, 1], [1, 0, 0, 0, 0]
    result = glue_scores(labels, predictions, ("accuracy", "f1", "matthews_correlation"))
    # TP 1, FN 2, TN 2, FP 0: F1 = 2/(2+2+0); MCC = (1*2 - 0*2) / sqrt(1*3*2*4)
    assert result == pytest.approx({"accuracy": 0.6, "f1": 0.5, "matthews_correlation": 2 / np.sqrt(24)})
    assert all(type(value) is float for value in result.values())
    # F1 is of class 1 even when class 0 is the majority
    assert glue_scores([0, 0, 0, 1], [0, 0, 1, 1], ("f1",))["f1"] == pytest.approx(2 / 3)


def test_macro_f1_averages_the_classes():
    # class 0: P 1, R 1/2, F1 2/3; class 1: P 1/2, R 1, F1 2/3; class 2: P 1, R 1, F1 1
    labels, predictions = [0, 0, 1, 2], [0, 1, 1, 2]
    assert glue_scores(labels, predictions, ("macro_f1",))["macro_f1"] == pytest.approx((2 / 3 + 2 / 3 + 1) / 3)


def test_glue_regression_metrics():
    labels = np.array([0.0, 1.5, 2.0, 4.0, 5.0])
    predictions = np.array([0.5, 1.0, 3.5, 3.0, 4.5])
    result = glue_scores(labels, predictions, GLUE_METRICS["stsb"])
    label_ranks, predicted_ranks = np.argsort(np.argsort(labels)), np.argsort(np.argsort(predictions))  # no ties
    assert result["pearson"] == pytest.approx(np.corrcoef(labels, predictions)[0, 1], abs=1e-12)
    assert result["spearman"] == pytest.approx(np.corrcoef(label_ranks, predicted_ranks)[0, 1], abs=1e-12)
    assert all(type(value) is float for value in result.values())


@pytest.mark.parametrize("labels, predictions, metrics, message", [
    ([0, 1], [0, 1], "mrpc", "sequence of names"),
    ([0, 1], [0, 1], ("accuracy", "auc"), "sequence of names"),
    ([0, 1], [[0.2, 0.8], [0.9, 0.1]], ("accuracy",), "not logits"),
    ([0, 1, 1], [0, 1], ("accuracy",), "shapes"),
    ([], [], ("accuracy",), "non-zero length"),
    ([0, 1, 2], [0, 2, 2], ("f1",), "multiclass"),  # scikit-learn's own ValueError
])
def test_glue_bad_input(labels, predictions, metrics, message):
    with pytest.raises(ValueError, match=message):
        glue_scores(labels, predictions, metrics)


def test_text_to_text_scores_hand_worked():
    # "Positive." normalizes to "positive": right; "the cat sat" against "a cat": F1 of {cat} = 2 * 1/2 * 1 / 1.5.
    scores = text_to_text_scores(["positive", "the cat sat", "negative"], ["Positive.", "a cat", "positive"])
    assert scores == pytest.approx({"exact": 100 / 3, "f1": 100 * (1 + 2 / 3 + 0) / 3})


@pytest.mark.parametrize("predictions, references", [(["a"], ["a", "b"]), ([], [])])
def test_text_to_text_scores_bad_input(predictions, references):
    with pytest.raises(ValueError, match="as many predictions as references"):
        text_to_text_scores(predictions, references)
