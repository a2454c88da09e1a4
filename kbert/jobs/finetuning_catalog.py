"""The six tasks of `kbert finetune`: how each reads its files, batches, builds, predicts and scores.

`TASKS[name]` is a `kbert.jobs.finetuning_recipe.FinetuningRecipe` for
`classify` (GLUE-style classification), `regress` (STS-B-style regression),
`tag` (CoNLL NER) on an encoder or an XLNet, `qa` (SQuAD 1.1 / 2.0) and `choice` (SWAG) on an encoder,
and `text` (T5's text to text, scored on generated text) on a T5.
`read(name, path, train)` reads a file into a `TaskExamples`
(`kbert.jobs.task_examples`). A validation file is read
against the training file: a label not seen in training, text pairs where
training had single texts (or the reverse) and another number of SWAG
endings are errors naming the file and its row.
"""

import json

import numpy as np

from kbert.backend.imports import traced_as_written
from kbert.models.encoder import Encoder
from kbert.models.t5 import T5
from kbert.models.xlnet import XLNet
from kbert.tasks import metrics, readers
from kbert.tasks.question_answering_dataset import question_answering_window_sizes
from kbert.jobs.finetuning_recipe import FinetuningRecipe
from kbert.tasks.multiple_choice import MultipleChoice
from kbert.tasks.seq2seq_lm import Seq2SeqLM
from kbert.tasks.span_question_answering import SpanQuestionAnswering
from kbert.jobs.task_examples import TaskExamples
from kbert.tasks.text_classifier import TextClassifier
from kbert.tasks.token_classifier import TokenClassifier
from kbert.training.length_bucketed_prediction import predict_by_length


def read(task, path, train=None):
    """`path` read as `task`'s data; `train` (a `TaskExamples`) gives the label vocabulary."""
    return TASKS[task].read(path, train)


def for_backbone(backbone, dataset):
    """`dataset`'s `(x, y)` batches as `backbone` reads them.

    The pipelines number the second text's tokens segment 1 (`[CLS] A [SEP] B [SEP]`, BERT's
    token types); a one-segment encoder (RoBERTa, Longformer) reads every token as segment 0, as
    their tokenizers give no token types. An XLNet (`summary_token_index` -1) reads
    `A <sep> B <sep> <cls>`, padded on the left (`kbert.text.last_token_layout`), the per-token
    labels moved with their tokens.
    """
    if getattr(backbone, "summary_token_index", 0) == -1:
        from kbert.text.last_token_layout import last_token_layout

        return dataset.map(traced_as_written(lambda x, *y: (last_token_layout(x), *_moved_labels(x, y))))
    if getattr(backbone, "num_segments", 2) != 1:
        return dataset
    return dataset.map(traced_as_written(lambda x, *y: ({**x, "segment_ids": 0 * x["segment_ids"]}, *y)))


def _moved_labels(x, y):
    """The targets of `y` (none, or one dict) in `last_token_layout`, moved as the inputs `x` are."""
    from kbert.text.last_token_layout import last_token_layout

    if not y:
        return ()
    moved = last_token_layout({"padding_mask": x["padding_mask"], **y[0]})
    return ({name: moved[name] for name in y[0]},)


def _inputs(x, y):
    return x


def _predict(model, dataset, count, buckets=False, sequence_outputs=()):
    """The model's outputs on the first `count` rows of `dataset` (which pads its last batch).

    `buckets`: the rows are predicted sorted by length, each batch cut to its length bucket
    (`kbert.training.predict_by_length`; `sequence_outputs` names the outputs with a token axis).
    """
    inputs = for_backbone(model.backbone, dataset).map(_inputs)
    if buckets:
        batches = list(inputs.as_numpy_iterator())
        arrays = {name: np.concatenate([batch[name] for batch in batches])[:count] for name in batches[0]}
        outputs = predict_by_length(model, arrays, int(len(batches[0]["padding_mask"])), sequence_outputs)
    else:
        outputs = model.predict(inputs, verbose=0)
    outputs = outputs if isinstance(outputs, dict) else {"logits": outputs}
    return {name: np.asarray(value)[:count] for name, value in outputs.items()}


