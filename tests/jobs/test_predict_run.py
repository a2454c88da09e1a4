"""`kbert predict` on every task type: a fine-tuned run folder, saved `.keras` files, an older run
folder with its vocab.txt beside the model, a Hugging Face folder with a task head; and its errors.

Each result is checked against the model's own text-level call (tests/tasks/test_text_calls.py checks
those against transformers' pipelines and the token-level path).
"""

import json
import os

import numpy as np
import pytest
from finetuning_data import VOCABULARY, write_checkpoint, write_task_files, write_vocabulary

import kbert
from kbert import cli
from kbert.pretraining import BertPretrainer
from kbert.tasks import MultipleChoice, Seq2SeqLM, SpanQuestionAnswering, TextClassifier, TokenClassifier

pytest.importorskip("tensorflow_text")

from kbert.text import TextPreprocessor, WordPieceTokenizer  # noqa: E402

TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def _encoder(use_pooler=True):
    return kbert.models.Encoder(vocabulary_size=len(VOCABULARY), num_layers=1, num_heads=2, hidden_dim=16,
                                intermediate_dim=32, max_positions=32, use_pooler=use_pooler)


def _predict(arguments, capsys):
    assert cli.main(["predict", *arguments]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]


def _error(arguments, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["predict", *arguments])
    assert exit_info.value.code == 2
    message = capsys.readouterr().err.strip()
    assert len(message.splitlines()) == 1
    return message


def test_a_finetuned_run_names_the_label_from_its_one_file(tmp_path, capsys):
    train, validation = write_task_files("classify", tmp_path)
    from kbert.jobs.finetuning_run import run_finetuning

    run = tmp_path / "run"
    run_finetuning("classify", write_checkpoint(tmp_path), train, validation, output=str(run), epochs=1,
                   batch_size=4, sequence_length=16, log=lambda line: None)
    assert "vocab.txt" not in os.listdir(run)
    capsys.readouterr()  # the fit's progress lines
    [result] = _predict(["--model", str(run), "--text", "the good great film"], capsys)
    assert set(result["scores"]) == {"pos", "neg"} and result["label"] in ("pos", "neg")
    np.testing.assert_allclose(sum(result["scores"].values()), 1.0, atol=1e-6)
    assert result["score"] == max(result["scores"].values())


def _models(tokenizer):
    """Task models over a 16-token preprocessor, with the input `kbert predict` gives each and its call."""
    def preprocessor(**options):
        return TextPreprocessor(tokenizer, 16, **options)

    text = "bob is in paris."
    return {
        "regress": (TextClassifier(_encoder(), 1, preprocessor=preprocessor()), {"text": text},
                    lambda m: m.classify(text)),
        "pairs": (TextClassifier(_encoder(), 2, preprocessor=preprocessor(labels=["no", "yes"])),
                  {"text": text, "text_pair": "where is bob?"}, lambda m: m.classify(text, "where is bob?")),
        "tag": (TokenClassifier(_encoder(False), 5, preprocessor=preprocessor(labels=TAGS)),
                {"text": text}, lambda m: m.tag(text)),
        "qa": (SpanQuestionAnswering(_encoder(False), preprocessor=preprocessor()),
               {"text": text, "question": "where is bob?"}, lambda m: m.answer("where is bob?", text)),
        "choice": (MultipleChoice(_encoder(), 2, preprocessor=preprocessor()),
                   {"text": "bob is", "choices": ["in paris.", "in france."]},
                   lambda m: {k: v for k, v in m.choose("bob is", ["in paris.", "in france."]).items()
                              if k != "ending"}),
        "fill_mask": (BertPretrainer(_encoder(False), pair_objective=None, preprocessor=preprocessor()),
                      {"text": "bob is in [MASK]."},
                      lambda m: {"predictions": [
                          [{"token": p["token"], "score": p["score"]} for p in slot]
                          for slot in m.fill_mask("bob is in [MASK].", top_k=2)["predictions"]]}),
    }


