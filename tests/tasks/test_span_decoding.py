"""SQuAD span decoding on hand-built logits and offsets, and against a loop reference.

The reference below is `write_predictions` of the BERT `run_squad.py` written
out as its nested loops (sorted top-n lists, every pair checked, a stable sort
of all candidates), with the text cut by character offsets instead of its
word-piece detokenization.
"""

import math

import numpy as np
import pytest

from kbert.tasks.metrics import squad_scores
from kbert.tasks.span_decoding import decode_answers

pytestmark = pytest.mark.backend_independent  # NumPy span decoding: the same on every backend, one run

CONTEXT = "Marie Curie won two Nobel Prizes in Paris."
# Word character spans: Marie Curie won two Nobel Prizes in Paris .
WORDS = [(0, 5), (6, 11), (12, 15), (16, 19), (20, 25), (26, 32), (33, 35), (36, 41), (41, 42)]
OUTSIDE = (-1, -1)


def window(context_words, length=8, question_tokens=2):
    """Offsets of `[CLS] q q [SEP] words... [SEP] pad...`, padded to `length`."""
    offsets = [OUTSIDE] * (question_tokens + 2) + [WORDS[i] for i in context_words] + [OUTSIDE]
    return offsets + [OUTSIDE] * (length - len(offsets))


def logits(length, peaks):
    """Zeros (and 1 at [CLS]) with the given {position: value} peaks."""
    values = np.zeros(length, np.float32)
    values[0] = 1.0
    for position, value in peaks.items():
        values[position] = value
    return values


def decode(starts, ends, offsets, question_ids=None, contexts=None, **kwargs):
    question_ids = question_ids or ["q"] * len(offsets)
    return decode_answers(np.stack(starts), np.stack(ends), np.array(offsets), question_ids,
                          contexts or {"q": CONTEXT}, **kwargs)


def test_answer_in_the_second_of_two_overlapping_windows():
    # Window 0 holds words 0-3, window 1 words 2-8 (overlap: "won two"); "Paris" is word 7.
    offsets = [window([0, 1, 2, 3], length=12), window([2, 3, 4, 5, 6, 7, 8], length=12)]
    starts = [logits(12, {5: 2.0}), logits(12, {9: 4.0})]  # window 1, token 9 = word 7
    ends = [logits(12, {7: 2.0}), logits(12, {9: 3.0})]
    answers, differences = decode(starts, ends, offsets)
    assert answers == {"q": "Paris"}
    assert differences == {"q": 2.0 - 7.0}


def test_overlapping_windows_keep_the_higher_scored_span():
    offsets = [window([0, 1, 2, 3], length=12), window([2, 3, 4, 5, 6, 7, 8], length=12)]
    starts = [logits(12, {4: 5.0}), logits(12, {9: 4.0})]  # window 0, tokens 4-5 = "Marie Curie"
    ends = [logits(12, {5: 5.0}), logits(12, {9: 3.0})]
    assert decode(starts, ends, offsets)[0] == {"q": "Marie Curie"}


def test_span_longer_than_max_answer_length_is_rejected():
    offsets = [window(range(9), length=16)]
    start = logits(16, {4: 5.0, 8: 1.0})   # words 0 and 4
    end = logits(16, {11: 5.0, 9: 0.5})    # words 7 and 5
    assert decode([start], [end], offsets)[0] == {"q": "Marie Curie won two Nobel Prizes in Paris"}
    # 8 tokens (4..11) is too long at 7; the next best is start 8, end 11 (4 tokens, 6.0), then 4..9 (5.5)
    assert decode([start], [end], offsets, max_answer_length=7)[0] == {"q": "Nobel Prizes in Paris"}
    assert decode([start], [end], offsets, max_answer_length=4)[0] == {"q": "Nobel Prizes in Paris"}
    # at 3, start 4 with an end logit of 0 (5.0) is best: the first such end by rank is token 4
    assert decode([start], [end], offsets, max_answer_length=3)[0] == {"q": "Marie"}


def test_end_before_start_is_rejected():
    offsets = [window(range(9), length=16)]
    start = logits(16, {10: 9.0, 6: 2.0})  # "in" then "won"
    end = logits(16, {7: 9.0, 8: 1.0})     # "two" then "Nobel": both before "in"
    assert decode([start], [end], offsets)[0] == {"q": "won two"}


def test_question_special_and_padding_tokens_are_rejected():
    offsets = [window([0, 1, 2], length=10)]  # [CLS] q q [SEP] w w w [SEP] pad pad
    start = logits(10, {0: 9.0, 1: 9.0, 7: 9.0, 8: 9.0, 5: 1.0})
    end = logits(10, {2: 9.0, 3: 9.0, 9: 9.0, 6: 1.0})
    answers, differences = decode([start], [end], offsets)
    assert answers == {"q": "Curie won"}
    assert differences == {"q": 9.0 + 1.0 - 2.0}


