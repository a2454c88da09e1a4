"""`kbert finetune`'s job end to end on a tiny encoder: every task and file format, resume, the BBC demo's guard.

Each run is one short epoch at 24 tokens on files of `finetuning_data`; the
checkpoint is a one-layer, 16-wide BERT saved as `model.keras` with its
`vocab.txt` beside it, as `kbert pretrain` leaves one.
"""

import json
import os
import shutil

import keras
import numpy as np
import pytest
from finetuning_data import check_saved, write_checkpoint, write_t5_checkpoint, write_task_files, write_xlnet_checkpoint

from kbert import cli
from kbert.jobs import bbc_news
from kbert.tasks import MultipleChoice, Seq2SeqLM, SpanQuestionAnswering, TextClassifier, TokenClassifier
from kbert.checkpoints.checkpoint_loading import load_checkpoint
from kbert.jobs import finetuning_catalog
from kbert.jobs.finetuning_run import run_bbc_news_comparison, run_finetuning
from kbert.jobs.predict_run import load_predictor, predict_batch

RUN = dict(epochs=1, batch_size=4, learning_rate=1e-3, sequence_length=24, log=lambda line: None)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("checkpoint"))


@pytest.fixture(scope="module")
def t5_checkpoint(tmp_path_factory):
    return write_t5_checkpoint(tmp_path_factory.mktemp("t5_checkpoint"))


@pytest.fixture(scope="module")
def xlnet_checkpoint(tmp_path_factory):
    return write_xlnet_checkpoint(tmp_path_factory.mktemp("xlnet_checkpoint"))


# task, file options, model class, metric -> its range. The resume test runs `classify` on JSONL with
# three classes, tests/test_cli.py on CSV with text pairs.
CASES = {
    "regress_tsv": ("regress", {"suffix": ".tsv"}, TextClassifier,
                    {"pearson": (-1, 1), "spearman": (-1, 1), "mean_squared_error": (0, np.inf)}),
    "tag": ("tag", {}, TokenClassifier, {"precision": (0, 1), "recall": (0, 1), "f1": (0, 1)}),
    "qa_squad_1": ("qa", {}, SpanQuestionAnswering, {"exact": (0, 100), "f1": (0, 100), "HasAns_f1": (0, 100)}),
    "qa_squad_2": ("qa", {"version": "2.0"}, SpanQuestionAnswering,
                   {"exact": (0, 100), "f1": (0, 100), "HasAns_exact": (0, 100), "HasAns_f1": (0, 100),
                    "NoAns_exact": (0, 100), "no_answer_threshold": (-np.inf, np.inf)}),
    "choice": ("choice", {}, MultipleChoice, {"accuracy": (0, 1)}),
}


@pytest.mark.rotated(reason="the job around the task: each backend's task fits, saves and predicts in tests/tasks")
@pytest.mark.parametrize("case", list(CASES))
def test_every_task_fine_tunes_scores_and_saves(case, checkpoint, tmp_path):
    task, options, model_class, ranges = CASES[case]
    train, validation = write_task_files(task, tmp_path, **options)
    metrics = run_finetuning(task, checkpoint, train, validation, output=str(tmp_path / "run"), **RUN)
    assert metrics["task"] == task and metrics["train_examples"] >= 8
    for name, (low, high) in ranges.items():  # correlations are NaN if the predictions are constant
        value = metrics[name]
        assert low <= value <= high or (name in ("pearson", "spearman") and np.isnan(value)), (name, value)
    rows = check_saved(tmp_path / "run", metrics, model_class)
    questions = metrics.get("total", metrics["validation_examples"])
    assert len(rows) == questions


