"""SQuAD windows: layout and offsets against Hugging Face's fast BERT tokenizer with a stride,
answers inside / across / outside windows, max-context masks against BERT's rule, the dataset."""

import numpy as np
import pytest

pytest.importorskip("tensorflow_text")
transformers = pytest.importorskip("transformers")

from kbert.tasks.question_answering_dataset import (  # noqa: E402
    question_answering_dataset,
    question_answering_windows,
)
from kbert.text import SentencePieceTokenizer, train_sentence_piece  # noqa: E402

pytestmark = pytest.mark.backend_independent  # tf.data and TensorFlow tokenizers whatever the backend: one run

WORDS = [f"w{i}" for i in range(20)]
VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "where", "is", "it", "?", "."] + WORDS
CONTEXT = " ".join(WORDS[:10])  # "w0 w1 ... w9": one token per word


def squad_example(text, start=None, context=CONTEXT, question="where is it?", id="q"):
    start = context.index(text) if start is None and text else start
    answers = [{"text": text, "answer_start": start}] if text else []
    return {"id": id, "question": question, "context": context, "answers": answers,
            "is_impossible": not text}  # fmt: skip


def context_tokens(windows, w):
    """The context token indices (into the whole context) a window holds, from its offsets."""
    starts = windows["offsets"][w, :, 0]
    return [CONTEXT[:s].count(" ") for s in starts[starts >= 0]]


def test_answers_inside_across_and_outside_windows(tokenizer):
    # "where is it ?" is 4 tokens: windows of 12 hold 12 - 4 - 3 = 5 context tokens,
    # and start 3 tokens apart: [0-4], [3-7], [6-9].
    examples = [
        squad_example("w4"),
        squad_example("w4 w5 w6"),
        squad_example("w9"),
        squad_example(""),
    ]
    windows = question_answering_windows(examples, tokenizer, 12, 8, doc_stride=3)
    assert windows["example_index"].tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert windows["question_ids"] == ["q"] * 12
    assert [context_tokens(windows, w) for w in range(3)] == [
        [0, 1, 2, 3, 4],
        [3, 4, 5, 6, 7],
        [6, 7, 8, 9],
    ]
    first = 6  # [CLS] where is it ? [SEP]
    starts, ends = windows["start_positions"].tolist(), windows["end_positions"].tolist()
    # "w4": in the first two windows.
    assert (starts[:3], ends[:3]) == ([first + 4, first + 1, 0], [first + 4, first + 1, 0])
    # "w4 w5 w6": whole only in the second window; cut in the others -> [CLS].
    assert (starts[3:6], ends[3:6]) == ([0, first + 1, 0], [0, first + 3, 0])
    # "w9": only in the last window; unanswerable: [CLS] everywhere.
    assert (starts[6:], ends[6:]) == ([0, 0, first + 3, 0, 0, 0], [0, 0, first + 3, 0, 0, 0])
    # The offsets of the answer tokens give back the answer text exactly.
    for w in np.flatnonzero(windows["start_positions"]):
        example = examples[windows["example_index"][w]]
        span = windows["offsets"][w, starts[w], 0], windows["offsets"][w, ends[w], 1]
        assert example["context"][span[0] : span[1]] == example["answers"][0]["text"]


def test_layout_of_a_window(tokenizer):
    windows = question_answering_windows([squad_example("w1")], tokenizer, 18, 8, doc_stride=3)
    assert len(windows["token_ids"]) == 1  # 18 - 4 - 3 = 11 context tokens fit
    question = tokenizer("where is it?")
    context = tokenizer(CONTEXT)
    assert windows["token_ids"][0].tolist() == [2, *question, 3, *context, 3, 0]
    assert windows["segment_ids"][0].tolist() == [0] * 6 + [1] * 11 + [0]
    assert windows["padding_mask"][0].tolist() == [1] * 17 + [0]
    assert windows["question_mask"][0].tolist() == [0, 1, 1, 1, 1] + [0] * 13
    assert windows["offsets"][0, :6].tolist() == [[-1, -1]] * 6
    assert windows["offsets"][0, 6:8].tolist() == [[0, 2], [3, 5]]
    assert windows["offsets"][0, 16:].tolist() == [[-1, -1]] * 2
    assert windows["max_context_mask"][0].tolist() == [False] * 6 + [True] * 10 + [False] * 2
    assert (windows["start_positions"][0], windows["end_positions"][0]) == (7, 7)
    # The question is cut to max_query_length tokens.
    short = question_answering_windows([squad_example("w1")], tokenizer, 16, 2, doc_stride=3)
    assert short["token_ids"][0, :4].tolist() == [2, *question[:2], 3]
    assert short["question_mask"][0, :4].tolist() == [0, 1, 1, 0]


