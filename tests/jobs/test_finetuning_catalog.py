"""The six task specs of `kbert finetune`: reading across files, and scoring known outputs.

The scoring tests run each task's `evaluate` on a stand-in model whose outputs
are a fixed function of the token ids, so the expected metrics are known
exactly: they check that predictions line up with their examples (padded
batches, first sub-tokens, windows merged per question).
"""

import keras
import numpy as np
import pytest
from finetuning_data import (
    VOCABULARY,
    classification_rows,
    regression_rows,
    squad,
    swag_rows,
    text_to_text_rows,
    write_json,
    write_table,
    write_task_files,
)

from kbert.jobs.finetuning_catalog import TASKS, question_answering_window_sizes, read

ID = {token: i for i, token in enumerate(VOCABULARY)}
OPTIONS = dict(sequence_length=24, batch_size=3)  # batches of 3: the last one is padded
# The `tokenizer` fixture (tests/tasks/conftest.py) reads this module's `VOCABULARY`.


class TokenFunctionModel:
    """Stands in for a task model: `predict` maps each batch's `token_ids` through `function`."""

    backbone = None  # no backbone: the pipelines' segment ids are kept as they are

    def __init__(self, function):
        self.function = function

    def predict(self, dataset, verbose=0):
        outputs = [self.function(np.asarray(x["token_ids"])) for x in dataset]
        return keras.tree.map_structure(lambda *parts: np.concatenate(parts), *outputs)


def _has(token_ids, word):
    return (token_ids == ID[word]).any(-1)


def _read_pair(task, tmp_path, **options):
    train, validation = write_task_files(task, tmp_path, count=10, **options)
    train_data = read(task, train)
    return train_data, read(task, validation, train_data)


def test_classification_scores_line_up_with_the_examples(tmp_path, tokenizer):
    train, validation = _read_pair("classify", tmp_path, pairs=True)
    assert train.labels == ["neg", "pos"] and "text_pair" in validation.examples[0]
    # Class 1 ("pos") where a positive word is, else 0: right on every example.
    model = TokenFunctionModel(lambda ids: np.stack([~_has(ids, "good") & ~_has(ids, "great"),
                                                     _has(ids, "good") | _has(ids, "great")], -1) * 1.0)
    scores, rows = TASKS["classify"].evaluate(model, validation, tokenizer=tokenizer, **OPTIONS)
    assert scores == {"accuracy": 1.0, "f1": 1.0, "matthews_correlation": 1.0}
    assert rows == [{"label": e["label"], "prediction": e["label"]} for e in validation.examples]


def test_more_than_two_classes_report_macro_f1(tmp_path, tokenizer):
    train, validation = _read_pair("classify", tmp_path, suffix=".jsonl", classes=3)
    assert train.labels == ["0", "1", "2"]
    model = TokenFunctionModel(lambda ids: np.zeros((len(ids), 3)) + [0.0, 1.0, 0.0])  # always "1"
    scores, rows = TASKS["classify"].evaluate(model, validation, tokenizer=tokenizer, **OPTIONS)
    assert set(scores) == {"accuracy", "macro_f1", "matthews_correlation"}
    assert scores["accuracy"] == pytest.approx(2 / 5)  # labels 0 1 2 0 1
    assert scores["macro_f1"] == pytest.approx((4 / 7) / 3)  # class 1: precision 2/5, recall 1
    assert [row["prediction"] for row in rows] == ["1"] * 5


def test_regression_scores(tmp_path, tokenizer):
    train, validation = _read_pair("regress", tmp_path, suffix=".tsv")
    model = TokenFunctionModel(lambda ids: (ids == ID["good"]).sum(-1, keepdims=True) * 2.0 + 1.0)
    scores, rows = TASKS["regress"].evaluate(model, validation, tokenizer=tokenizer, **OPTIONS)
    labels = np.array([e["label"] for e in validation.examples])
    assert scores["pearson"] == pytest.approx(1.0) and scores["spearman"] == pytest.approx(1.0)
    assert scores["mean_squared_error"] == pytest.approx(np.mean((labels + 1.0) ** 2))
    assert [row["prediction"] for row in rows] == pytest.approx(labels * 2.0 + 1.0)