@pytest.mark.backend_independent  # a learning claim; T5 fits and generates on every backend: tests/tasks, generation
@pytest.mark.slow(reason="40 fine-tuning steps so that T5 learns, then generation-scored evaluation")
def test_t5_learns_text_to_text_and_is_scored_on_what_it_generates(t5_checkpoint, tmp_path):
    # "sentiment: <text>" to "positive" or "negative": chance is 50% exact; 40 steps learn it.
    train, validation = write_task_files("text", tmp_path, count=32)
    run = dict(RUN, epochs=5, learning_rate=1e-2, sequence_length=16)
    metrics = run_finetuning("text", t5_checkpoint, train, validation, output=str(tmp_path / "run"), **run)
    assert metrics["exact"] >= 90 and metrics["f1"] >= metrics["exact"]
    rows = check_saved(tmp_path / "run", metrics, Seq2SeqLM)
    assert len(rows) == 16 and {row["target"] for row in rows} == {"positive", "negative"}


def test_xlnet_batches_put_cls_last_pad_left_and_move_the_tags_with_their_tokens(xlnet_checkpoint, tmp_path):
    backbone, tokenizer = load_checkpoint(xlnet_checkpoint)
    assert (tokenizer.cls_id, tokenizer.sep_id) == (3, 4)  # the <cls> and <sep> pieces of spiece.model
    train, _ = write_task_files("tag", tmp_path)
    data = finetuning_catalog.read("tag", train)
    bert = finetuning_catalog.TASKS["tag"].dataset(data, tokenizer=tokenizer, sequence_length=16, batch_size=4)
    (x_bert, y_bert), (x, y) = next(iter(bert)), next(iter(finetuning_catalog.for_backbone(backbone, bert)))
    for row in range(4):
        mask, real = np.asarray(x["padding_mask"][row]), int(np.sum(x_bert["padding_mask"][row]))
        assert mask.tolist() == [0] * (16 - real) + [1] * real  # padded on the left
        tokens, tags = np.asarray(x["token_ids"][row])[-real:], np.asarray(y["labels"][row])[-real:]
        bert_tokens, bert_tags = np.asarray(x_bert["token_ids"][row])[:real], np.asarray(y_bert["labels"][row])[:real]
        assert tokens.tolist() == [*bert_tokens[1:], tokenizer.cls_id] and tokens[-2] == tokenizer.sep_id
        assert tags.tolist() == [*bert_tags[1:], -1]
        assert np.asarray(x["segment_ids"][row])[-1] == 2  # <cls>'s token type


@pytest.mark.rotated(reason="the job around the task: each backend's task fits, saves and predicts in tests/tasks")
@pytest.mark.parametrize("task, model_class, score", [("classify", TextClassifier, "accuracy"),
                                                      ("tag", TokenClassifier, "f1")])
def test_xlnet_fine_tunes_and_predicts_with_a_sentencepiece_vocabulary(task, model_class, score, xlnet_checkpoint,
                                                                       tmp_path):
    train, validation = write_task_files(task, tmp_path)
    metrics = run_finetuning(task, xlnet_checkpoint, train, validation, output=str(tmp_path / "run"), **RUN)
    assert 0 <= metrics[score] <= 1
    check_saved(tmp_path / "run", metrics, model_class)
    [result] = predict_batch(load_predictor(str(tmp_path / "run")), [{"text": "bob lives in new york"}])
    assert result["label"] in ("pos", "neg") if task == "classify" else isinstance(result["entities"], list)


def test_a_task_on_the_wrong_kind_of_backbone(checkpoint, t5_checkpoint, tmp_path):
    for task, model, kind in (("text", checkpoint, "Encoder"), ("classify", t5_checkpoint, "T5")):
        train, validation = write_task_files(task, tmp_path)
        with pytest.raises(ValueError, match=f"--task {task} fine-tunes a kbert .*; the checkpoint's backbone "
                                             f"is kbert.models.{kind}"):
            run_finetuning(task, model, train, validation, output=str(tmp_path / "run"), **RUN)
    train, validation = write_task_files("text", tmp_path)
    with pytest.raises(ValueError, match="--features scalar_mix reads a frozen encoder's layers; --task text "
                                         "fine-tunes the whole T5"):
        run_finetuning("text", t5_checkpoint, train, validation, output=str(tmp_path / "run"),
                       features="scalar_mix", **RUN)
    assert not (tmp_path / "run").exists()


