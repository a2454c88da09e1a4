"""Fine-tuning metrics under their official definitions: SQuAD, entity-level F1, GLUE and text-to-text.

- `squad_scores` is the official SQuAD evaluation (`evaluate-v2.0.py`, which on
  SQuAD 1.1 data gives `evaluate-v1.1.py`'s exact match and F1), with its
  HasAns/NoAns split and its best no-answer threshold.
- `entity_f1` is what `seqeval` computes in its default (conlleval) mode.
- `text_to_text_scores` scores generated text as T5 does: SQuAD's exact
  match and F1 against the reference text.
- `glue_scores` takes accuracy, F1, Matthews correlation, Pearson and Spearman
  from scikit-learn and scipy, imported when first called.

All of them are plain Python and NumPy, the same on every Keras backend.
"""

import collections
import re
import string
import warnings

import numpy as np

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text):
    """SQuAD's answer normalization: lower case, no punctuation, no articles, single spaces.

    Example:
    >>> normalize_answer("  The Eiffel-Tower, in Paris!")
    'eiffeltower in paris'
    """
    text = "".join(character for character in text.lower() if character not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def answer_f1(gold, prediction):
    """Token-level F1 of one predicted answer against one gold answer, as `evaluate-v2.0.py`.

    Tokens are the words of the normalized answers; repeated tokens match as many
    times as both answers hold them. Two answers that normalize to nothing score
    1, and such an answer against any other scores 0.

    Example:
    >>> answer_f1("the cat sat", "cat cat")  # one "cat" in common: P 1/2, R 1/2
    0.5
    >>> answer_f1("", "a")  # both empty after normalization
    1.0
    """
    gold_tokens = normalize_answer(gold).split()
    predicted_tokens = normalize_answer(prediction).split()
    if not gold_tokens or not predicted_tokens:
        return float(gold_tokens == predicted_tokens)
    common = sum((collections.Counter(gold_tokens) & collections.Counter(predicted_tokens)).values())
    if common == 0:
        return 0.0
    precision = common / len(predicted_tokens)
    recall = common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def _squad_questions(dataset):
    """Question id -> gold answer texts from a SQuAD JSON dict (`[]` for unanswerable)."""
    if not isinstance(dataset, dict) or not isinstance(dataset.get("data"), list):
        raise ValueError("`dataset` must be the SQuAD JSON dict, with a 'data' list of articles.")
    questions = {}
    for article in dataset["data"]:
        for paragraph in article.get("paragraphs", ()):
            for question in paragraph.get("qas", ()):
                if "id" not in question or not isinstance(question.get("answers"), list):
                    raise ValueError(f"A SQuAD question needs an 'id' and an 'answers' list; got {question!r}.")
                if question["id"] in questions:
                    raise ValueError(f"Question id {question['id']!r} appears twice in the SQuAD dataset.")
                questions[question["id"]] = [answer["text"] for answer in question["answers"]]
    if not questions:
        raise ValueError("The SQuAD dataset holds no questions.")
    return questions


def _average(exact, f1, question_ids):
    return {
        "exact": 100.0 * sum(exact[qid] for qid in question_ids) / len(question_ids),
        "f1": 100.0 * sum(f1[qid] for qid in question_ids) / len(question_ids),
        "total": len(question_ids),
    }


def squad_scores(predictions, dataset, no_answer_probabilities=None):
    """SQuAD exact match and F1 in percent, as the official evaluation script computes them.

    Each question scores its best match over its gold answers (`normalize_answer`
    first; F1 by `answer_f1`). A question with no answers (SQuAD 2.0's
    unanswerable ones) has the single gold answer "", so only "" is right.
    Like `evaluate-v2.0.py`, gold answers that normalize to nothing are dropped,
    which is the only way the result can differ from `evaluate-v1.1.py` on v1.1 data.

    A question with no prediction scores 0 and the function warns, as
    `evaluate-v1.1.py` does. (`evaluate-v2.0.py` instead leaves it out of `total`
    and then fails on the HasAns/NoAns split; counting it wrong keeps every score
    over the whole dataset.) Predictions for ids not in the dataset are ignored,
    as by both scripts.

    Args:
        predictions: dict, question id -> predicted answer text ("" for no answer).
        dataset: the SQuAD JSON dict (v1.1 or v2.0): `{"data": [{"paragraphs":
            [{"context": ..., "qas": [{"id": ..., "answers": [{"text": ...}]}]}]}]}`.
        no_answer_probabilities: optional dict, question id -> the model's
            no-answer score (a probability, or the null-score difference of
            `kbert.tasks.span_decoding.decode_answers`), for every predicted
            question. It adds the best threshold search of `evaluate-v2.0.py`.
            The other scores are always those of `predictions` as given.

    Returns:
        dict with `exact`, `f1` (percent) and `total`; `HasAns_exact`,
        `HasAns_f1`, `HasAns_total` when some questions have answers, the
        `NoAns_` ones when some have none; with `no_answer_probabilities`,
        `best_exact`, `best_exact_thresh`, `best_f1`, `best_f1_thresh`: the best
        scores when "" is predicted for every question whose no-answer score
        is above the threshold.

    Example:
    >>> dataset = {"data": [{"paragraphs": [{"context": "The cat sat on the mat.", "qas": [
    ...     {"id": "q1", "answers": [{"text": "the mat", "answer_start": 15}]},
    ...     {"id": "q2", "answers": [{"text": "cat", "answer_start": 4}, {"text": "The cat", "answer_start": 0}]},
    ...     {"id": "q3", "answers": [], "is_impossible": True}]}]}]}
    >>> scores = squad_scores({"q1": "Mat!", "q2": "the cat sat", "q3": ""}, dataset)
    >>> round(scores["exact"], 2), round(scores["f1"], 2), scores["NoAns_exact"]
    (66.67, 88.89, 100.0)
    """
    questions = _squad_questions(dataset)
    if not isinstance(predictions, dict):
        raise ValueError(f"`predictions` must be a dict from question id to answer text, got {type(predictions)}.")
    missing = [qid for qid in questions if qid not in predictions]
    if missing:
        warnings.warn(f"{len(missing)} of {len(questions)} questions have no prediction and score 0 "
                      f"(the first: {missing[0]!r}).", stacklevel=2)
    exact, f1 = {qid: 0.0 for qid in questions}, {qid: 0.0 for qid in questions}
    answered = [qid for qid in questions if qid in predictions]
    for qid in answered:
        if not isinstance(predictions[qid], str):
            raise ValueError(f"The prediction for question {qid!r} must be a string, got {predictions[qid]!r}.")
        gold = [answer for answer in questions[qid] if normalize_answer(answer)] or [""]
        exact[qid] = max(float(normalize_answer(answer) == normalize_answer(predictions[qid])) for answer in gold)
        f1[qid] = max(answer_f1(answer, predictions[qid]) for answer in gold)
    scores = _average(exact, f1, list(questions))
    for prefix, answerable in (("HasAns", True), ("NoAns", False)):
        subset = [qid for qid, answers in questions.items() if bool(answers) == answerable]
        if subset:
            scores.update({f"{prefix}_{key}": value for key, value in _average(exact, f1, subset).items()})
    if no_answer_probabilities is not None:
        for name, raw in (("exact", exact), ("f1", f1)):
            best, threshold = _best_threshold(raw, predictions, no_answer_probabilities, questions, answered)
            scores.update({f"best_{name}": best, f"best_{name}_thresh": threshold})
    return scores


def text_to_text_scores(predictions, references):
    """Exact match and token F1 in percent of generated texts against references, as T5 reports.

    Each pair is scored as a SQuAD answer (`normalize_answer`, `answer_f1`):
    on a task cast as text ("positive"/"negative") `exact` is the accuracy
    in percent; on free text (SQuAD as text to text) both are SQuAD's scores.

    Args:
        predictions: the generated strings.
        references: the target strings, as many.

    >>> scores = text_to_text_scores(["positive", "the cat sat"], ["Positive.", "cat"])
    >>> scores["exact"], round(scores["f1"], 2)  # "cat sat" against "cat": F1 2/3
    (50.0, 83.33)
    """
    predictions, references = list(predictions), list(references)
    if len(predictions) != len(references) or not predictions:
        raise ValueError(f"Expected as many predictions as references, and some; got {len(predictions)} "
                         f"and {len(references)}.")
    exact = [float(normalize_answer(p) == normalize_answer(r)) for p, r in zip(predictions, references)]
    f1 = [answer_f1(r, p) for p, r in zip(predictions, references)]
    return {"exact": 100.0 * sum(exact) / len(exact), "f1": 100.0 * sum(f1) / len(f1)}


def _best_threshold(raw_scores, predictions, probabilities, questions, answered):
    """`evaluate-v2.0.py`'s `find_best_thresh`, with unpredicted questions counted wrong."""
    absent = [qid for qid in answered if qid not in probabilities]
    if absent:
        raise ValueError(f"`no_answer_probabilities` has no value for question {absent[0]!r}.")
    # Every answered question predicted "" first; then answer them one at a time
    # in order of rising no-answer score, keeping the best running total.
    score = best_score = sum(1 for qid in answered if not questions[qid])
    best_threshold = 0.0
    answered_ids = set(answered)
    for qid in sorted((qid for qid in probabilities if qid in answered_ids), key=lambda qid: probabilities[qid]):
        if questions[qid]:
            score += raw_scores[qid]
        elif predictions[qid]:
            score -= 1
        if score > best_score:
            best_score, best_threshold = score, float(probabilities[qid])
    return 100.0 * best_score / len(questions), best_threshold


def _chunk_ends(previous_tag, tag, previous_type, type_):
    return (
        previous_tag in ("E", "S")
        or (previous_tag in ("B", "I") and tag in ("B", "S", "O"))
        or (previous_tag not in ("O", ".") and previous_type != type_)
    )


def _chunk_starts(previous_tag, tag, previous_type, type_):
    return (
        tag in ("B", "S")
        or (previous_tag in ("E", "S", "O") and tag in ("E", "I"))
        or (tag not in ("O", ".") and previous_type != type_)
    )


def _chunks(tags):
    """seqeval's `get_entities` over one flat tag list: (type, first, last) per chunk."""
    chunks = []
    previous_tag, previous_type, begin = "O", "", 0
    for index, label in enumerate([*tags, "O"]):
        tag, type_ = label[0], label[1:].split("-", maxsplit=1)[-1] or "_"
        if _chunk_ends(previous_tag, tag, previous_type, type_):
            chunks.append((previous_type, begin, index - 1))
        if _chunk_starts(previous_tag, tag, previous_type, type_):
            begin = index
        previous_tag, previous_type = tag, type_
    return chunks


def _flat_tags(sequences):
    """The sentences joined with an "O" after each, as seqeval does; checks the tags."""
    flat = []
    for index, tags in enumerate(sequences):
        for tag in tags:
            if not isinstance(tag, str) or not tag:
                raise ValueError(f"Sentence {index} has the tag {tag!r}; tags are non-empty strings.")
        flat.extend([*tags, "O"])
    return flat


def entity_f1(true_tags, predicted_tags):
    """Entity-level micro precision, recall and F1 over tagged spans, as seqeval's default mode.

    Chunks are read with the conlleval rules that `seqeval.metrics.f1_score`
    uses when no `mode` is given: a chunk starts at `B-` or `S-`, and also at an
    `I-` or `E-` after `O`, `E-` or `S-` or after a tag of another type (IOB1
    and broken IOB2 are read leniently); it ends where the next tag starts a
    new chunk, changes type, or is `O`. A chunk never crosses a sentence. An
    entity counts as found only if type, first and last token all match. Tags
    without a prefix are read as seqeval reads them ("PER" is tag "P" of type
    "ER"), with a warning. When nothing is predicted (or nothing is true)
    precision (recall) is 0, and so is F1: seqeval's `zero_division="warn"`
    values, without its warning.

    Args:
        true_tags: list of tag sequences, one per sentence.
        predicted_tags: list of tag sequences of the same lengths.

    Returns:
        dict with `precision`, `recall` and `f1`, floats in [0, 1].

    Example:
    >>> true = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    >>> predicted = [["B-PER", "I-PER", "O", "O"], ["I-ORG", "O"]]  # I- after O starts a chunk
    >>> scores = entity_f1(true, predicted)
    >>> scores["precision"], round(scores["recall"], 4), scores["f1"]
    (1.0, 0.6667, 0.8)
    """
    if len(true_tags) != len(predicted_tags):
        raise ValueError(f"{len(true_tags)} true tag sequences but {len(predicted_tags)} predicted ones.")
    for index, (truth, prediction) in enumerate(zip(true_tags, predicted_tags)):
        if len(truth) != len(prediction):
            raise ValueError(f"Sentence {index} has {len(truth)} true tags but {len(prediction)} predicted tags.")
    flat_true, flat_predicted = _flat_tags(true_tags), _flat_tags(predicted_tags)
    odd = [tag for tag in {*flat_true, *flat_predicted}
           if tag not in ("O", "B", "I", "E", "S") and not tag.startswith(("B-", "I-", "E-", "S-"))]
    if odd:
        warnings.warn(f"{sorted(odd)[0]!r} is not a B-/I-/E-/S- or O tag; read as seqeval reads it.", stacklevel=2)
    true_chunks, predicted_chunks = set(_chunks(flat_true)), set(_chunks(flat_predicted))
    correct = len(true_chunks & predicted_chunks)
    precision = correct / len(predicted_chunks) if predicted_chunks else 0.0
    recall = correct / len(true_chunks) if true_chunks else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


GLUE_METRICS = {
    "cola": ("matthews_correlation",),
    "sst2": ("accuracy",),
    "mrpc": ("accuracy", "f1"),
    "qqp": ("accuracy", "f1"),
    "stsb": ("pearson", "spearman"),
    "mnli": ("accuracy",),
    "mnli_matched": ("accuracy",),
    "mnli_mismatched": ("accuracy",),
    "qnli": ("accuracy",),
    "rte": ("accuracy",),
    "wnli": ("accuracy",),
    "ax": ("matthews_correlation",),
}
"""The metrics each GLUE task reports (F1 on the positive class 1), by task name."""


def _metric(name, labels, predictions):
    if name in ("pearson", "spearman"):
        from scipy import stats

        correlation = stats.pearsonr if name == "pearson" else stats.spearmanr
        return float(correlation(labels, predictions)[0])
    from sklearn import metrics

    if name == "accuracy":
        return float(metrics.accuracy_score(labels, predictions))
    if name == "f1":
        return float(metrics.f1_score(labels, predictions, pos_label=1, average="binary"))
    if name == "macro_f1":
        return float(metrics.f1_score(labels, predictions, average="macro"))
    return float(metrics.matthews_corrcoef(labels, predictions))


def glue_scores(labels, predictions, metrics):
    """GLUE metrics from scikit-learn and scipy, as plain Python floats under their names.

    `accuracy` and `matthews_correlation` take class ids; `f1` is binary F1 of
    class 1 (MRPC, QQP), `macro_f1` the mean F1 over the classes (for more
    than two classes); `pearson` and `spearman` take real scores (STS-B), and
    are NaN, with scipy's warning, when either side is constant.

    Args:
        labels: 1-D sequence of gold class ids or scores.
        predictions: 1-D sequence of predicted class ids (the argmax of the
            logits) or scores, as many as `labels`.
        metrics: names among `accuracy`, `f1`, `macro_f1`, `matthews_correlation`,
            `pearson` and `spearman`; `GLUE_METRICS[task]` names a task's.

    Example:
    >>> glue_scores([1, 0, 1, 1], [1, 0, 0, 1], GLUE_METRICS["mrpc"])
    {'accuracy': 0.75, 'f1': 0.8}
    >>> glue_scores([0.5, 2.0, 4.5], [1.0, 2.0, 3.0], ("spearman",))
    {'spearman': 1.0}
    """
    known = ("accuracy", "f1", "macro_f1", "matthews_correlation", "pearson", "spearman")
    if isinstance(metrics, str) or not all(name in known for name in metrics):
        raise ValueError(f"`metrics` must be a sequence of names among {known} "
                         f"(e.g. GLUE_METRICS['mrpc']), got {metrics!r}.")
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    if labels.ndim != 1 or labels.shape != predictions.shape or not len(labels):
        raise ValueError("`labels` and `predictions` must be 1-D and of one non-zero length (class ids, not logits); "
                         f"got shapes {labels.shape} and {predictions.shape}.")
    return {name: _metric(name, labels, predictions) for name in metrics}
