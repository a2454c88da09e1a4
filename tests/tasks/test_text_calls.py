"""Text in, text out: the task models' text-level calls against transformers' pipelines on the same
weights and text (classification, tagging with aggregation_strategy="first", fill-mask, greedy GPT-2
generation), and against the token-level path elsewhere (question answering, multiple choice, T5).

Tolerances: probabilities and scores to 1e-5 (float32 models, softmax in float64 here and float32 in
transformers); spans, labels and texts exactly.
"""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest

import kbert
from kbert.pretraining import BertPretrainer
from kbert.tasks import CausalLM, MultipleChoice, Seq2SeqLM, SpanQuestionAnswering, TextClassifier
from kbert.tasks.question_answering_dataset import question_answering_windows
from kbert.tasks.span_decoding import decode_answers

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tensorflow_text")

from kbert.text import BytePairTokenizer, TextPreprocessor, WordPieceTokenizer  # noqa: E402

VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "dog", "sat", "on", "mat", "in",
              "paris", "london", "ada", "love", "##lace", "lived", "where", "is", "was", ".", ",", "?",
              "run", "##s", "##ning", "a", "big", "small", "house", "and", "went", "home", "to"]
TEXTS = ["Ada Lovelace lived in London.", "The cat sat on the mat, in Paris.", "A big dog runs home."]
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def _bert_config(**options):
    return transformers.BertConfig(vocab_size=len(VOCABULARY), hidden_size=16, num_hidden_layers=2,
                                   num_attention_heads=2, intermediate_size=32, max_position_embeddings=64,
                                   hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **options)


def _saved(model, tmp_path, name):
    torch.manual_seed(0)
    model.eval()
    path = str(tmp_path / name)
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def hf_tokenizer(vocab_path):
    return transformers.BertTokenizerFast(vocab=vocab_path, do_lower_case=True)


def _pipeline(task, model, hf_tokenizer):
    return transformers.pipeline(task, model=model, tokenizer=hf_tokenizer, device="cpu")


def test_classify_equals_the_text_classification_pipeline(tmp_path, tokenizer, hf_tokenizer):
    torch.manual_seed(0)
    labels = {0: "negative", 1: "neutral", 2: "positive"}
    hf_model = transformers.BertForSequenceClassification(_bert_config(id2label=labels)).eval()
    model = kbert.from_huggingface_task(_saved(hf_model, tmp_path, "classifier"))
    model.preprocessor = TextPreprocessor(tokenizer, 32, labels=list(labels.values()))
    pipe = _pipeline("text-classification", hf_model, hf_tokenizer)
    for text, row in zip(TEXTS, model.preprocessor.encode(TEXTS)["token_ids"]):  # the same ids go in
        ids = hf_tokenizer(text)["input_ids"]
        assert row[: len(ids)].tolist() == ids and 1 not in ids
    expected = pipe(TEXTS, top_k=None)
    results = model.classify(TEXTS)
    for result, reference in zip(results, expected):
        best = max(reference, key=lambda r: r["score"])
        assert result["label"] == best["label"]
        for row in reference:
            np.testing.assert_allclose(result["scores"][row["label"]], row["score"], atol=1e-5)
    pair = pipe({"text": TEXTS[0], "text_pair": TEXTS[1]}, top_k=None)
    scores = model.classify(TEXTS[0], text_pairs=TEXTS[1])["scores"]
    for row in pair:
        np.testing.assert_allclose(scores[row["label"]], row["score"], atol=1e-5)


def test_regression_gives_values():
    backbone = kbert.models.bert_tiny(num_layers=1, vocabulary_size=len(VOCABULARY), max_positions=32)
    model = TextClassifier(backbone, 1, preprocessor=TextPreprocessor(WordPieceTokenizer(VOCABULARY), 16))
    value = model.classify("the cat sat")["value"]
    inputs = model.preprocessor.encode(["the cat sat"])
    np.testing.assert_allclose(value, keras.ops.convert_to_numpy(model(inputs))[0, 0], atol=1e-6)


def test_tag_equals_the_token_classification_pipeline_first(tmp_path, tokenizer, hf_tokenizer):
    torch.manual_seed(1)
    hf_model = transformers.BertForTokenClassification(_bert_config(id2label=dict(enumerate(TAGS)))).eval()
    model = kbert.from_huggingface_task(_saved(hf_model, tmp_path, "tagger"))
    model.preprocessor = TextPreprocessor(tokenizer, 32, labels=TAGS)
    pipe = _pipeline("token-classification", hf_model, hf_tokenizer)
    found = 0
    for text, result in zip(TEXTS, model.tag(TEXTS)):
        expected = pipe(text, aggregation_strategy="first")
        assert [(e["label"], e["start"], e["end"]) for e in result["entities"]] == [
            (e["entity_group"], e["start"], e["end"]) for e in expected]
        for entity, reference in zip(result["entities"], expected):
            np.testing.assert_allclose(entity["score"], reference["score"], atol=1e-5)
            assert entity["text"] == text[entity["start"]:entity["end"]]
        found += len(expected)
    assert found > 0