class _StopAt(keras.callbacks.Callback):
    """Raises `KeyboardInterrupt` (as a crash would stop the run) before training step `at`."""

    def __init__(self, at):
        super().__init__()
        self.at, self.steps = at, 0

    def on_train_batch_begin(self, batch, logs=None):
        if self.steps == self.at:
            raise KeyboardInterrupt
        self.steps += 1


def _weights(path):
    return [keras.ops.convert_to_numpy(v) for v in keras.saving.load_model(path).weights]


@pytest.mark.backend_independent  # the job's resume; each backend's exact resume: tests/test_resumable_run.py
@pytest.mark.slow(reason="a fine-tuning run whole, then interrupted and resumed")
def test_an_interrupted_run_resumes_to_the_uninterrupted_result(checkpoint, tmp_path):
    train, validation = write_task_files("classify", tmp_path, suffix=".jsonl", classes=3)
    run = dict(RUN, epochs=2, save_every=1)  # 2 epochs of 2 steps
    whole = run_finetuning("classify", checkpoint, train, validation, output=str(tmp_path / "whole"), **run)
    with pytest.raises(KeyboardInterrupt):
        run_finetuning("classify", checkpoint, train, validation, output=str(tmp_path / "run"),
                       callbacks=[_StopAt(3)], **run)
    assert os.path.exists(tmp_path / "run" / "resume_state.npz")
    resumed = _StopAt(None)
    metrics = run_finetuning("classify", checkpoint, train, validation, output=str(tmp_path / "run"),
                             callbacks=[resumed], **run)
    assert resumed.steps == 1  # the fourth step only
    rows = check_saved(tmp_path / "run", metrics, TextClassifier)  # the resume state is gone
    assert {row["label"] for row in rows} == {"0", "1", "2"} and len(rows) == 4
    for name in ("accuracy", "macro_f1", "matthews_correlation"):
        assert metrics[name] == pytest.approx(whole[name], abs=1e-6)
    whole_weights = _weights(tmp_path / "whole" / "model.keras")
    for ours, reference in zip(_weights(tmp_path / "run" / "model.keras"), whole_weights):
        np.testing.assert_allclose(ours, reference, atol=1e-6)


@pytest.mark.backend_independent  # the run's record of its arguments
def test_a_rerun_with_other_arguments_is_refused_unless_overwritten(checkpoint, tmp_path):
    train, validation = write_task_files("classify", tmp_path)
    run_finetuning("classify", checkpoint, train, validation, output=str(tmp_path / "run"), **RUN)
    with pytest.raises(ValueError, match=r"holds a run with other arguments: --learning-rate 0.001 \(now 0.002\)"):
        run_finetuning("classify", checkpoint, train, validation, output=str(tmp_path / "run"),
                       **dict(RUN, learning_rate=2e-3))
    metrics = run_finetuning("classify", checkpoint, train, validation, output=str(tmp_path / "run"),
                             overwrite=True, **dict(RUN, learning_rate=2e-3))
    assert metrics["learning_rate"] == 2e-3
    check_saved(tmp_path / "run", metrics, TextClassifier)
    # The same command again: the run is complete, nothing trains, its metrics come back.
    steps, lines = _StopAt(None), []
    again = run_finetuning("classify", checkpoint, train, validation, output=str(tmp_path / "run"),
                           callbacks=[steps], **dict(RUN, learning_rate=2e-3, log=lines.append))
    assert steps.steps == 0 and "complete: nothing to do" in lines[-1]
    assert again == json.loads((tmp_path / "run" / "metrics.json").read_text())


