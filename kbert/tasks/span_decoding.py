"""SQuAD post-processing: from start and end logits over windows to answer texts.

The rules are those of the BERT reference `run_squad.py` (docs/algorithms.md §15):
per window, the `n_best` highest start and end logits are paired; a pair is a
candidate if both tokens are in the context, start <= end and the span is at
most `max_answer_length` tokens; its score is start + end logit. A question's
windows are merged by taking its best candidate over all of them (the first
one on ties, as the reference's stable sort). Answer text is cut from the
original context by character offsets (as transformers' `run_qa.py` does),
not rebuilt from word pieces. NumPy only, after the model has run.
"""

import numpy as np


def _checked_inputs(start_logits, end_logits, offsets, question_ids, contexts, max_context_mask):
    """The inputs as float64 and int arrays, with every shape and offset checked."""
    start_logits = np.asarray(start_logits, dtype=np.float64)
    end_logits = np.asarray(end_logits, dtype=np.float64)
    offsets = np.asarray(offsets)
    if start_logits.ndim != 2 or start_logits.shape != end_logits.shape:
        raise ValueError("`start_logits` and `end_logits` must both have shape (windows, length); "
                         f"got {start_logits.shape} and {end_logits.shape}.")
    if not (np.isfinite(start_logits).all() and np.isfinite(end_logits).all()):
        raise ValueError("The start and end logits must be finite.")
    if offsets.shape != (*start_logits.shape, 2) or not np.issubdtype(offsets.dtype, np.integer):
        raise ValueError(f"`offsets` must be integers of shape {(*start_logits.shape, 2)}, "
                         f"got {offsets.dtype} of shape {offsets.shape}.")
    if len(question_ids) != len(start_logits):
        raise ValueError(f"{len(question_ids)} question ids for {len(start_logits)} windows.")
    unknown = [qid for qid in question_ids if qid not in contexts]
    if unknown:
        raise ValueError(f"`contexts` has no context for question {unknown[0]!r}.")
    in_context = offsets[..., 0] >= 0
    lengths = np.array([len(contexts[qid]) for qid in question_ids]).reshape(-1, 1)
    bad = in_context & ((offsets[..., 1] < offsets[..., 0]) | (offsets[..., 1] > lengths))
    if bad.any():
        window, token = np.argwhere(bad)[0]
        raise ValueError(f"Window {window}, token {token}: offsets {tuple(offsets[window, token].tolist())} do not "
                         f"lie within its context of {lengths[window, 0]} characters.")
    start_allowed = in_context
    if max_context_mask is not None:
        max_context_mask = np.asarray(max_context_mask, dtype=bool)
        if max_context_mask.shape != in_context.shape:
            raise ValueError(f"`max_context_mask` must have shape {in_context.shape}, got {max_context_mask.shape}.")
        start_allowed = in_context & max_context_mask
    return start_logits, end_logits, offsets, in_context, start_allowed