def test_only_the_top_n_best_starts_and_ends_are_paired():
    offsets = [window([0, 1, 2], length=10)]
    start = logits(10, {1: 9.0, 4: 2.0})  # the top start is a question token
    end = logits(10, {1: 9.0, 4: 2.0})
    assert decode([start], [end], offsets, n_best=2)[0] == {"q": "Marie"}
    # with n_best=1 the only pair is (question, question): nothing valid, so "" and an infinite difference
    answers, differences = decode([start], [end], offsets, n_best=1)
    assert answers == {"q": ""} and differences == {"q": math.inf}


def test_no_answer_threshold_and_the_null_score_minimum_over_windows():
    offsets = [window([0, 1, 2, 3], length=12), window([2, 3, 4, 5, 6, 7, 8], length=12)]
    starts = [logits(12, {0: 3.0, 5: 2.0}), logits(12, {0: 2.5, 9: 1.0})]
    ends = [logits(12, {0: 3.0, 5: 2.0}), logits(12, {0: 2.0, 9: 1.0})]
    # null = min(6, 4.5) = 4.5; best span = "Curie" (word 1, token 5) at 4.0: difference 0.5
    answers, differences = decode(starts, ends, offsets)
    assert answers == {"q": "Curie"} and differences == {"q": 0.5}
    assert decode(starts, ends, offsets, no_answer_threshold=0.0)[0] == {"q": ""}
    assert decode(starts, ends, offsets, no_answer_threshold=0.5)[0] == {"q": "Curie"}  # not above
    assert decode(starts, ends, offsets, no_answer_threshold=-1.0)[0] == {"q": ""}


def test_max_context_mask_limits_the_starts():
    offsets = [window([0, 1, 2, 3], length=12), window([2, 3, 4, 5, 6, 7, 8], length=12)]
    starts = [logits(12, {6: 5.0}), logits(12, {4: 3.0})]  # "won" in both windows
    ends = [logits(12, {7: 5.0}), logits(12, {5: 3.0})]    # "two" in both windows
    assert decode(starts, ends, offsets) == ({"q": "won two"}, {"q": 2.0 - 10.0})  # from window 0
    # "won" has more context in window 1; the reference starts spans there only. Window 0 can then
    # only start at "Marie" or "Curie" (0 + 5 for "... two"), below window 1's 3 + 3.
    mask = np.zeros((2, 12), bool)
    mask[0, 4:6], mask[1, 4:11] = True, True
    assert decode(starts, ends, offsets, max_context_mask=mask) == ({"q": "won two"}, {"q": 2.0 - 6.0})


def test_windows_of_several_questions_in_any_order():
    other = "Water boils at 100 degrees."
    offsets = np.array([window([0, 1]), [OUTSIDE] * 4 + [(0, 5), (6, 11), (12, 14), OUTSIDE], window([7, 8])])
    starts = [logits(8, {4: 3.0}), logits(8, {5: 3.0}), logits(8, {4: 4.0})]
    ends = [logits(8, {5: 3.0}), logits(8, {6: 3.0}), logits(8, {4: 4.0})]
    answers, _ = decode(starts, ends, offsets, ["curie", "water", "curie"], {"curie": CONTEXT, "water": other})
    assert answers == {"curie": "Paris", "water": "boils at"}


def test_differences_choose_the_threshold_with_squad_scores():
    dataset = {"data": [{"paragraphs": [{"context": CONTEXT, "qas": [
        {"id": "who", "answers": [{"text": "Marie Curie", "answer_start": 0}]},
        {"id": "where", "answers": [{"text": "Paris", "answer_start": 36}]},
        {"id": "when", "answers": []}]}]}]}
    offsets = [window(range(9), length=14)] * 3
    starts = [logits(14, {0: 1.0, 4: 3.0}), logits(14, {0: 2.5, 11: 2.25}), logits(14, {0: 2.0, 9: 1.5})]
    ends = [logits(14, {0: 1.0, 5: 3.0}), logits(14, {0: 2.5, 11: 2.25}), logits(14, {0: 2.0, 9: 1.5})]
    answers, differences = decode(starts, ends, offsets, ["who", "where", "when"], {
        qid: CONTEXT for qid in ("who", "where", "when")})
    assert answers == {"who": "Marie Curie", "where": "Paris", "when": "Prizes"}
    assert differences == {"who": -4.0, "where": 0.5, "when": 1.0}
    scores = squad_scores(answers, dataset, no_answer_probabilities=differences)
    assert scores["exact"] == 200 / 3
    assert (scores["best_exact"], scores["best_exact_thresh"]) == (100.0, 0.5)
    answers, _ = decode(starts, ends, offsets, ["who", "where", "when"], {
        qid: CONTEXT for qid in ("who", "where", "when")}, no_answer_threshold=scores["best_exact_thresh"])
    assert squad_scores(answers, dataset)["exact"] == scores["best_exact"]