@pytest.mark.backend_independent
def test_a_run_folder_and_a_hugging_face_bpe_folder_are_checkpoints(checkpoint, tmp_path):
    """`--checkpoint RUN_FOLDER` takes the run's model.keras; a RoBERTa folder (vocab.json, merges.txt) fine-tunes."""
    from kbert.text import BytePairTokenizer, learn_byte_pair_vocabulary

    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(checkpoint, folder / "model.keras")
    shutil.copy(os.path.join(os.path.dirname(checkpoint), "vocab.txt"), folder)
    backbone, tokenizer = load_checkpoint(str(folder))
    expected, _ = load_checkpoint(checkpoint)
    assert backbone.get_config() == expected.get_config()
    transformers = pytest.importorskip("transformers")
    texts = ["bob is in paris. alice is in france. the good film was great."] * 30
    learn_byte_pair_vocabulary(texts, 300, str(tmp_path / "roberta"))
    size = len(json.loads((tmp_path / "roberta" / "vocab.json").read_text()))
    config = transformers.RobertaConfig(vocab_size=size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                        intermediate_size=32, max_position_embeddings=40, type_vocab_size=1)
    transformers.RobertaModel(config).save_pretrained(str(tmp_path / "roberta"))
    backbone, tokenizer = load_checkpoint(str(tmp_path / "roberta"))
    assert isinstance(tokenizer, BytePairTokenizer) and tokenizer.vocabulary_size == size
    train, validation = write_task_files("classify", tmp_path)  # packed <s> A </s> B </s>, as RoBERTa reads
    metrics = run_finetuning("classify", str(tmp_path / "roberta"), train, validation,
                             output=str(tmp_path / "finetuned"), **RUN)
    check_saved(tmp_path / "finetuned", metrics, TextClassifier)


def test_a_run_too_long_for_the_model_stops_before_training(checkpoint, tmp_path):
    train, validation = write_task_files("classify", tmp_path)
    with pytest.raises(ValueError, match="Sequence length 64 exceeds the model's 32 positions"):
        run_finetuning("classify", checkpoint, train, validation, output=str(tmp_path / "run"),
                       **dict(RUN, sequence_length=64))
    assert not os.path.exists(tmp_path / "run")


def test_the_bbc_news_demo_needs_a_pretrained_model(tmp_path):
    with pytest.raises(FileNotFoundError, match="No pretrained model at .*model.keras: run `kbert pretrain` first"):
        run_bbc_news_comparison(pretrained=str(tmp_path / "pretrain"), output=str(tmp_path / "run"), **RUN)


# the demo's reading of real files; fine-tuning on every backend: tests/tasks' harnesses
@pytest.mark.backend_independent
def test_the_bbc_news_run_names_the_topic_of_an_article_it_never_saw(checkpoint, tmp_path, capsys, monkeypatch):
    source, folder = bbc_news.bbc_news_folder(), tmp_path / "bbc"
    topics = sorted(os.listdir(source))
    for topic in topics:  # five real articles a topic: four to train on, one to validate
        (folder / topic).mkdir(parents=True)
        for name in sorted(os.listdir(os.path.join(source, topic)))[:bbc_news.HELD_OUT_EVERY]:
            shutil.copy(os.path.join(source, topic, name), folder / topic / name)
    read = bbc_news.read_bbc_news
    monkeypatch.setattr(bbc_news, "read_bbc_news", lambda: read(str(folder)))
    assert cli.main(["finetune", "--pretrained", os.path.dirname(checkpoint), "--output", str(tmp_path / "run"),
                     "--epochs", "1", "--batch-size", "4", "--sequence-length", "24"]) == 0
    capsys.readouterr()
    assert "vocab.txt" not in os.listdir(tmp_path / "run" / "pretrained")  # model.keras holds the tokenizer
    unseen = sorted(os.listdir(os.path.join(source, "tech")))[bbc_news.HELD_OUT_EVERY]
    with open(os.path.join(source, "tech", unseen), encoding="utf-8") as f:
        article = " ".join(f.read().split())
    assert cli.main(["predict", "--model", str(tmp_path / "run" / "pretrained"), "--text", article]) == 0
    [line] = capsys.readouterr().out.strip().splitlines()
    result = json.loads(line)
    assert result["label"] in topics and sorted(result["scores"]) == topics
    assert result["score"] == max(result["scores"].values())
    np.testing.assert_allclose(sum(result["scores"].values()), 1.0, atol=1e-6)