def test_tagging_scores_read_each_word_from_its_first_sub_token(tmp_path, tokenizer):
    train, validation = _read_pair("tag", tmp_path)
    # "parisian" is "paris ##ian": B-MISC on "paris"; "##ian" says B-PER, which must be ignored.
    per_token = {"bob": "B-PER", "alice": "B-PER", "new": "B-LOC", "york": "I-LOC", "paris": "B-MISC",
                 "##ian": "B-PER"}
    table = np.zeros((len(VOCABULARY), len(train.labels)))
    table[:, train.labels.index("O")] = 1.0
    for token, tag in per_token.items():
        table[ID[token]] = np.eye(len(train.labels))[train.labels.index(tag)]
    scores, rows = TASKS["tag"].evaluate(TokenFunctionModel(lambda ids: table[ids]), validation,
                                         tokenizer=tokenizer, **OPTIONS)
    assert scores == {"precision": 1.0, "recall": 1.0, "f1": 1.0}
    assert rows[1] == {"words": ["alice", "is", "parisian", "."], "tags": ["B-PER", "O", "B-MISC", "O"],
                       "predicted": ["B-PER", "O", "B-MISC", "O"]}


def _span_logits(answer, no_answer_when=None):
    """Start and end logits of 5 on `answer`'s token, and of 10 on [CLS] for questions with `no_answer_when`."""

    def logits(ids):
        scores = (ids == ID[answer]) * 5.0
        if no_answer_when is not None:
            scores[:, 0] = _has(ids, no_answer_when) * 10.0
        return {"start_logits": scores, "end_logits": scores}

    return logits


def test_question_answering_scores_on_squad_1(tmp_path, tokenizer):
    _, validation = _read_pair("qa", tmp_path)
    model = TokenFunctionModel(_span_logits("paris"))  # right on "where is bob?", wrong on alice
    scores, rows = TASKS["qa"].evaluate(model, validation, tokenizer=tokenizer, **OPTIONS)
    assert scores["exact"] == scores["f1"] == 60.0 and scores["total"] == 5  # q0 q2 q4 of q0-q4
    assert "NoAns_exact" not in scores and "no_answer_threshold" not in scores
    assert rows[:2] == [{"id": "q0", "answer": "paris"}, {"id": "q1", "answer": "paris"}]


def test_squad_2_answers_none_above_the_best_threshold(tmp_path, tokenizer):
    path = write_json(tmp_path / "dev.json", squad(4, version="2.0"))  # q0-q3 and n1, n3
    validation = read("qa", path)
    model = TokenFunctionModel(_span_logits("paris", no_answer_when="who"))
    scores, rows = TASKS["qa"].evaluate(model, validation, tokenizer=tokenizer, **OPTIONS)
    # Null score - best span: 0 - 10 on the "where" questions, 20 - 10 on "who is in france?".
    assert scores["no_answer_threshold"] == -10.0
    assert (scores["HasAns_exact"], scores["NoAns_exact"]) == (50.0, 100.0)
    assert dict((row["id"], row["answer"]) for row in rows) == {
        "q0": "paris", "q1": "paris", "n1": "", "q2": "paris", "q3": "paris", "n3": ""}


def test_squad_2_answers_none_at_all_when_that_is_best(tmp_path, tokenizer):
    data = squad(4, version="2.0")
    questions = data["data"][0]["paragraphs"][0]["qas"]
    data["data"][0]["paragraphs"][0]["qas"] = [q for q in questions if q["question"] != "where is bob?"]
    validation = read("qa", write_json(tmp_path / "dev.json", data))  # q1, n1, q3, n3
    # "paris" everywhere, and no question scores [CLS] above it: every difference is -10.
    model = TokenFunctionModel(_span_logits("paris"))
    scores, rows = TASKS["qa"].evaluate(model, validation, tokenizer=tokenizer, **OPTIONS)
    assert scores["no_answer_threshold"] < -10.0
    assert (scores["exact"], scores["NoAns_exact"]) == (50.0, 100.0)
    assert all(row["answer"] == "" for row in rows)


def test_choice_scores(tmp_path, tokenizer):
    train, validation = _read_pair("choice", tmp_path)
    model = TokenFunctionModel(lambda ids: _has(ids, "good") * 1.0)  # (batch, choices)
    scores, rows = TASKS["choice"].evaluate(model, validation, tokenizer=tokenizer, **OPTIONS)
    assert scores == {"accuracy": 1.0}
    assert rows == [{"label": i % 4, "prediction": i % 4} for i in range(5)]