def reference_decode(start_logits, end_logits, offsets, question_ids, contexts, n_best, max_answer_length):
    """`run_squad.py`'s candidate loops over character offsets (no threshold)."""
    candidates, null = {}, {}
    for window, qid in enumerate(question_ids):
        start, end = start_logits[window].tolist(), end_logits[window].tolist()
        top_starts = [i for i, _ in sorted(enumerate(start), key=lambda x: x[1], reverse=True)[:n_best]]
        top_ends = [i for i, _ in sorted(enumerate(end), key=lambda x: x[1], reverse=True)[:n_best]]
        null[qid] = min(null.get(qid, math.inf), start[0] + end[0])
        candidates.setdefault(qid, [])
        for s in top_starts:
            for e in top_ends:
                if offsets[window][s][0] < 0 or offsets[window][e][0] < 0 or e < s or e - s + 1 > max_answer_length:
                    continue
                candidates[qid].append((start[s] + end[e], window, s, e))
    answers, differences = {}, {}
    for qid, spans in candidates.items():
        if not spans:
            answers[qid], differences[qid] = "", math.inf
            continue
        score, window, s, e = sorted(spans, key=lambda x: x[0], reverse=True)[0]
        answers[qid] = contexts[qid][offsets[window][s][0]:offsets[window][e][1]]
        differences[qid] = null[qid] - score
    return answers, differences


@pytest.mark.parametrize("seed", range(4))
def test_matches_the_reference_loops_on_random_windows(seed):
    rng = np.random.default_rng(seed)
    windows, length = 12, 24
    question_ids = [f"q{i}" for i in rng.integers(0, 5, windows)]
    contexts = {f"q{i}": "".join(rng.choice(list("ab c"), 80)) for i in range(5)}
    offsets = np.full((windows, length, 2), -1)
    for w in range(windows):
        first, count = rng.integers(2, 8), rng.integers(1, 16)
        begins = np.sort(rng.choice(78, count, replace=False))
        offsets[w, first:first + count] = np.stack([begins, begins + rng.integers(0, 3, count)], axis=-1)
    # Small integer logits make many ties, which the reference breaks by position and window order.
    start_logits = rng.integers(-3, 4, (windows, length)).astype(np.float32)
    end_logits = rng.integers(-3, 4, (windows, length)).astype(np.float32)
    n_best, max_answer_length = int(rng.integers(1, 8)), int(rng.integers(1, 6))
    expected = reference_decode(start_logits, end_logits, offsets, question_ids, contexts, n_best,
                                max_answer_length)
    actual = decode_answers(start_logits, end_logits, offsets, question_ids, contexts, n_best=n_best,
                            max_answer_length=max_answer_length)
    assert actual == expected


@pytest.mark.parametrize("change, message", [
    (dict(end_logits=np.zeros((1, 7))), "must both have shape"),
    (dict(start_logits=np.zeros(8)), "must both have shape"),
    (dict(start_logits=np.full((1, 8), np.nan)), "finite"),
    (dict(offsets=np.zeros((1, 8, 3), int)), "offsets"),
    (dict(offsets=np.zeros((1, 8, 2))), "must be integers"),
    (dict(question_ids=["q", "q"]), "2 question ids for 1 windows"),
    (dict(contexts={"other": CONTEXT}), "no context for question 'q'"),
    (dict(offsets=np.array([window([0, 1, 2])[:7] + [(40, 50)]])),
     "Window 0, token 7: offsets \\(40, 50\\) do not lie within its context of 42"),
    (dict(offsets=np.array([window([0, 1, 2])[:7] + [(6, 5)]])), "Window 0, token 7"),
    (dict(n_best=0), "positive integers"),
    (dict(max_answer_length=2.5), "positive integers"),
    (dict(max_context_mask=np.ones((1, 7), bool)), "max_context_mask"),
])
def test_bad_input(change, message):
    arguments = dict(start_logits=np.zeros((1, 8)), end_logits=np.zeros((1, 8)),
                     offsets=np.array([window([0, 1, 2])]), question_ids=["q"], contexts={"q": CONTEXT})
    arguments.update(change)
    with pytest.raises(ValueError, match=message):
        decode_answers(**arguments)