def _datasets():
    from kbert.tasks import question_answering_dataset, input_pipelines

    return input_pipelines, question_answering_dataset


# --- classify and regress -------------------------------------------------------


def _check_pairs(path, examples, train):
    """A `ValueError` when this file has a `text_pair` column and the training file not, or the reverse."""
    if train is not None and ("text_pair" in examples[0]) != ("text_pair" in train.examples[0]):
        this, training = ("a", "none") if "text_pair" in examples[0] else ("no", "one")
        raise ValueError(f"{path}, line 1: the file has {this} 'text_pair' column and the training file "
                         f"has {training}; both need single texts or both pairs.")
    return examples


def _read_classification(path, train):
    examples, labels = readers.read_classification(path, labels=train.labels if train else None)
    if len(labels) < 2:
        raise ValueError(f"{path}: every row has the label {labels[0]!r}; classification needs two or more.")
    return TaskExamples(_check_pairs(path, examples, train), labels)


def _read_regression(path, train):
    return TaskExamples(_check_pairs(path, readers.read_regression(path), train))


def _builder_dataset(builder, data, **options):
    """`input_pipelines.<builder>` on the examples, with the label vocabulary where there is one."""
    input_pipelines, _ = _datasets()
    if data.labels is not None:
        options["labels"] = data.labels
    return getattr(input_pipelines, builder)(data.examples, **options)


def _text_dataset(data, **options):
    return _builder_dataset("text_classification_dataset", data, **options)


def _logits(model, dataset, data, buckets, **options):
    """The model's logits on every example of `data`, batched by `dataset` (its last batch padded)."""
    return _predict(model, dataset(data, pad_final_batch=True, **options), len(data.examples), buckets)["logits"]


def _classification_scores(model, data, buckets=False, **options):
    predicted = _logits(model, _text_dataset, data, buckets, **options).argmax(-1)
    gold = np.array([data.labels.index(example["label"]) for example in data.examples])
    names = ("accuracy", "f1", "matthews_correlation") if len(data.labels) == 2 else (
        "accuracy", "macro_f1", "matthews_correlation")
    rows = [{"label": example["label"], "prediction": data.labels[p]}
            for example, p in zip(data.examples, predicted)]
    return metrics.glue_scores(gold, predicted, names), rows


def _regression_scores(model, data, buckets=False, **options):
    predicted = _logits(model, _text_dataset, data, buckets, **options).reshape(-1).astype(float)
    gold = np.array([example["label"] for example in data.examples])
    scores = metrics.glue_scores(gold, predicted, ("pearson", "spearman"))
    scores["mean_squared_error"] = float(np.mean((gold - predicted) ** 2))
    rows = [{"label": float(g), "prediction": float(p)} for g, p in zip(gold, predicted)]
    return scores, rows


# --- tag ---------------------------------------------------------------------------


def _read_conll(path, train):
    sentences, labels = readers.read_conll(path, labels=train.labels if train else None)
    return TaskExamples(sentences, labels)


def _tag_dataset(data, **options):
    return _builder_dataset("token_classification_dataset", data, **options)


def _tag_scores(model, data, buckets=False, **options):
    """Entity F1 over each word's first sub-token; words cut by truncation are tagged `O`."""
    dataset = _tag_dataset(data, pad_final_batch=True, **options)
    logits = _predict(model, dataset, len(data.examples), buckets, True)["logits"]
    labels = [np.asarray(y["labels"]) for _, y in for_backbone(model.backbone, dataset)]  # as the logits
    first_pieces = np.concatenate(labels)[: len(data.examples)] >= 0
    predicted = []
    for sentence, row_logits, row_first in zip(data.examples, logits, first_pieces):
        tags = [data.labels[i] for i in row_logits[row_first].argmax(-1)]
        predicted.append(tags + ["O"] * (len(sentence["words"]) - len(tags)))
    gold = [sentence["tags"] for sentence in data.examples]
    scores = metrics.entity_f1(gold, predicted)
    rows = [{"words": s["words"], "tags": s["tags"], "predicted": p} for s, p in zip(data.examples, predicted)]
    return scores, rows


