"""SQuAD examples to windows over long contexts, and the `tf.data` pipeline that feeds them.

`question_answering_windows` follows BERT's `run_squad.py`: every window is
`[CLS] question [SEP] context-window [SEP]`, the question cut to
`max_query_length` tokens, and windows over a long context start
`doc_stride` tokens apart (BERT's stride is the step between window starts;
Hugging Face's `stride` is the overlap). An answer's character span maps to
the tokens that overlap it (through the tokenizer's offsets, as
transformers' `run_qa.py` does); a window that does not hold the whole
answer, and an unanswerable question, point to position 0 ([CLS]).

The windows are a dict of NumPy arrays, one row per window, that also carry
what post-processing (`kbert.tasks.span_decoding.decode_answers`) needs:

- `token_ids`, `segment_ids` (1 from the context to its [SEP]), `padding_mask`
  `(windows, L)`;
- `question_mask` `(windows, L)`: 1 on the question tokens (Longformer's
  global attention, `SpanQuestionAnswering` takes it as an input);
- `start_positions`, `end_positions` `(windows,)`: the answer's tokens;
- `offsets` int32 `(windows, L, 2)`: each context token's `[start, end)`
  character span in its example's context, `(-1, -1)` on question, special
  and padding tokens;
- `max_context_mask` bool `(windows, L)`: True where this window gives the
  context token its most context (BERT's `token_is_max_context`), the only
  window where a span may start at that token;
- `example_index` int32 `(windows,)` and `question_ids` (a list of strings):
  the example each window comes from.

`question_answering_dataset` batches the windows as the other builders of
`kbert.tasks.input_pipelines` do: `x` holds `token_ids`, `segment_ids`,
`padding_mask` and `question_mask` (int32), `y` holds `start_positions` and
`end_positions` (int32).

```python
windows = question_answering_windows(read_squad("dev-v1.1.json"), tokenizer)
logits = model.predict(question_answering_dataset(windows, batch_size=32))
answers, _ = decode_answers(logits["start_logits"], logits["end_logits"], windows["offsets"],
                            windows["question_ids"], contexts,
                            max_context_mask=windows["max_context_mask"])
```
"""

import numpy as np

from kbert.backend.imports import lazy_import
from kbert.tasks.input_pipelines import bucketed_dataset, special_token_ids
from kbert.text.pair_packing import pack

tf = lazy_import("tensorflow")

_TOKENIZER_BATCH = 512
_INPUTS = ("token_ids", "segment_ids", "padding_mask", "question_mask")
_TARGETS = ("start_positions", "end_positions")


def _tokenized(tokenizer, texts, with_offsets):
    """Token ids (and character offsets, as `(n, 2)` arrays) of each text, in batches."""
    results = []
    for begin in range(0, len(texts), _TOKENIZER_BATCH):
        batch = tf.constant(texts[begin : begin + _TOKENIZER_BATCH], tf.string)
        if not with_offsets:
            results.extend(np.array(ids, np.int32) for ids in tokenizer.tokenize(batch).to_list())
            continue
        ids, starts, ends = tokenizer.tokenize_with_offsets(batch)
        splits = ids.row_splits.numpy()
        ids, spans = ids.flat_values.numpy(), np.stack([starts.flat_values, ends.flat_values], -1)
        results.extend((ids[a:b], spans[a:b]) for a, b in zip(splits[:-1], splits[1:]))
    return results


