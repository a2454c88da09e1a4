"""The CLI's `kbert predict`: a saved model and text in, one JSON object per input out.

`load_predictor` takes what `--model` names:

- a kbert `.keras` file (a task model or pretrainer, its preprocessor inside;
  an older file takes the `vocab.txt`, `spiece.model` or `vocab.json` +
  `merges.txt` beside it);
- a run folder of `kbert finetune` or `kbert pretrain` (its `model.keras`);
- a Hugging Face folder with a task head (`…ForSequenceClassification`,
  `…ForTokenClassification`, `…ForQuestionAnswering`, `…ForMultipleChoice`
  (as many choices as the inputs give; checkpoints do not store it),
  `BertForMaskedLM`, through `kbert.from_huggingface_task`; `GPT2LMHeadModel`,
  `T5ForConditionalGeneration` and `BartForConditionalGeneration` for
  generation), with its tokenizer files and its `id2label` names.

`predict_one` runs the model's text-level call on one input and gives the
JSON fields of its task (see `kbert.cli`).
"""

import json
import os
import zipfile

import keras
import numpy as np
from scipy.special import softmax

from kbert.checkpoints.checkpoint_loading import tokenizer_beside
from kbert.pretraining import (BertPretrainer, ElectraPretrainer, SpanBertPretrainer, StructBertPretrainer,
                               XLNetPretrainer)
from kbert.tasks.readers import json_rows
from kbert.tasks import CausalLM, MultipleChoice, Seq2SeqLM, SpanQuestionAnswering, TextClassifier, TokenClassifier

DEFAULT_SEQUENCE_LENGTH = 128
# The pretrainers whose masks `fill_blanks` fills (`BertPretrainer` has `fill_mask`).
BLANK_FILLERS = (StructBertPretrainer, SpanBertPretrainer, ElectraPretrainer, XLNetPretrainer)
_GENERATORS = {"GPT2LMHeadModel": CausalLM, "T5ForConditionalGeneration": Seq2SeqLM,
               "BartForConditionalGeneration": Seq2SeqLM}


def _preprocessor(folder, sequence_length, labels=None):
    """A `TextPreprocessor` over the tokenizer files in `folder`; a `FileNotFoundError` when there are none."""
    from kbert.text.text_preprocessor import TextPreprocessor

    tokenizer = tokenizer_beside(folder)
    if tokenizer is None:
        raise FileNotFoundError(f"The model has no preprocessor inside and {folder} has no vocab.txt, spiece.model "
                                "or vocab.json with merges.txt beside it.")
    return TextPreprocessor(tokenizer, sequence_length, labels=labels)


def _run_sequence_length(folder):
    """The `sequence_length` of the run that left `folder`, from its metrics.json, or the default."""
    path = os.path.join(folder, "metrics.json")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            metrics = json.load(f)
        if isinstance(metrics, dict) and isinstance(metrics.get("sequence_length"), int):
            return metrics["sequence_length"]
    return DEFAULT_SEQUENCE_LENGTH


def _usable_length(model, length):
    """`length`, cut to the positions of the model's backbone (T5's relative positions take any)."""
    backbone = getattr(model, "backbone", None)
    if not hasattr(backbone, "max_positions"):
        return length
    return min(length, backbone.max_positions - getattr(backbone, "position_offset", 0))


def _read_keras(path):
    """`keras.saving.load_model(path)`; a file that is no `.keras` archive is a one-line `ValueError` saying so."""
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path} is not a .keras file (a zip archive): it may be cut short or corrupt.")
    return keras.saving.load_model(path)


def _load_keras(path):
    model = _read_keras(path)
    if getattr(model, "preprocessor", "absent") is None:  # a task saved before preprocessors
        folder = os.path.dirname(path) or "."
        model.preprocessor = _preprocessor(folder, _usable_length(model, _run_sequence_length(folder)))
    return model


def _load_huggingface(folder, num_choices=None):
    from kbert.checkpoints import from_huggingface, from_huggingface_task
    from kbert.checkpoints.weight_mapping import read_config

    config = read_config(folder)
    architecture = (config.get("architectures") or [""])[0]
    if architecture.endswith("ForMultipleChoice") and num_choices is None:
        raise ValueError(f"{architecture} checkpoints do not store their number of choices: give it in "
                         "--input lines with \"choices\" lists, all of one length.")
    if architecture in _GENERATORS:
        model = _GENERATORS[architecture](from_huggingface(folder))
    else:
        model = from_huggingface_task(folder, num_choices=num_choices)
    labels = config.get("id2label")
    labels = [labels[str(i)] for i in range(len(labels))] if labels and not isinstance(model, CausalLM) else None
    model.preprocessor = _preprocessor(folder, _usable_length(model, DEFAULT_SEQUENCE_LENGTH), labels)
    return model