# --- qa ----------------------------------------------------------------------------


def _read_squad(path, train):
    """The questions, and the SQuAD JSON to score against; question ids must be unique."""
    examples = readers.read_squad(path)
    seen = set()
    for example in examples:
        if example["id"] in seen:
            raise ValueError(f"{path}, question {example['id']}: the id is used by another question too.")
        seen.add(example["id"])
    with open(path, encoding="utf-8") as f:
        return TaskExamples(examples, squad=json.load(f))


def _qa_windows(data, tokenizer, sequence_length):
    _, question_answering = _datasets()
    return question_answering.question_answering_windows(
        data.examples, tokenizer, sequence_length, **question_answering_window_sizes(sequence_length))


def _qa_dataset(data, tokenizer, sequence_length, batch_size, training=False, seed=None,
                pad_final_batch=False, buckets=None):
    _, question_answering = _datasets()
    windows = _qa_windows(data, tokenizer, sequence_length)
    return question_answering.question_answering_dataset(
        windows, batch_size, training=training, seed=seed, pad_final_batch=pad_final_batch, buckets=buckets)


def _no_answer_threshold(answers, differences, squad):
    """The null-score difference above which "" is the answer: the one best for F1 on this data.

    `evaluate-v2.0.py`'s search reads its scores as probabilities, with a
    threshold of 0.0 for "answer none"; the differences are shifted to 1 and up
    so that 0.0 keeps that meaning, and the threshold is mapped back.
    """
    lowest = min((d for d in differences.values() if np.isfinite(d)), default=0.0)
    shifted = {qid: difference - lowest + 1.0 for qid, difference in differences.items()}
    best = metrics.squad_scores(answers, squad, no_answer_probabilities=shifted)["best_f1_thresh"]
    unshifted = {shifted[qid]: difference for qid, difference in differences.items()}
    return unshifted.get(best, lowest - 1.0)


def _qa_scores(model, data, tokenizer, sequence_length, batch_size, buckets=False):
    """SQuAD exact match and F1; for 2.0, at the no-answer threshold that is best on this data."""
    from kbert.tasks.span_decoding import decode_answers

    _, question_answering = _datasets()
    windows = _qa_windows(data, tokenizer, sequence_length)
    dataset = question_answering.question_answering_dataset(windows, batch_size, pad_final_batch=True)
    outputs = _predict(model, dataset, len(windows["token_ids"]), buckets, ("start_logits", "end_logits"))
    answers, differences = decode_answers(
        outputs["start_logits"], outputs["end_logits"], windows["offsets"], windows["question_ids"],
        {example["id"]: example["context"] for example in data.examples},
        max_context_mask=windows["max_context_mask"])
    extra = {}
    if any(example["is_impossible"] for example in data.examples):
        extra["no_answer_threshold"] = _no_answer_threshold(answers, differences, data.squad)
        answers = {qid: "" if differences[qid] > extra["no_answer_threshold"] else answer
                   for qid, answer in answers.items()}
    rows = [{"id": qid, "answer": answer} for qid, answer in answers.items()]
    return {**metrics.squad_scores(answers, data.squad), **extra}, rows


# --- choice ------------------------------------------------------------------------