def _best_window_spans(start_logits, end_logits, start_allowed, end_allowed, n_best, max_answer_length):
    """Each window's best (start, end, score) among its top-`n_best` pairs; score -inf if none is valid."""
    # A stable sort of the negated logits ranks ties by position, as the reference does.
    starts = np.argsort(-start_logits, axis=-1, kind="stable")[:, :n_best]
    ends = np.argsort(-end_logits, axis=-1, kind="stable")[:, :n_best]
    length = ends[:, None, :] - starts[:, :, None] + 1
    valid = (
        np.take_along_axis(start_allowed, starts, axis=-1)[:, :, None]
        & np.take_along_axis(end_allowed, ends, axis=-1)[:, None, :]
        & (length >= 1)
        & (length <= max_answer_length)
    )
    scores = (np.take_along_axis(start_logits, starts, axis=-1)[:, :, None]
              + np.take_along_axis(end_logits, ends, axis=-1)[:, None, :])
    scores = np.where(valid, scores, -np.inf).reshape(len(scores), -1)
    best = scores.argmax(axis=-1)  # the first of equal scores: start rank, then end rank
    windows = np.arange(len(scores))
    return starts[windows, best // starts.shape[1]], ends[windows, best % starts.shape[1]], scores[windows, best]


def best_spans(start_logits, end_logits, offsets, question_ids, contexts, n_best=20, max_answer_length=30,
               max_context_mask=None):
    """Each question's best span over its windows, with its score and its no-answer score.

    The arguments are `decode_answers`'. Returns a dict from question id to
    `{"start", "end", "score", "no_answer_score"}`: the span's `[start, end)`
    characters in the context (`None` when no window has a valid span, whose
    score is then -inf), its score (start + end logit) and the question's
    no-answer score (the smallest [CLS] score over its windows).

    >>> offsets = [[(-1, -1), (-1, -1), (0, 5), (6, 8)]]
    >>> best_spans([[1.0, 0.0, 4.0, 0.0]], [[1.0, 0.0, 3.0, 2.0]], offsets, ["q"], {"q": "Paris is"})
    {'q': {'start': 0, 'end': 5, 'score': 7.0, 'no_answer_score': 2.0}}
    """
    if not (isinstance(n_best, int) and n_best >= 1 and isinstance(max_answer_length, int) and max_answer_length >= 1):
        raise ValueError(f"`n_best` and `max_answer_length` must be positive integers, got {n_best} and "
                         f"{max_answer_length}.")
    start_logits, end_logits, offsets, in_context, start_allowed = _checked_inputs(
        start_logits, end_logits, offsets, question_ids, contexts, max_context_mask)
    starts, ends, scores = _best_window_spans(
        start_logits, end_logits, start_allowed, in_context, n_best, max_answer_length)
    null_scores = start_logits[:, 0] + end_logits[:, 0]
    best, null = {}, {}  # question id -> (score, window) of its best span; its no-answer score
    for window, qid in enumerate(question_ids):
        if qid not in best or scores[window] > best[qid][0]:
            best[qid] = (scores[window], window)
        null[qid] = min(null.get(qid, np.inf), null_scores[window])
    spans = {}
    for qid, (score, window) in best.items():
        found = score > -np.inf
        spans[qid] = {"start": int(offsets[window, starts[window], 0]) if found else None,
                      "end": int(offsets[window, ends[window], 1]) if found else None,
                      "score": float(score), "no_answer_score": float(null[qid])}
    return spans


def decode_answers(start_logits, end_logits, offsets, question_ids, contexts, n_best=20, max_answer_length=30,
                   no_answer_threshold=None, max_context_mask=None):
    """Answer texts for SQuAD questions from the span logits of their windows.

    The no-answer score of a question is the smallest [CLS] score (position 0,
    start + end logit) over its windows, as in the reference. With a
    `no_answer_threshold` (SQuAD 2.0) the answer is "" when no-answer score -
    best span score > threshold; without one (SQuAD 1.1) the best span is
    always the answer. The differences are returned too, so that the threshold
    can be chosen on dev data: pass them to
    `kbert.tasks.metrics.squad_scores(..., no_answer_probabilities=...)` and
    read `best_f1_thresh`. A question with no valid span in any of its windows
    gets "" and a difference of +inf.

    Args:
        start_logits, end_logits: float arrays (windows, length).
        offsets: int array (windows, length, 2), each token's [start, end)
            character span in its question's context; a negative start marks a
            token outside the context (question, special and padding tokens).
        question_ids: the question id of each window (windows of one question
            need not be next to each other).
        contexts: dict, question id -> the original context text.
        n_best: how many of the highest start and end logits of a window are paired.
        max_answer_length: the longest span, in tokens.
        no_answer_threshold: None (never answer "") or a float (SQuAD 2.0; the
            reference's default is 0.0).
        max_context_mask: optional bool (windows, length): where a token may
            start a span (the reference's `token_is_max_context`: the window
            that gives the token the most context on both sides). By default
            any context token may.

    Returns:
        `(answers, null_score_differences)`: dicts from question id to answer
        text and to no-answer score - best span score.

    Example:
    >>> context = "Paris is in France."
    >>> # [CLS] where [SEP] paris is in france .
    >>> offsets = [[(-1, -1), (-1, -1), (-1, -1), (0, 5), (6, 8), (9, 11), (12, 18), (18, 19)]]
    >>> start = [[1.0, 0.0, 9.0, 0.0, 0.0, 0.0, 5.0, 0.0]]  # the best start is a question token
    >>> end = [[1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 5.0, 1.0]]
    >>> answers, differences = decode_answers(start, end, offsets, ["q1"], {"q1": context})
    >>> answers, differences
    ({'q1': 'France'}, {'q1': -8.0})
    """
    spans = best_spans(start_logits, end_logits, offsets, question_ids, contexts, n_best, max_answer_length,
                       max_context_mask)
    answers, differences = {}, {}
    for qid, span in spans.items():
        differences[qid] = span["no_answer_score"] - span["score"]
        if span["start"] is None or (no_answer_threshold is not None and differences[qid] > no_answer_threshold):
            answers[qid] = ""
        else:
            answers[qid] = contexts[qid][span["start"]:span["end"]]
    return answers, differences