def question_answering_window_sizes(sequence_length):
    """`max_query_length` and `doc_stride` for windows of `sequence_length` tokens.

    BERT's SQuAD settings (64 and 128 at 384 tokens), kept for longer windows
    and scaled down for shorter ones: a question takes at most half the window
    and windows start a third of the window apart.

    >>> question_answering_window_sizes(384), question_answering_window_sizes(32)
    ({'max_query_length': 64, 'doc_stride': 128}, {'max_query_length': 16, 'doc_stride': 10})
    """
    return dict(max_query_length=min(64, sequence_length // 2), doc_stride=min(128, sequence_length // 3))


def context_windows(num_tokens, max_tokens, doc_stride):
    """`(start, length)` of the windows over `num_tokens` context tokens (one if none).

    >>> context_windows(10, 4, 3)
    [(0, 4), (3, 4), (6, 4)]
    """
    windows, start = [], 0
    while True:
        length = min(num_tokens - start, max_tokens)
        windows.append((start, length))
        if start + length >= num_tokens:
            return windows
        start += min(length, doc_stride)


def max_context_masks(windows, num_tokens):
    """For each window, a bool mask over the context tokens: where it is the token's best window.

    A token's context in a window is the fewer of its neighbours on the left
    and on the right, plus 0.01 per window token; the first best window wins
    (BERT's `_check_is_max_context`).

    >>> [m.tolist() for m in max_context_masks([(0, 3), (1, 3)], 4)]
    [[True, True, False, False], [False, False, True, True]]
    """
    best_score = np.full(num_tokens, -np.inf)
    best_window = np.zeros(num_tokens, np.int64)
    for w, (start, length) in enumerate(windows):
        position = np.arange(start, start + length)
        score = np.minimum(position - start, start + length - 1 - position) + 0.01 * length
        better = score > best_score[position]
        best_score[position[better]] = score[better]
        best_window[position[better]] = w
    # The windows cover every token, so a token's best window holds it.
    return [best_window == w for w in range(len(windows))]


def answer_token_span(offsets, example):
    """`(first, last)` context tokens of the example's first answer, or None.

    The tokens are those whose character span overlaps the answer's; None
    for an unanswerable question or an answer that covers no token.

    >>> offsets = np.array([[0, 5], [6, 8], [9, 11], [12, 18]])
    >>> answer_token_span(offsets, {"answers": [{"text": "in France", "answer_start": 9}]})
    (2, 3)
    """
    if example.get("is_impossible") or not example.get("answers"):
        return None
    answer = example["answers"][0]
    begin = answer["answer_start"]
    end = begin + len(answer["text"])
    inside = np.flatnonzero((offsets[:, 0] < end) & (offsets[:, 1] > begin))
    return (int(inside[0]), int(inside[-1])) if inside.size else None


def _empty_windows(count, sequence_length):
    length = (count, sequence_length)
    return {
        "token_ids": np.zeros(length, np.int32),
        "segment_ids": np.zeros(length, np.int8),
        "padding_mask": np.zeros(length, np.int8),
        "question_mask": np.zeros(length, np.int8),
        "offsets": np.full((*length, 2), -1, np.int32),
        "max_context_mask": np.zeros(length, bool),
        "start_positions": np.zeros(count, np.int32),
        "end_positions": np.zeros(count, np.int32),
        "example_index": np.zeros(count, np.int32),
    }


def _fill_window(out, row, question, context, window, max_context, answer, special_ids):
    """Write one window, `[CLS] question [SEP] context[window] [SEP]`, into row `row` of `out`."""
    (ids, offsets), (start, length) = context, window
    first = len(question) + 2  # the first context position
    end = first + length
    packed = pack(question, ids[start : start + length], len(out["token_ids"][row]), *special_ids)
    out["token_ids"][row], out["segment_ids"][row], out["padding_mask"][row] = packed
    out["question_mask"][row, 1 : first - 1] = 1
    out["offsets"][row, first:end] = offsets[start : start + length]
    out["max_context_mask"][row, first:end] = max_context[start : start + length]
    if answer is not None and start <= answer[0] and answer[1] < start + length:
        out["start_positions"][row] = answer[0] - start + first
        out["end_positions"][row] = answer[1] - start + first


def question_answering_windows(
    examples, tokenizer, sequence_length=384, max_query_length=64, doc_stride=128
):
    """SQuAD examples to windows `[CLS] question [SEP] context-window [SEP]`, as NumPy arrays.

    Args:
        examples: dicts with `question`, `context`, `answers` (a list of
            `{"text", "answer_start"}`; the first is the target), and
            optionally `id` and `is_impossible`, as `read_squad` gives.
        tokenizer: a `kbert.text` tokenizer with `tokenize_with_offsets` and
            `cls_id`, `sep_id`, `pad_id`.
        sequence_length: `L`, the length of every window.
        max_query_length: questions are cut to this many tokens.
        doc_stride: tokens between the starts of two windows over a context.

    Returns:
        A dict of NumPy arrays, one row per window (see the module docstring).

    Example:

    >>> from kbert.text import WordPieceTokenizer
    >>> tokenizer = WordPieceTokenizer(
    ...     ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "where", "paris", "is", "in", "france"])
    >>> example = {"id": "q1", "question": "Where?", "context": "Paris is in France",
    ...            "answers": [{"text": "France", "answer_start": 12}]}
    >>> windows = question_answering_windows([example], tokenizer, 8, 3, doc_stride=2)
    >>> windows["token_ids"].tolist()
    [[2, 5, 1, 3, 6, 7, 8, 3], [2, 5, 1, 3, 8, 9, 3, 0]]
    >>> windows["start_positions"].tolist(), windows["offsets"][1, 4:6].tolist()
    ([0, 5], [[9, 11], [12, 18]])
    """
    special_ids = special_token_ids(tokenizer)
    if max_query_length < 1 or doc_stride < 1 or sequence_length - max_query_length - 3 < 1:
        raise ValueError(
            "Windows need max_query_length >= 1, doc_stride >= 1 and room for context: "
            f"sequence_length ({sequence_length}) - max_query_length ({max_query_length}) - 3 "
            "must be at least 1."
        )
    if not examples:
        raise ValueError("There are no examples.")
    questions = _tokenized(tokenizer, [e["question"] for e in examples], with_offsets=False)
    unique = list(dict.fromkeys(e["context"] for e in examples))
    contexts = dict(zip(unique, _tokenized(tokenizer, unique, with_offsets=True)))
    plans = []
    for example, question in zip(examples, questions):
        ids, offsets = contexts[example["context"]]
        question = question[:max_query_length]
        windows = context_windows(len(ids), sequence_length - len(question) - 3, doc_stride)
        plans.append((question, windows, max_context_masks(windows, len(ids))))
    out = _empty_windows(sum(len(windows) for _, windows, _ in plans), sequence_length)
    out["question_ids"] = []
    row = 0
    for index, (example, (question, windows, masks)) in enumerate(zip(examples, plans)):
        context = contexts[example["context"]]
        answer = answer_token_span(context[1], example)
        for window, mask in zip(windows, masks):
            _fill_window(out, row, question, context, window, mask, answer, special_ids)
            out["example_index"][row] = index
            out["question_ids"].append(str(example.get("id", index)))
            row += 1
    return out


def question_answering_dataset(
    windows, batch_size=32, training=False, seed=None, pad_final_batch=False, buckets=None
):
    """Batches of question-answering windows (`question_answering_windows`), as `(x, y)`.

    Args:
        windows: the dict of arrays `question_answering_windows` returns.
        batch_size, training, seed, pad_final_batch, buckets: as in
            `kbert.tasks.input_pipelines` (training shuffles the windows).

    Returns:
        A `tf.data.Dataset` of `(x, y)`: `x` with `token_ids`, `segment_ids`,
        `padding_mask`, `question_mask` int32 `(batch, L)`; `y` with
        `start_positions`, `end_positions` int32 `(batch,)` (-1 on padded rows).
    """
    missing = [name for name in _INPUTS + _TARGETS if name not in windows]
    if missing:
        raise ValueError(
            f"`windows` lacks {missing}: pass what question_answering_windows returns."
        )
    return bucketed_dataset(windows, _INPUTS, _TARGETS, batch_size, training, seed, pad_final_batch, buckets)