def _read_swag(path, train):
    """SWAG rows, each with its `label`, and as many choices as the training file's."""
    examples = readers.read_swag(path)
    if "label" not in examples[0]:
        raise ValueError(f"{path}, line 1: no column 'label' (the index of the right ending).")
    if train is not None and len(examples[0]["choices"]) != _number_of_choices(train):
        raise ValueError(f"{path}, line 1: {len(examples[0]['choices'])} ending columns where the "
                         f"training file has {_number_of_choices(train)}.")
    return TaskExamples(examples)


def _choice_dataset(data, **options):
    return _builder_dataset("multiple_choice_dataset", data, **options)


def _choice_scores(model, data, buckets=False, **options):
    predicted = _logits(model, _choice_dataset, data, buckets, **options).argmax(-1)
    gold = np.array([example["label"] for example in data.examples])
    rows = [{"label": int(g), "prediction": int(p)} for g, p in zip(gold, predicted)]
    return metrics.glue_scores(gold, predicted, ("accuracy",)), rows


def _number_of_choices(data):
    return len(data.examples[0]["choices"])


# --- text --------------------------------------------------------------------------


def _read_text_to_text(path, train):
    return TaskExamples(readers.read_text_to_text(path))


def _text_to_text_dataset(data, buckets=None, **options):
    """T5's text to text keeps fixed padding: its sources and targets are padded apart."""
    return _builder_dataset("text_to_text_dataset", data, **options)


def _text_to_text_model(backbone, train, features):
    if features != "sequence_output":
        raise ValueError(f"--features {features} reads a frozen encoder's layers; --task text fine-tunes "
                         "the whole T5 (features sequence_output).")
    return Seq2SeqLM(backbone)


def _text_to_text_scores(model, data, tokenizer, sequence_length, batch_size, buckets=False):
    """Exact match and F1 of greedily generated texts, at most `sequence_length` tokens each."""
    sources = [{"source": example["source"]} for example in data.examples]
    dataset = _text_to_text_dataset(TaskExamples(sources), tokenizer=tokenizer, sequence_length=sequence_length,
                                    batch_size=batch_size, pad_final_batch=True)
    generated = [model.generate({name: np.asarray(value) for name, value in x.items()},
                                max_new_tokens=sequence_length) for x in dataset]
    texts = tokenizer.detokenize(np.concatenate(generated)[: len(sources)]).numpy()
    predictions = [text.decode("utf-8") for text in texts]
    targets = [example["target"] for example in data.examples]
    rows = [{"target": t, "prediction": p} for t, p in zip(targets, predictions)]
    return metrics.text_to_text_scores(predictions, targets), rows


# The backbones the sentence and token tasks fine-tune: the encoders, and XLNet in its own layout.
ENCODER_OR_XLNET = (Encoder, XLNet)

TASKS = {
    "classify": FinetuningRecipe(
        _read_classification, _text_dataset,
        lambda backbone, train, features: TextClassifier(backbone, len(train.labels), features=features),
        _classification_scores, backbone_type=ENCODER_OR_XLNET),
    "regress": FinetuningRecipe(
        _read_regression, _text_dataset,
        lambda backbone, train, features: TextClassifier(backbone, 1, features=features), _regression_scores,
        backbone_type=ENCODER_OR_XLNET),
    "tag": FinetuningRecipe(
        _read_conll, _tag_dataset,
        lambda backbone, train, features: TokenClassifier(backbone, len(train.labels), features=features),
        _tag_scores, backbone_type=ENCODER_OR_XLNET),
    "qa": FinetuningRecipe(
        _read_squad, _qa_dataset,
        lambda backbone, train, features: SpanQuestionAnswering(backbone, features=features), _qa_scores),
    "choice": FinetuningRecipe(
        _read_swag, _choice_dataset,
        lambda backbone, train, features: MultipleChoice(backbone, _number_of_choices(train), features=features),
        _choice_scores),
    "text": FinetuningRecipe(
        _read_text_to_text, _text_to_text_dataset, _text_to_text_model, _text_to_text_scores, backbone_type=T5),
}
"""The tasks of `kbert finetune`, by name."""