def load_predictor(path, num_choices=None):
    """The model `path` names (see the module docstring), with its preprocessor.

    `num_choices` is for a Hugging Face multiple-choice folder, which does not store it.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, "model.keras")):
            return _load_keras(os.path.join(path, "model.keras"))
        if os.path.isfile(os.path.join(path, "config.json")):
            return _load_huggingface(path, num_choices)
        raise FileNotFoundError(f"{path} holds neither a model.keras (a kbert run) nor a config.json "
                                "(a Hugging Face checkpoint).")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"--model not found: {path}")
    if not path.endswith(".keras"):
        raise ValueError(f"--model takes a .keras file or a folder; received {path}.")
    return _load_keras(path)


def read_inputs(path):
    """The JSON objects of a JSONL file, one a line (blank lines skipped), and where each is (`"path, line n"`).

    Each object has `text`, and as the task needs, `text_pair`, `question` or `choices`. A bad line
    (not JSON, no or an empty `text`, bytes that are not UTF-8, a lone surrogate) is a `ValueError`
    that names the file and the line.
    """
    records, places = [], []
    for number, record in json_rows(path):
        if not isinstance(record.get("text"), str):
            raise ValueError(f"{path}, line {number}: expected a JSON object with a \"text\" string.")
        if not record["text"].strip():
            raise ValueError(f"{path}, line {number}: the \"text\" is empty.")
        records.append(record)
        places.append(f"{path}, line {number}")
    if not records:
        raise ValueError(f"{path} holds no inputs.")
    return records, places


def _needs(record, key, what):
    if record.get(key) is None:
        raise ValueError(f"This model is {what}: give a {key.replace('_', '-')} with each text.")
    return record[key]


def fill_blanks(model, text, top_k=5):
    """The `top_k` tokens, with their probabilities, for each mask token of `text`, from a pretraining run's
    StructBERT, SpanBERT, ELECTRA (its generator) or XLNet (its query stream): one call per mask, as the
    run's fill-in-the-blank demo asks (`kbert.jobs.language_model_objectives`)."""
    from kbert.jobs.language_model_objectives import masked_inputs, masked_lm_logits, permutation_lm_logits

    preprocessor = model.text_preprocessor("predict")
    tokenizer = preprocessor.tokenizer
    ids = preprocessor.token_ids([text])[0]
    positions = [index for index, token in enumerate(ids) if token == tokenizer.mask_id]
    if not positions:
        raise ValueError(f"the text has no {preprocessor.token_string(tokenizer.mask_id)} to fill.")
    logits_at = permutation_lm_logits if isinstance(model, XLNetPretrainer) else masked_lm_logits
    slots = []
    for position in positions:
        x = masked_inputs(tokenizer, ids[:position], ids[position + 1:], preprocessor.sequence_length)
        if x is None:
            raise ValueError(f"a mask lies past the first {preprocessor.sequence_length} tokens.")
        scores = softmax(np.asarray(logits_at(model, x), np.float64))
        best = np.argsort(-scores[: tokenizer.vocabulary_size], kind="stable")[: int(top_k)]  # tokens it can write
        slots.append([{"token": preprocessor.token_string(int(i)), "score": float(scores[i])} for i in best])
    return {"predictions": slots}


def predict_one(model, record, top_k=5, max_new_tokens=32):
    """The JSON result of `model`'s text-level call on one input `{"text", ...}`."""
    text = record["text"]
    if isinstance(model, TextClassifier):
        return model.classify(text, text_pairs=record.get("text_pair"))
    if isinstance(model, TokenClassifier):
        return model.tag(text)
    if isinstance(model, SpanQuestionAnswering):
        return model.answer(_needs(record, "question", "a question-answering model (the text is the context)"),
                            text)
    if isinstance(model, MultipleChoice):
        result = model.choose(text, _needs(record, "choices", "a multiple-choice model"))
        return {"choice": result["choice"], "scores": result["scores"]}
    if isinstance(model, BertPretrainer):
        result = model.fill_mask(text, top_k=top_k)
        return {"predictions": [[{"token": p["token"], "score": p["score"]} for p in slot]
                                for slot in result["predictions"]]}
    if isinstance(model, BLANK_FILLERS):
        return fill_blanks(model, text, top_k)
    if isinstance(model, (CausalLM, Seq2SeqLM)):
        return {"generated": model.generate(text, max_new_tokens=max_new_tokens)}
    raise ValueError(f"kbert predict runs classifiers, taggers, question answering, multiple choice, masked LMs "
                     f"and generators; the model is a {type(model).__name__}.")


# The input fields beside `text` and the models they apply to.
_APPLIES = {"text_pair": ((TextClassifier,), "a sentence-pair classifier"),
            "question": ((SpanQuestionAnswering,), "question answering"),
            "choices": ((MultipleChoice,), "multiple choice")}


def refuse_inapplicable(model, record, place=None):
    """A one-line `ValueError` when `record` gives a field `model` does not read (`--question` to a classifier).

    `place` is where the record is (`"path, line n"`), None for the command line's options.
    """
    for key, (classes, what) in _APPLIES.items():
        if record.get(key) is not None and not isinstance(model, classes):
            name = f"{place}: \"{key}\"" if place else f"--{key.replace('_', '-')}"
            raise ValueError(f"{name} is for {what}; the model is a {type(model).__name__}.")


def run_predict(model, inputs, top_k=5, max_new_tokens=32, write=print, places=None):
    """Load `model` (a path) and write one JSON line per input (dicts with `text`, ...) with `write`.

    `places` names where each input is (`read_inputs`), for the errors; None for the command line's.
    """
    if int(top_k) < 1:
        raise ValueError(f"--top-k must be at least 1; received {top_k}.")
    counts = {len(record["choices"]) for record in inputs if isinstance(record.get("choices"), list)}
    predictor = load_predictor(model, counts.pop() if len(counts) == 1 else None)
    places = places or [None] * len(inputs)
    for record, place in zip(inputs, places):
        refuse_inapplicable(predictor, record, place)
    for record, place in zip(inputs, places):
        try:
            result = predict_one(predictor, record, top_k, max_new_tokens)
        except ValueError as error:
            raise ValueError(f"{place}: {error}" if place else str(error)) from None
        write(json.dumps(result, ensure_ascii=False))