def _hf_mlm_pretrainer(tmp_path, tokenizer):
    """A `BertForMaskedLM` and a `BertPretrainer` with its weights (backbone imported, head copied)."""
    torch.manual_seed(2)
    hf_model = transformers.BertForMaskedLM(_bert_config()).eval()
    backbone = kbert.from_huggingface(_saved(hf_model, tmp_path, "mlm"), use_pooler=False)
    model = BertPretrainer(backbone, pair_objective=None, preprocessor=TextPreprocessor(tokenizer, 32))
    head = hf_model.cls.predictions
    model.mlm_head.transform.set_weights([head.transform.dense.weight.detach().numpy().T,
                                          head.transform.dense.bias.detach().numpy()])
    model.mlm_head.layer_norm.set_weights([head.transform.LayerNorm.weight.detach().numpy(),
                                           head.transform.LayerNorm.bias.detach().numpy()])
    model.mlm_head.bias.assign(head.bias.detach().numpy())
    return hf_model, model


def test_fill_mask_equals_the_fill_mask_pipeline(tmp_path, tokenizer, hf_tokenizer):
    hf_model, model = _hf_mlm_pretrainer(tmp_path, tokenizer)
    pipe = _pipeline("fill-mask", hf_model, hf_tokenizer)
    texts = ["the cat [MASK] on the mat.", "[MASK] lived in [MASK]."]
    results = model.fill_mask(texts, top_k=3)
    for text, result in zip(texts, results):
        expected = pipe(text, top_k=3)
        expected = expected if isinstance(expected[0], list) else [expected]
        assert len(result["predictions"]) == len(expected)
        for slot, reference in zip(result["predictions"], expected):
            assert [p["token_id"] for p in slot] == [r["token"] for r in reference]
            assert [p["token"] for p in slot] == [r["token_str"] for r in reference]
            np.testing.assert_allclose([p["score"] for p in slot], [r["score"] for r in reference], atol=1e-5)


@pytest.fixture(scope="module")
def byte_pair_files(tmp_path_factory):
    from kbert.text import learn_byte_pair_vocabulary

    corpus = [" ".join(TEXTS)] * 20 + ["the small house went home to the big dog"] * 20
    return learn_byte_pair_vocabulary(corpus, 300, str(tmp_path_factory.mktemp("bpe")))


@pytest.mark.slow(reason="builds and saves a transformers model, then generates on both sides")
def test_generate_equals_the_greedy_text_generation_pipeline(tmp_path, byte_pair_files):
    vocabulary, merges = byte_pair_files
    hf_tokenizer = transformers.GPT2TokenizerFast(
        vocab=vocabulary, merges=merges, unk_token="<unk>", bos_token="</s>", eos_token="</s>"
    )
    torch.manual_seed(3)
    config = transformers.GPT2Config(vocab_size=len(hf_tokenizer), n_embd=16, n_layer=2, n_head=2, n_positions=64,
                                     bos_token_id=2, eos_token_id=2)
    hf_model = transformers.GPT2LMHeadModel(config).eval()
    backbone = kbert.from_huggingface(_saved(hf_model, tmp_path, "gpt2"))
    model = CausalLM(backbone, preprocessor=TextPreprocessor(BytePairTokenizer(vocabulary, merges), 32))
    pipe = _pipeline("text-generation", hf_model, hf_tokenizer)
    prompts = ["The cat sat", "The small house went home to the big dog", "A big dog runs"]
    texts = model.generate(prompts, max_new_tokens=6, batch_size=2)  # by length: prompts 0 and 2, then 1
    for prompt, text in zip(prompts, texts):
        expected = pipe(prompt, max_new_tokens=6, do_sample=False, return_full_text=False)[0]["generated_text"]
        assert text == expected
    assert model.generate(prompts[0], max_new_tokens=6) == texts[0]


def _encoder(num_segments=2, use_pooler=True):
    return kbert.models.Encoder(vocabulary_size=len(VOCABULARY), num_layers=1, num_heads=2, hidden_dim=16,
                                intermediate_dim=32, max_positions=64, num_segments=num_segments,
                                use_pooler=use_pooler)