def reference_max_context(spans, span_index, position):
    """BERT's `_check_is_max_context` (run_squad.py), spans as (start, length)."""
    best_score, best_index = None, None
    for index, (start, length) in enumerate(spans):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_index = score, index
    return span_index == best_index


def reference_positions(encoded, w, start_char, end_char):
    """transformers' `run_qa.py` training labels of window `w`."""
    sequence_ids, offsets = encoded.sequence_ids(w), encoded["offset_mapping"][w]
    first = sequence_ids.index(1)
    last = len(sequence_ids) - 1 - sequence_ids[::-1].index(1)
    if not (offsets[first][0] <= start_char and offsets[last][1] >= end_char):
        return 0, 0
    while first <= last and offsets[first][0] <= start_char:
        first += 1
    while offsets[last][1] >= end_char:
        last -= 1
    return first - 1, last + 1


def test_matches_reference_tokenizer_with_stride(tokenizer, vocab_path):
    """Hugging Face's `stride` is the overlap of windows, BERT's `doc_stride` their step."""
    hf = transformers.BertTokenizerFast(vocab=vocab_path)
    context = " ".join(WORDS[i % 20] + ("." if i % 7 == 6 else "") for i in range(57))
    examples = [
        squad_example("w5 w6.", context=context, question=question)
        for question in ("where?", "where is it w1 w2 w3?")
    ]
    length, doc_stride = 24, 5
    windows = question_answering_windows(examples, tokenizer, length, 10, doc_stride)
    rows = 0
    for index, example in enumerate(examples):
        budget = length - len(tokenizer(example["question"])) - 3
        expected = hf(example["question"], example["context"], truncation="only_second",
                      max_length=length, stride=budget - doc_stride, padding="max_length",
                      return_overflowing_tokens=True, return_offsets_mapping=True)  # fmt: skip
        count = len(expected["input_ids"])
        ours = {
            name: array[rows : rows + count]
            for name, array in windows.items()
            if name != "question_ids"
        }
        assert count > 3 and ours["example_index"].tolist() == [index] * count
        assert 0 < ours["start_positions"].sum() < ours["end_positions"].sum()
        np.testing.assert_array_equal(ours["token_ids"], expected["input_ids"])
        np.testing.assert_array_equal(ours["segment_ids"], expected["token_type_ids"])
        np.testing.assert_array_equal(ours["padding_mask"], expected["attention_mask"])
        spans = []
        for w in range(count):
            in_context = np.array([s == 1 for s in expected.sequence_ids(w)])
            offsets = np.where(in_context[:, None], np.array(expected["offset_mapping"][w]), -1)
            np.testing.assert_array_equal(ours["offsets"][w], offsets)
            spans.append((w * doc_stride, int(in_context.sum())))
            answer = example["answers"][0]
            end_char = answer["answer_start"] + len(answer["text"])
            positions = reference_positions(expected, w, answer["answer_start"], end_char)
            assert (ours["start_positions"][w], ours["end_positions"][w]) == positions
        # Max context: BERT's rule, token by token.
        for w, (start, n) in enumerate(spans):
            first = np.flatnonzero(ours["offsets"][w, :, 0] >= 0)[0]
            expected_mask = [reference_max_context(spans, w, start + i) for i in range(n)]
            assert ours["max_context_mask"][w, first : first + n].tolist() == expected_mask
        # Every context token is "max context" in exactly one window.
        assert ours["max_context_mask"].sum() == len(tokenizer(example["context"]))
        rows += count