class SentimentGenerator:
    """Stands in for a `Seq2SeqLM`: `generate` answers "positive" for sources with a positive word."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def generate(self, inputs, max_new_tokens):
        sources = self.tokenizer.detokenize(inputs["encoder_token_ids"]).numpy()
        answers = ["positive" if any(w in s.decode() for w in ("good", "great")) else "negative" for s in sources]
        ids = self.tokenizer.tokenize(answers).to_tensor(shape=[None, max_new_tokens])
        return np.asarray(ids)


def test_text_to_text_scores_generated_text(tmp_path):
    from kbert.text import SentencePieceTokenizer, train_sentence_piece

    train, validation = _read_pair("text", tmp_path)
    texts = [text for row in text_to_text_rows(40) for text in row.values()]
    tokenizer = SentencePieceTokenizer(train_sentence_piece(texts, vocabulary_size=48))
    scores, rows = TASKS["text"].evaluate(SentimentGenerator(tokenizer), validation, tokenizer=tokenizer,
                                          **OPTIONS)
    assert scores == {"exact": 100.0, "f1": 100.0}
    assert rows == [{"target": e["target"], "prediction": e["target"]} for e in validation.examples]
    assert len(rows) == 5  # two batches of 3, the last padded


def test_window_sizes_keep_berts_and_fit_short_windows():
    assert question_answering_window_sizes(384) == {"max_query_length": 64, "doc_stride": 128}
    assert question_answering_window_sizes(128) == {"max_query_length": 64, "doc_stride": 42}
    for length in (8, 24, 32):
        sizes = question_answering_window_sizes(length)
        assert length - sizes["max_query_length"] - 3 >= 1 and sizes["doc_stride"] >= 1


def test_texts_gather_every_field_to_learn_a_vocabulary_from(tmp_path):
    texts = {task: read(task, write_task_files(task, tmp_path, count=2)[0]).texts()
             for task in TASKS}
    assert texts["classify"] == ["the good great film", "the awful bad film"]
    assert texts["tag"] == ["bob lives in new york", "alice is parisian ."]
    assert "bob is in paris. alice is in france." in texts["qa"] and "where is bob?" in texts["qa"]
    assert texts["choice"][:2] == ["the film was", "it was good"]
    assert texts["text"][:2] == ["sentiment: the good great film", "positive"]


def test_a_validation_file_must_have_pairs_as_the_training_file_does(tmp_path):
    train = read("classify", write_table(tmp_path / "train.csv", classification_rows(4, pairs=True)))
    with pytest.raises(ValueError, match=r"dev.csv, line 1: the file has no 'text_pair' column"):
        read("classify", write_table(tmp_path / "dev.csv", classification_rows(4)), train)
    train = read("regress", write_table(tmp_path / "train.jsonl", regression_rows(4)))
    pairs = [{**row, "text_pair": "it was"} for row in regression_rows(4)]
    with pytest.raises(ValueError, match=r"dev.jsonl, line 1: the file has a 'text_pair' column"):
        read("regress", write_table(tmp_path / "dev.jsonl", pairs), train)


def test_a_validation_file_must_have_the_training_files_choice_count(tmp_path):
    train = read("choice", write_table(tmp_path / "train.csv", swag_rows(4, endings=4)))
    with pytest.raises(ValueError, match=r"dev.csv, line 1: 3 ending columns where the training file has 4"):
        read("choice", write_table(tmp_path / "dev.csv", swag_rows(4, endings=3)), train)


def test_bad_files_that_the_readers_accept(tmp_path):
    one_label = [row for row in classification_rows(4) if row["label"] == "pos"]
    with pytest.raises(ValueError, match=r"train.csv: every row has the label 'pos'; classification needs two"):
        read("classify", write_table(tmp_path / "train.csv", one_label))
    unlabelled = [{k: v for k, v in row.items() if k != "label"} for row in swag_rows(4)]
    with pytest.raises(ValueError, match=r"swag.csv, line 1: no column 'label'"):
        read("choice", write_table(tmp_path / "swag.csv", unlabelled))
    data = squad(2)
    data["data"][0]["paragraphs"][0]["qas"][1]["id"] = "q0"
    with pytest.raises(ValueError, match=r"squad.json, question q0: the id is used by another question too"):
        read("qa", write_json(tmp_path / "squad.json", data))
