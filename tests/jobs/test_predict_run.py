"""`kbert predict` on every task type: saved `.keras` files, an older run folder with its vocab.txt beside
the model, Hugging Face folders with a task head or a generator; and its errors. (A fine-tuned run folder:
the BBC News test of tests/jobs/test_finetuning_run.py; a pretraining run's: tests/jobs/test_pretraining_run.py.)

Each result is checked against the model's own text-level call (tests/tasks/test_text_calls.py checks
those against transformers' pipelines and the token-level path).
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from finetuning_data import VOCABULARY, write_vocabulary

import kbert
from kbert import cli
from kbert.pretraining import BertPretrainer
from kbert.jobs.predict_run import refuse_inapplicable
from kbert.tasks import CausalLM, MultipleChoice, Seq2SeqLM, SpanQuestionAnswering, TextClassifier, TokenClassifier

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


@pytest.mark.rotated(reason="the command around the text call; each backend's: tests/tasks/test_text_calls.py")
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
    for result in results:  # the same, to 1e-6 (the two choice inputs run as one batch)
        assert result.keys() == expected.keys()
        _assert_same(result, expected)


def _assert_same(result, expected):
    """Equal JSON values, numbers to 1e-6."""
    if isinstance(expected, dict):
        assert result.keys() == expected.keys()
        for key in expected:
            _assert_same(result[key], expected[key])
    elif isinstance(expected, list):
        assert len(result) == len(expected)
        for mine, theirs in zip(result, expected):
            _assert_same(mine, theirs)
    elif isinstance(expected, float):
        np.testing.assert_allclose(result, expected, atol=1e-6)
    else:
        assert result == expected


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


_HOST_SCRIPT = """
import json, sys
from kbert.jobs.predict_run import load_predictor, predict_batch
model = load_predictor(sys.argv[1])
texts = json.loads(sys.argv[2])
results = [predict_batch(model, [{"text": t} for t in texts]),
           predict_batch(model, [{"text": t, "text_pair": p} for t, p in zip(texts, texts[::-1])])]
print(json.dumps({"tensorflow": "tensorflow" in sys.modules, "results": results}))
"""


# The host path (issue 35) runs in a fresh PyTorch process, compared with the TensorFlow path in this one: a
# PyTorch check whatever the suite's backend.
@pytest.mark.backend_independent
def test_a_word_piece_classifier_predicts_on_torch_without_importing_tensorflow(tmp_path, monkeypatch):
    model = TextClassifier(_encoder(), 3, preprocessor=TextPreprocessor(WordPieceTokenizer(list(VOCABULARY)), 16,
                                                                        labels=["a", "b", "c"]))
    model.save(str(tmp_path / "model.keras"))
    texts = ["Bob is in PARIS.", "alice\u200b is in néw york [MASK]!", "bob " * 20, "北京 bob", "\x07 ."]
    env = dict(os.environ, KERAS_BACKEND="torch", PYTHONPATH=os.pathsep.join([os.getcwd(), *sys.path]))
    done = subprocess.run([sys.executable, "-c", _HOST_SCRIPT, str(tmp_path), json.dumps(texts)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["tensorflow"] is False
    monkeypatch.setattr(TextPreprocessor, "host_tokenizer", lambda self: None)  # the TensorFlow path
    from kbert.jobs.predict_run import load_predictor, predict_batch

    saved = load_predictor(str(tmp_path))
    _assert_same(found["results"], [predict_batch(saved, [{"text": t} for t in texts]),
                                     predict_batch(saved, [{"text": t, "text_pair": p}
                                                           for t, p in zip(texts, texts[::-1])])])


def _hf_bert(tmp_path, architecture, **config):
    """A tiny random transformers BERT with `architecture`'s head saved in `tmp_path` with its vocab.txt;
    the model and a fast tokenizer of the same vocabulary."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=len(VOCABULARY), hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=32,
                                     **config)
    hf_model = getattr(transformers, architecture)(config).eval()
    hf_model.save_pretrained(str(tmp_path))
    write_vocabulary(tmp_path)
    return hf_model, transformers.BertTokenizerFast(vocab=str(tmp_path / "vocab.txt"))


