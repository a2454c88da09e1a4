"""Model outputs to the results of the task models' text-level calls: label names, entities, choices.

NumPy only, after the model has run. The entity merging is transformers'
token-classification pipeline with `aggregation_strategy="first"`: a word's
label and score are its first piece's, and neighbouring words of one entity
type (an `I-` tag, or a tag without a `B-`/`I-` prefix, continues one) are
merged, their score the mean of the words'.
"""

import numpy as np
from scipy.special import softmax

OUTSIDE = "O"


def probabilities(logits):
    """Softmax over the last axis, in float64.

    >>> probabilities([[0.0, 0.0]]).tolist()
    [[0.5, 0.5]]
    """
    return softmax(np.asarray(logits, np.float64), axis=-1)


def classification_results(logits, label_name):
    """`{"label", "score", "scores"}` per row of class logits; `{"value"}` for one regression output.

    >>> classification_results([[0.0, 0.0]], lambda i: "ab"[i])
    [{'label': 'a', 'score': 0.5, 'scores': {'a': 0.5, 'b': 0.5}}]
    """
    logits = np.asarray(logits)
    if logits.shape[-1] == 1:
        return [{"value": float(value)} for value in logits[:, 0]]
    results = []
    for row in probabilities(logits):
        best = int(row.argmax())
        scores = {label_name(i): float(p) for i, p in enumerate(row)}
        results.append({"label": label_name(best), "score": float(row[best]), "scores": scores})
    return results


def _tag(label):
    """`(prefix, entity type)` of a tag: `("B", "PER")` for `B-PER`; a bare tag continues (`"I"`)."""
    if label.startswith(("B-", "I-")):
        return label[0], label[2:]
    return "I", label


def _words(pieces):
    """Pieces `(start, end, probabilities, is_subword)` to words `(start, end, label index, score)`."""
    words = []
    for start, end, scores, is_subword in pieces:
        if words and is_subword:
            words[-1][1] = end
            continue
        best = int(scores.argmax())
        words.append([start, end, best, float(scores[best])])
    return words


def merge_entities(text, pieces, label_name):
    """Entities `{"label", "start", "end", "text", "score"}` of one text from its tagged pieces.

    Args:
        text: the text.
        pieces: `(start, end, probabilities, is_subword)` per real token, in
            order: its character span, its label probabilities, and whether it
            continues the word before it.
        label_name: class index to label name.

    >>> pieces = [(0, 5, np.array([0.1, 0.9]), False), (6, 8, np.array([0.8, 0.2]), False)]
    >>> merge_entities("Paris is", pieces, lambda i: ["O", "B-LOC"][i])
    [{'label': 'LOC', 'start': 0, 'end': 5, 'text': 'Paris', 'score': 0.9}]
    """
    groups = []
    for start, end, index, score in _words(pieces):
        label = label_name(index)
        prefix, entity = _tag(label)
        if groups and prefix != "B" and entity == groups[-1]["type"]:
            groups[-1]["end"] = end
            groups[-1]["scores"].append(score)
        else:
            groups.append({"type": entity, "start": start, "end": end, "scores": [score]})
    return [{"label": group["type"], "start": group["start"], "end": group["end"],
             "text": text[group["start"]:group["end"]], "score": float(np.mean(group["scores"]))}
            for group in groups if group["type"] != OUTSIDE]


def tagged_pieces(text, token_ids, offsets, scores, preprocessor):
    """The `(start, end, probabilities, is_subword)` of one packed row's real tokens.

    A piece continues a word when its vocabulary entry is not as long as its
    span (a WordPiece `##` piece), or, for tokenizers without continuation
    pieces, when it starts inside a run of non-space characters; the unknown
    token always starts a word. These are transformers' rules.
    """
    tokenizer = preprocessor.tokenizer
    has_continuations = hasattr(tokenizer, "continuation_mask")
    unknown = getattr(tokenizer, "unknown_id", None)
    pieces = []
    for token_id, (start, end), row in zip(token_ids, offsets, scores):
        if start < 0:
            continue
        if has_continuations:
            is_subword = len(preprocessor.token_string(token_id)) != end - start
        else:
            is_subword = start > 0 and " " not in text[start - 1 : start + 1]
        pieces.append((int(start), int(end), row, is_subword and token_id != unknown))
    return pieces