def test_sentence_piece_offsets_give_back_the_answer():
    contexts = [
        "The lazy dog sleeps under the old oak tree.",
        "A quick brown fox, then a slow one.",
    ]
    model = train_sentence_piece(contexts * 30, 60, control_symbols=("[CLS]", "[SEP]"))
    tokenizer = SentencePieceTokenizer(model)
    examples = [
        squad_example("old oak", context=contexts[0], question="Where?"),
        squad_example("brown fox", context=contexts[1], question="What?"),
    ]
    windows = question_answering_windows(examples, tokenizer, 20, 4, doc_stride=4)
    found = 0
    for w in np.flatnonzero(windows["start_positions"]):
        example = examples[windows["example_index"][w]]
        start, end = windows["start_positions"][w], windows["end_positions"][w]
        span = windows["offsets"][w, start, 0], windows["offsets"][w, end, 1]
        assert example["context"][span[0] : span[1]] == example["answers"][0]["text"]
        found += 1
    assert found >= 2
    assert (windows["token_ids"][:, 0] == tokenizer.cls_id).all()


def test_span_decoding_gives_back_the_answers(tokenizer):
    """Logits that peak at the target positions decode to the answer texts."""
    decode_answers = pytest.importorskip("kbert.tasks.span_decoding").decode_answers
    texts = ["w4", "w4 w5 w6", "w9"]
    examples = [squad_example(text, id=f"q{i}") for i, text in enumerate(texts)]
    windows = question_answering_windows(examples, tokenizer, 12, 8, doc_stride=3)
    rows = np.arange(len(windows["token_ids"]))
    start_logits, end_logits = np.zeros((2, *windows["token_ids"].shape))
    start_logits[rows, windows["start_positions"]] = 5.0
    end_logits[rows, windows["end_positions"]] = 5.0
    contexts = {example["id"]: example["context"] for example in examples}
    answers, _ = decode_answers(
        start_logits, end_logits, windows["offsets"], windows["question_ids"], contexts,
        max_context_mask=windows["max_context_mask"],
    )  # fmt: skip
    assert answers == {"q0": "w4", "q1": "w4 w5 w6", "q2": "w9"}


def test_dataset_static_shapes_and_padding(tokenizer):
    examples = [squad_example(f"w{i}", id=f"q{i}") for i in range(4)]
    windows = question_answering_windows(examples, tokenizer, 12, 8, doc_stride=3)
    assert len(windows["token_ids"]) == 12
    training = question_answering_dataset(windows, batch_size=5, training=True, seed=0)
    x_spec, y_spec = training.element_spec
    assert {name: spec.shape.as_list() for name, spec in x_spec.items()} == {
        name: [5, 12] for name in ("token_ids", "segment_ids", "padding_mask", "question_mask")
    }
    assert {name: spec.shape.as_list() for name, spec in y_spec.items()} == {
        "start_positions": [5],
        "end_positions": [5],
    }
    assert len(list(training)) == 2
    padded = list(question_answering_dataset(windows, 5, pad_final_batch=True).as_numpy_iterator())
    x, y = padded[-1]
    assert x["token_ids"].shape == (5, 12) and x["token_ids"].dtype == np.int32
    np.testing.assert_array_equal(x["token_ids"][:2], windows["token_ids"][10:])
    np.testing.assert_array_equal(x["question_mask"][:2], windows["question_mask"][10:])
    assert not x["padding_mask"][2:].any() and y["start_positions"][2:].tolist() == [-1] * 3
    assert windows["question_ids"][::3] == ["q0", "q1", "q2", "q3"]


def test_errors(tokenizer):
    with pytest.raises(ValueError, match="room for context"):
        question_answering_windows([squad_example("w1")], tokenizer, 12, 9)
    with pytest.raises(ValueError, match="doc_stride"):
        question_answering_windows([squad_example("w1")], tokenizer, 12, 4, doc_stride=0)
    with pytest.raises(ValueError, match="no examples"):
        question_answering_windows([], tokenizer)
    with pytest.raises(ValueError, match="lacks"):
        question_answering_dataset({"token_ids": np.zeros((2, 4))})