@pytest.mark.parametrize("task", ["regress", "pairs", "tag", "qa", "choice", "fill_mask"])
def test_every_task_type_prints_its_text_call(task, tmp_path, capsys):
    write_vocabulary(tmp_path)
    model, record, call = _models(WordPieceTokenizer(str(tmp_path / "vocab.txt")))[task]
    path = tmp_path / "alone" / "model.keras"
    path.parent.mkdir()
    model.save(str(path))
    expected = json.loads(json.dumps(call(model)))
    if task == "choice":  # endings come in --input lines
        (tmp_path / "in.jsonl").write_text(json.dumps(record) + "\n\n" + json.dumps(record) + "\n")
        results = _predict(["--model", str(path), "--input", str(tmp_path / "in.jsonl")], capsys)
        assert len(results) == 2
    else:
        options = []
        for key, value in record.items():
            options += [f"--{key.replace('_', '-')}", value]
        results = _predict(["--model", str(path), *options, "--top-k", "2"], capsys)
    for result in results:
        assert result.keys() == expected.keys()
        np.testing.assert_equal(json.dumps(result, sort_keys=True), json.dumps(expected, sort_keys=True))


def test_generation_from_text(tmp_path, capsys):
    from kbert.text import SentencePieceTokenizer, train_sentence_piece

    tokenizer = SentencePieceTokenizer(train_sentence_piece(["bob is in paris. alice is in france."] * 30, 30))
    backbone = kbert.models.T5(vocabulary_size=tokenizer.vocabulary_size, num_layers=1, num_heads=2, hidden_dim=16,
                               intermediate_dim=32)
    model = Seq2SeqLM(backbone, preprocessor=TextPreprocessor(tokenizer, 16))
    model.save(str(tmp_path / "t5.keras"))
    [result] = _predict(["--model", str(tmp_path / "t5.keras"), "--text", "bob is", "--max-new-tokens", "4"], capsys)
    assert result == {"generated": model.generate("bob is", max_new_tokens=4)}


def test_an_older_run_folder_reads_the_vocabulary_beside_the_model(tmp_path, capsys):
    write_vocabulary(tmp_path)
    model = TextClassifier(_encoder(), 2)
    model.save(str(tmp_path / "model.keras"))
    [result] = _predict(["--model", str(tmp_path), "--text", "bob is in paris."], capsys)
    model.preprocessor = TextPreprocessor(WordPieceTokenizer(str(tmp_path / "vocab.txt")), 32)  # its positions
    expected = model.classify("bob is in paris.")
    assert result["label"] == expected["label"] and set(result["scores"]) == {"LABEL_0", "LABEL_1"}
    np.testing.assert_allclose(result["score"], expected["score"], atol=1e-6)


def test_a_hugging_face_folder_with_a_task_head(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=len(VOCABULARY), hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=32,
                                     id2label={0: "sad", 1: "happy"})
    hf_model = transformers.BertForSequenceClassification(config).eval()
    hf_model.save_pretrained(str(tmp_path))
    write_vocabulary(tmp_path)
    [result] = _predict(["--model", str(tmp_path), "--text", "bob is in paris."], capsys)
    hf_tokenizer = transformers.BertTokenizerFast(vocab=str(tmp_path / "vocab.txt"))
    with torch.no_grad():
        probabilities = hf_model(**hf_tokenizer("bob is in paris.", return_tensors="pt")).logits.softmax(-1)[0]
    np.testing.assert_allclose([result["scores"]["sad"], result["scores"]["happy"]], probabilities.numpy(),
                               atol=1e-5)


@pytest.mark.parametrize("arguments,message", [
    (["--text", ""], "text 0 is empty"),
    (["--text", "bob", "--input", "x.jsonl"], "--text or --input"),
    (["--input", "BAD"], "line 2: not JSON"),
    (["--text", "bob", "--top-k", "0"], "--top-k must be at least 1"),
])
def test_bad_input_gets_one_line(arguments, message, tmp_path, capsys):
    write_vocabulary(tmp_path)
    TextClassifier(_encoder(), 2, preprocessor=TextPreprocessor(
        WordPieceTokenizer(str(tmp_path / "vocab.txt")), 16)).save(str(tmp_path / "model.keras"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "bob"}\n{"text": bob}\n')
    arguments = [str(bad) if a == "BAD" else a for a in arguments]
    assert message in _error(["--model", str(tmp_path / "model.keras"), *arguments], capsys)


def test_a_question_answering_model_needs_a_question(tmp_path, capsys):
    write_vocabulary(tmp_path)
    model, _, _ = _models(WordPieceTokenizer(str(tmp_path / "vocab.txt")))["qa"]
    model.save(str(tmp_path / "qa.keras"))
    assert "give a question" in _error(["--model", str(tmp_path / "qa.keras"), "--text", "bob is here."], capsys)