def test_answer_equals_windows_and_span_decoding(tokenizer):
    model = SpanQuestionAnswering(_encoder(use_pooler=False), preprocessor=TextPreprocessor(tokenizer, 16))
    questions = ["where is the cat?", "where was ada?"]
    contexts = ["The cat sat on the mat in Paris, and the dog went home to London.", "Ada lived in London."]
    results = model.answer(questions, contexts)
    examples = [{"id": str(i), "question": q, "context": c, "answers": []}
                for i, (q, c) in enumerate(zip(questions, contexts))]
    windows = question_answering_windows(examples, tokenizer, 16, max_query_length=8, doc_stride=5)
    assert len(windows["token_ids"]) > len(questions)  # the first context takes several windows
    names = ("token_ids", "segment_ids", "padding_mask", "question_mask")
    logits = model({name: windows[name].astype("int32") for name in names})
    answers, _ = decode_answers(keras.ops.convert_to_numpy(logits["start_logits"]),
                                keras.ops.convert_to_numpy(logits["end_logits"]), windows["offsets"],
                                windows["question_ids"], {e["id"]: e["context"] for e in examples},
                                max_context_mask=windows["max_context_mask"])
    for index, result in enumerate(results):
        assert result["answer"] == answers[str(index)] != ""
        assert contexts[index][result["start"]:result["end"]] == result["answer"]
    model.preprocessor.no_answer_threshold = -1e9  # every question unanswerable
    unanswered = model.answer(questions[0], contexts[0])
    assert unanswered["answer"] == "" and unanswered["start"] is None


def test_choose_equals_the_token_level_path(tokenizer):
    model = MultipleChoice(_encoder(), 3, preprocessor=TextPreprocessor(tokenizer, 16))
    endings = ["sat on the mat.", "went home.", "lived in paris."]
    result = model.choose("the cat", endings)
    inputs = model.preprocessor.encode(["the cat"] * 3, endings)
    logits = keras.ops.convert_to_numpy(model({k: v[None] for k, v in inputs.items()}))[0]
    expected = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    np.testing.assert_allclose(result["scores"], expected, atol=1e-6)
    assert result["choice"] == int(expected.argmax()) and result["ending"] == endings[result["choice"]]


def test_seq2seq_generate_text_equals_the_token_level_path(tmp_path):
    from kbert.text import SentencePieceTokenizer, train_sentence_piece

    tokenizer = SentencePieceTokenizer(train_sentence_piece([" ".join(TEXTS)] * 30, 40))
    backbone = kbert.models.T5(vocabulary_size=tokenizer.vocabulary_size, num_layers=1, num_heads=2,
                               hidden_dim=16, intermediate_dim=32)
    model = Seq2SeqLM(backbone, preprocessor=TextPreprocessor(tokenizer, 16))
    text = model.generate("the cat sat", max_new_tokens=5)
    ids = [*tokenizer.tokenize("the cat sat").numpy().tolist(), tokenizer.end_id]
    generated = model.generate({"encoder_token_ids": np.array([ids]),
                                "encoder_padding_mask": np.ones((1, len(ids)), "int32")}, max_new_tokens=5)[0]
    generated = [int(i) for i in generated]
    generated = generated[: generated.index(tokenizer.end_id)] if tokenizer.end_id in generated else generated
    assert text == (tokenizer.detokenize(np.array(generated, np.int32)).numpy().decode() if generated else "")
    sources = ["the cat sat", "ada lovelace lived in london, the cat sat on the mat", "a big dog"]
    texts = model.generate(sources, max_new_tokens=5, batch_size=2)  # by length, each batch to its bucket
    assert texts == [model.generate(source, max_new_tokens=5) for source in sources]


@pytest.mark.slow(reason="exports a SavedModel and reads it in a fresh process")
def test_saved_model_reads_text_in_a_fresh_process(tmp_path, tokenizer):
    model = TextClassifier(_encoder(), 2, preprocessor=TextPreprocessor(tokenizer, 16, labels=["no", "yes"]))
    expected = model.classify(TEXTS[1])
    path = tmp_path / "alone" / "model.keras"
    path.parent.mkdir()
    model.save(str(path))
    assert os.listdir(path.parent) == ["model.keras"]
    code = ("import json, sys, keras, kbert; model = keras.saving.load_model(sys.argv[1]); "
            "print(json.dumps(model.classify(sys.argv[2])))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    output = subprocess.run([sys.executable, "-c", code, str(path), TEXTS[1]], capture_output=True, text=True,
                            env=env, check=True).stdout
    import json

    result = json.loads(output.strip().splitlines()[-1])
    assert result["label"] == expected["label"]
    np.testing.assert_allclose(result["score"], expected["score"], atol=1e-6)


def test_bad_text_gets_one_line_errors(tokenizer):
    classifier = TextClassifier(_encoder(), 2, preprocessor=TextPreprocessor(tokenizer, 16))
    with pytest.raises(ValueError, match="text 0 is empty"):
        classifier.classify("")
    with pytest.raises(ValueError, match="no preprocessor"):
        TextClassifier(_encoder(), 2).classify("the cat")
    reader = SpanQuestionAnswering(_encoder(use_pooler=False), preprocessor=TextPreprocessor(tokenizer, 16))
    with pytest.raises(ValueError, match="needs a context"):
        reader.answer("where is the cat?", None)
    with pytest.raises(ValueError, match="context 0 is empty"):
        reader.answer("where is the cat?", " ")
    pretrainer = BertPretrainer(_encoder(use_pooler=False), pair_objective=None,
                                preprocessor=TextPreprocessor(tokenizer, 16))
    with pytest.raises(ValueError, match="no mask token"):
        pretrainer.fill_mask("the cat sat")