def test_a_hugging_face_folder_with_a_task_head(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    hf_model, hf_tokenizer = _hf_bert(tmp_path, "BertForSequenceClassification", id2label={0: "sad", 1: "happy"})
    [result] = _predict(["--model", str(tmp_path), "--text", "bob is in paris."], capsys)
    with torch.no_grad():
        probabilities = hf_model(**hf_tokenizer("bob is in paris.", return_tensors="pt")).logits.softmax(-1)[0]
    np.testing.assert_allclose([result["scores"]["sad"], result["scores"]["happy"]], probabilities.numpy(),
                               atol=1e-5)


def test_a_hugging_face_tagger_and_masked_lm_give_the_pipelines_results(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    text = "bob lives in new york."
    hf_model, hf_tokenizer = _hf_bert(tmp_path / "tagger", "BertForTokenClassification",
                                      id2label=dict(enumerate(TAGS)))
    [result] = _predict(["--model", str(tmp_path / "tagger"), "--text", text], capsys)
    pipe = transformers.pipeline("token-classification", model=hf_model, tokenizer=hf_tokenizer, device="cpu")
    expected = pipe(text, aggregation_strategy="first")
    assert [(e["label"], e["start"], e["end"], e["text"]) for e in result["entities"]] == [
        (e["entity_group"], e["start"], e["end"], e["word"].replace(" ", "")) for e in expected]
    np.testing.assert_allclose([e["score"] for e in result["entities"]], [e["score"] for e in expected], atol=1e-5)
    hf_model, hf_tokenizer = _hf_bert(tmp_path / "mlm", "BertForMaskedLM")
    [result] = _predict(["--model", str(tmp_path / "mlm"), "--text", "bob lives in [MASK].", "--top-k", "3"], capsys)
    pipe = transformers.pipeline("fill-mask", model=hf_model, tokenizer=hf_tokenizer, device="cpu")
    expected = pipe("bob lives in [MASK].", top_k=3)
    assert [p["token"] for p in result["predictions"][0]] == [e["token_str"] for e in expected]
    np.testing.assert_allclose([p["score"] for p in result["predictions"][0]], [e["score"] for e in expected],
                               atol=1e-5)


def test_hugging_face_question_answering_and_multiple_choice(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    context, question = "bob lives in paris. alice lives in new york.", "where is alice?"
    _hf_bert(tmp_path / "qa", "BertForQuestionAnswering")
    [result] = _predict(["--model", str(tmp_path / "qa"), "--text", context, "--question", question], capsys)
    model = kbert.from_huggingface_task(str(tmp_path / "qa"))
    model.preprocessor = TextPreprocessor(WordPieceTokenizer(str(tmp_path / "qa" / "vocab.txt")), 32)
    assert result == json.loads(json.dumps(model.answer(question, context)))
    assert context[result["start"]:result["end"]] == result["answer"]
    hf_model, hf_tokenizer = _hf_bert(tmp_path / "choice", "BertForMultipleChoice")
    endings = ["in paris.", "in france.", "in new york."]
    (tmp_path / "in.jsonl").write_text(json.dumps({"text": "bob lives", "choices": endings}) + "\n")
    [result] = _predict(["--model", str(tmp_path / "choice"), "--input", str(tmp_path / "in.jsonl")], capsys)
    encoded = hf_tokenizer(["bob lives"] * 3, endings, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = hf_model(**{k: v[None] for k, v in encoded.items()}).logits.softmax(-1)[0].numpy()
    assert result["choice"] == int(expected.argmax())
    np.testing.assert_allclose(result["scores"], expected, atol=1e-5)
    message = _error(["--model", str(tmp_path / "choice"), "--text", "bob lives"], capsys)
    assert "do not store their number of choices" in message


def _hf_generator(kind, folder):
    """A tiny random transformers GPT-2, BART or T5 saved in `folder` with its tokenizer files."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from kbert.text import learn_byte_pair_vocabulary, train_sentence_piece

    texts = ["bob is in paris. alice is in france. the good film was great."] * 30
    if kind == "t5":
        (folder / "spiece.model").write_bytes(train_sentence_piece(texts, 40))
        config = transformers.T5Config(vocab_size=40, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2,
                                       decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
        model_class = transformers.T5ForConditionalGeneration
    else:
        learn_byte_pair_vocabulary(texts, 300, str(folder))
        size = len(json.loads((folder / "vocab.json").read_text()))
        if kind == "gpt2":
            config = transformers.GPT2Config(vocab_size=size, n_embd=16, n_layer=1, n_head=2, n_positions=64,
                                             bos_token_id=2, eos_token_id=2)
            model_class = transformers.GPT2LMHeadModel
        else:
            config = transformers.BartConfig(vocab_size=size, d_model=16, encoder_layers=1, decoder_layers=1,
                                             encoder_attention_heads=2, decoder_attention_heads=2,
                                             encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64)
            model_class = transformers.BartForConditionalGeneration
    torch.manual_seed(0)
    model_class(config).eval().save_pretrained(str(folder))


# the command's reading of a Hugging Face folder; import parity and generation on every backend: tests/checkpoints,
# tests/generation
@pytest.mark.backend_independent
@pytest.mark.parametrize("kind", ["gpt2", "bart", "t5"])
@pytest.mark.slow(reason="builds, saves and imports a transformers model, then generates through the command")
def test_a_hugging_face_generator_writes_text(kind, tmp_path, capsys):
    from kbert.checkpoints.checkpoint_loading import tokenizer_beside
    from kbert.tasks import CausalLM

    _hf_generator(kind, tmp_path)
    [result] = _predict(["--model", str(tmp_path), "--text", "bob is in", "--max-new-tokens", "4"], capsys)
    model = (CausalLM if kind == "gpt2" else Seq2SeqLM)(kbert.from_huggingface(str(tmp_path)))
    model.preprocessor = TextPreprocessor(tokenizer_beside(str(tmp_path)), 64)
    assert result == {"generated": model.generate("bob is in", max_new_tokens=4)}


@pytest.mark.parametrize("arguments,message", [
    (["--text", " "], "--text is empty"),
    (["--text", "bob", "--input", "x.jsonl"], "--text or --input"),
    (["--input", "BAD"], "bad.jsonl, line 2: not JSON"),
    (["--input", "EMPTY"], "empty.jsonl holds no inputs (the file is empty, or blank lines only)"),
    (["--input", "LATE", "--batch-size", "1"], 'late.jsonl, line 4: the "text" is empty'),
    (["--input", "BAD", "--batch-size", "0"], "--batch-size must be at least 1; received 0"),
    (["--text", "bob", "--top-k", "0"], "--top-k must be at least 1"),
])
def test_bad_input_gets_one_line(arguments, message, tmp_path, capsys):
    write_vocabulary(tmp_path)
    TextClassifier(_encoder(), 2, preprocessor=TextPreprocessor(
        WordPieceTokenizer(str(tmp_path / "vocab.txt")), 16)).save(str(tmp_path / "model.keras"))
    files = {"BAD": '{"text": "bob"}\n{"text": bob}\n', "EMPTY": "\n \n",
             "LATE": '{"text": "bob"}\n{"text": "bob is"}\n\n{"text": " "}\n'}
    for name, text in files.items():
        (tmp_path / f"{name.lower()}.jsonl").write_text(text)
    arguments = [str(tmp_path / f"{a.lower()}.jsonl") if a in files else a for a in arguments]
    assert message in _error(["--model", str(tmp_path / "model.keras"), *arguments], capsys)


def test_input_in_chunks_comes_out_in_input_order(tmp_path, capsys, monkeypatch):
    """Texts of mixed lengths, single and paired, in chunks of 2 batches of 2 (sorted by length inside each):
    one line per input, in input order, each its text's own `classify`; a progress bar counts the chunks."""
    from kbert.jobs import predict_run

    monkeypatch.setattr(predict_run, "CHUNK_BATCHES", 2)
    write_vocabulary(tmp_path)
    model = TextClassifier(_encoder(), 2, preprocessor=TextPreprocessor(
        WordPieceTokenizer(str(tmp_path / "vocab.txt")), 16, labels=["no", "yes"]))
    model.save(str(tmp_path / "model.keras"))
    records = [{"text": "bob is in paris. " * n} for n in (3, 1, 2, 1, 3)]
    records.insert(2, {"text": "bob", "text_pair": "where is bob?"})
    (tmp_path / "in.jsonl").write_text("\n".join(json.dumps(record) for record in records) + "\n\n")
    results = _predict(["--model", str(tmp_path / "model.keras"), "--input", str(tmp_path / "in.jsonl"),
                        "--batch-size", "2"], capsys)
    assert len(results) == len(records)
    for result, record in zip(results, records):
        _assert_same(result, json.loads(json.dumps(model.classify(record["text"], record.get("text_pair")))))

    class Progress:
        seen = []

        def update(self, done):
            self.seen.append(done)

    lines = []
    predict_run.run_predict(str(tmp_path / "model.keras"), str(tmp_path / "in.jsonl"), write=lines.append,
                            batch_size=2, progress=Progress())
    assert Progress.seen == [4, 6] and len(lines) == 6


def test_a_question_answering_model_needs_a_question_and_a_context(tmp_path, capsys):
    write_vocabulary(tmp_path)
    model, _, _ = _models(WordPieceTokenizer(str(tmp_path / "vocab.txt")))["qa"]
    model.save(str(tmp_path / "qa.keras"))
    assert "give a question" in _error(["--model", str(tmp_path / "qa.keras"), "--text", "bob is here."], capsys)
    message = _error(["--model", str(tmp_path / "qa.keras"), "--question", "where is bob?"], capsys)
    assert "--question needs a context" in message
    (tmp_path / "in.jsonl").write_text(json.dumps({"text": " ", "question": "where is bob?"}) + "\n")
    assert 'in.jsonl, line 1: the "text" is empty' in _error(["--model", str(tmp_path / "qa.keras"), "--input",
                                                              str(tmp_path / "in.jsonl")], capsys)


def test_a_model_with_no_preprocessor_and_no_vocabulary_beside_it(tmp_path, capsys):
    TextClassifier(_encoder(), 2).save(str(tmp_path / "model.keras"))
    message = _error(["--model", str(tmp_path / "model.keras"), "--text", "bob is in paris."], capsys)
    assert "has no preprocessor inside" in message and "no vocab.txt" in message


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    """A classifier and a question-answering model saved with their preprocessors: their paths."""
    folder = tmp_path_factory.mktemp("models")
    write_vocabulary(folder)
    models = _models(WordPieceTokenizer(str(folder / "vocab.txt")))
    for name in ("pairs", "qa"):
        models[name][0].save(str(folder / f"{name}.keras"))
    return {name: str(folder / f"{name}.keras") for name in ("pairs", "qa")}


@pytest.mark.backend_independent
@pytest.mark.parametrize("line,message", [
    ('{"text": " "}', 'line 2: the "text" is empty'),
    ('{"text": "bob", "question": "who?"}', 'line 2: "question" is for question answering; the model is a '
                                            'TextClassifier'),
    ('{"text": "\\ud800 bob"}', "line 2: 'text' holds a lone surrogate"),
    (b'{"text": "caf\xe9"}', "line 2: bytes that are not UTF-8"),
])
def test_input_errors_name_the_file_and_the_line(line, message, saved_models, tmp_path, capsys):
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"text": "bob is here."}\n' + (line if isinstance(line, bytes) else line.encode()) + b"\n")
    assert f"{path}, {message}" in _error(["--model", saved_models["pairs"], "--input", str(path)], capsys)


@pytest.mark.backend_independent
def test_options_that_do_not_apply_and_bad_paths_are_refused(saved_models, tmp_path, capsys):
    path = tmp_path / "qa.jsonl"
    path.write_text('{"text": "bob is here.", "question": "who?"}\n{"text": "bob is here."}\n')
    assert f"{path}, line 2: This model is a question-answering model" in _error(
        ["--model", saved_models["qa"], "--input", str(path)], capsys)
    assert "--question is for question answering; the model is a TextClassifier" in _error(
        ["--model", saved_models["pairs"], "--text", "bob", "--question", "who?"], capsys)
    assert "--text-pair is for a sentence-pair classifier; the model is a SpanQuestionAnswering" in _error(
        ["--model", saved_models["qa"], "--text", "bob", "--question", "who?", "--text-pair", "x"], capsys)
    assert f"{tmp_path!s}' is a folder" in _error(["--model", saved_models["pairs"], "--input", str(tmp_path)],
                                                  capsys)
    corrupt = tmp_path / "corrupt.keras"
    corrupt.write_bytes(b"not a zip")
    assert f"{corrupt} is not a .keras file" in _error(["--model", str(corrupt), "--text", "bob"], capsys)


@pytest.mark.backend_independent
@pytest.mark.parametrize("task", ["tag", "qa", "fill_mask", "gpt2"])
def test_a_text_pair_is_refused_by_a_tagger_qa_fill_mask_and_gpt2(task, tmp_path, capsys):
    if task == "gpt2":
        backbone = kbert.models.GPT2(vocabulary_size=len(VOCABULARY), num_layers=1, num_heads=2, hidden_dim=16,
                                     intermediate_dim=32, max_positions=32, end_id=0)
        model = CausalLM(backbone)
    else:
        write_vocabulary(tmp_path)
        model, _, _ = _models(WordPieceTokenizer(str(tmp_path / "vocab.txt")))[task]
    with pytest.raises(ValueError, match=rf"^--text-pair is for a sentence-pair classifier; the model is a "
                                         rf"{type(model).__name__}\.$"):
        refuse_inapplicable(model, {"text": "bob", "text_pair": "alice"})
    if task != "qa":
        with pytest.raises(ValueError, match=rf"^--question is for question answering; the model is a "
                                             rf"{type(model).__name__}\.$"):
            refuse_inapplicable(model, {"text": "bob", "question": "who?"})


@pytest.mark.rotated(reason="the command around the demo's masked-LM logits; each pretrainer's: tests/pretraining")
@pytest.mark.parametrize("name", ["StructBertPretrainer", "SpanBertPretrainer", "ElectraPretrainer",
                                  "XLNetPretrainer"])
def test_a_pretraining_runs_model_gives_the_top_tokens_for_each_mask(name, tmp_path, capsys):
    from trainable_models import MODELS

    from kbert.jobs.language_model_objectives import masked_inputs, masked_lm_logits, permutation_lm_logits

    model, _ = MODELS[name]()
    write_vocabulary(tmp_path)
    tokenizer = WordPieceTokenizer(str(tmp_path / "vocab.txt"))
    model.preprocessor = TextPreprocessor(tokenizer, 16)
    model.save(str(tmp_path / "model.keras"))
    (result,) = _predict(["--model", str(tmp_path), "--text", "bob is in [MASK] .", "--top-k", "2"], capsys)
    ids = tokenizer(["bob is in"])[0]
    x = masked_inputs(tokenizer, ids, tokenizer(["."])[0], 16)  # what the run's demo asks
    logits = (permutation_lm_logits if name == "XLNetPretrainer" else masked_lm_logits)(model, x)
    scores = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    best = np.argsort(-scores[: tokenizer.vocabulary_size], kind="stable")[:2]
    assert [p["token"] for p in result["predictions"][0]] == [tokenizer.id_to_token(int(i)) for i in best]
    np.testing.assert_allclose([p["score"] for p in result["predictions"][0]], scores[best], atol=1e-6)
