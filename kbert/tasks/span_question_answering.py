"""Extractive question answering (SQuAD 1.1 and 2.0) over any kbert encoder."""

import keras
import numpy as np
from keras import ops

from kbert.backend.ops import is_eager_tensor, masked_score, scale_loss_for_replicas
from kbert.input_checks import check_ids_in_range, mask, positions
from kbert.tasks.heads import encode, feature_route, head_dense, labelled, task_targets
from kbert.tasks.question_answering_dataset import question_answering_window_sizes, question_answering_windows
from kbert.tasks.span_decoding import best_spans
from kbert.text.text_checks import check_texts
from kbert.training.length_bucketed_prediction import predict_by_length
from kbert.training.losses import weighted_cross_entropy
from kbert.training.task import Task

# The logit of a padding position, in float32: no span starts or ends there.


def _check_question_is_global(backbone, question_mask):
    """On BigBird, a `ValueError` when a question token lies outside the first (global) block.

    Sequences short enough for BigBird's full attention pass; so do traced
    masks, whose values are unknown.
    """
    if backbone.attention != "bigbird" or not is_eager_tensor(question_mask):
        return
    attention = backbone.transformer_layers[0].attention_layer
    if question_mask.shape[1] <= attention.full_attention_length:
        return
    positions = np.flatnonzero(ops.convert_to_numpy(question_mask).any(axis=0))
    if positions.size and positions[-1] >= attention.block_size:
        raise ValueError(
            f"The question reaches token {int(positions[-1])}, past BigBird's first global "
            f"block (tokens 0-{attention.block_size - 1}): put the question first and "
            f"truncate it to {attention.block_size - 2} tokens or fewer."
        )


@keras.saving.register_keras_serializable(package="kbert")
class SpanQuestionAnswering(Task):
    """A backbone with start and end logits over the tokens: `Dense(2)` on `sequence_output`.

    The answer span of each example is `(start_positions, end_positions)`,
    token indices into the packed `[CLS] question [SEP] context [SEP]`; for
    SQuAD 2.0 an unanswerable question (or a window without the answer)
    points both to 0, the [CLS] position, whose score competes with the best
    span in post-processing. The loss is the mean of the start and end
    softmax cross-entropies, in float32, each `Σ w·CE / (Σ w + 1e-5)` with
    weight 0 for rows whose positions are -1 (which only pad a batch).
    Padding positions get the logit -1e9, so they are never predicted; the
    logits are float32 under every dtype policy. Metrics: `start_accuracy`
    and `end_accuracy`.

    Long-document backbones put the question in global attention:

    - Longformer (the Longformer paper's recipe): give the question tokens
      global attention with a `question_mask` (or a `global_attention_mask`,
      which takes precedence) in the inputs; it goes to the backbone as its
      `global_attention_mask`.
    - BigBird: the first and last blocks of `block_size` tokens are global,
      so a question packed first, within the first block ([CLS] and up to
      `block_size - 2` question tokens, then [SEP]) is global. Given a
      `question_mask`, eager calls check that it stays within that block and
      raise a `ValueError` otherwise (sequences short enough for BigBird's
      full attention are not checked: every token is global there).

    On other backbones every token attends to every other and `question_mask`
    is not used.

    Args:
        backbone: a kbert encoder (dict inputs, `sequence_output`); its
            pooler is unused (build it with `use_pooler=False`).
        features: what the head reads, one of `kbert.tasks.encoder_features.FEATURES`
            (`"sequence_output"` fine-tunes the whole encoder; see `EncoderFeatures`).

    Call arguments:
        inputs: dict with `token_ids` and `padding_mask` `(batch, sequence)`,
            optionally `segment_ids`, `question_mask` and
            `global_attention_mask` (0/1 `(batch, sequence)`).
        training: whether dropout is active.

    Returns:
        dict with `start_logits` and `end_logits`, float32 `(batch, sequence)`.

    Targets (`y` in `fit`): dict with `start_positions` and `end_positions`,
    int `(batch,)`.

    Example:
    >>> import kbert
    >>> backbone = kbert.models.bert_tiny(num_layers=1, vocabulary_size=50, max_positions=16)
    >>> model = SpanQuestionAnswering(backbone)
    >>> x = {"token_ids": keras.ops.ones((2, 8), "int32"),
    ...      "padding_mask": keras.ops.array([[1] * 8, [1] * 5 + [0] * 3])}
    >>> logits = model(x)
    >>> tuple(logits["start_logits"].shape), float(logits["end_logits"][1, 6])
    ((2, 8), -1000000000.0)

    References:
        - [Devlin et al., 2019](https://arxiv.org/abs/1810.04805) §4.2-4.3 (SQuAD)
        - [Beltagy et al., 2020](https://arxiv.org/abs/2004.05150) §6 (Longformer QA)
        - [Zaheer et al., 2020](https://arxiv.org/abs/2007.14062) (BigBird)
    """

    # What `kbert.input_checks` checks beside the backbone's inputs.
    INPUT_TABLE = {"question_mask": mask()}
    TARGET_TABLE = {
        "start_positions": positions(("batch",), allow_negative=True),
        "end_positions": positions(("batch",), allow_negative=True),
    }

    def __init__(self, backbone, features="sequence_output", **kwargs):
        super().__init__(dtype=backbone.dtype_policy, **kwargs)
        self.backbone = backbone
        self.features = features
        self.encoder_features = feature_route(backbone, features, "SpanQuestionAnswering")
        self.span_dense = head_dense(backbone, 2, "span_dense")
        self.start_accuracy = keras.metrics.SparseCategoricalAccuracy(name="start_accuracy")
        self.end_accuracy = keras.metrics.SparseCategoricalAccuracy(name="end_accuracy")
        self.build()

    def build(self, input_shape=None):
        """Build the head for the backbone's width (done at construction)."""
        self.span_dense.build((None, None, self.encoder_features.output_dim))

    def call(self, inputs, training=None):
        if isinstance(inputs, dict) and "question_mask" in inputs:
            _check_question_is_global(self.backbone, inputs["question_mask"])
            inputs = {"global_attention_mask": inputs["question_mask"], **inputs}
        outputs = encode(self.backbone, inputs, "SpanQuestionAnswering", training, self.encoder_features)
        logits = ops.cast(self.span_dense(outputs["sequence_output"]), "float32")
        real = ops.cast(inputs["padding_mask"], "bool")
        return {
            "start_logits": ops.where(real, logits[..., 0], masked_score("float32")),
            "end_logits": ops.where(real, logits[..., 1], masked_score("float32")),
        }

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """`(CE(start) + CE(end)) / 2`, each the mean over the labelled rows, in float32."""
        keys = ("start_positions", "end_positions")
        y = task_targets(y, keys, "SpanQuestionAnswering", sample_weight)
        loss = 0.0
        for key, logits_key, metric in zip(
            keys, ("start_logits", "end_logits"), (self.start_accuracy, self.end_accuracy)
        ):
            logits = y_pred[logits_key]
            positions, weights = labelled(y[key])
            check_ids_in_range(positions, logits.shape[1], f"SpanQuestionAnswering {key[:-1]}")
            loss = loss + weighted_cross_entropy(positions, logits, weights) / 2.0
            metric.update_state(positions, logits, sample_weight=weights)
        return scale_loss_for_replicas(loss)

    def answer(self, questions, contexts, batch_size=32, n_best=20, max_answer_length=30):
        """Answers cut from the contexts: text, character span and score; "" when unanswerable.

        Needs `self.preprocessor`. Each question is packed with windows over
        its context, `[CLS] question [SEP] context-window [SEP]` of the
        preprocessor's `sequence_length` (as `kbert finetune --task qa`
        packs them), and the best span over the windows is found with the
        n-best search of `kbert.tasks.span_decoding`. With the
        preprocessor's `no_answer_threshold` (SQuAD 2.0 models) the answer is
        "" when the no-answer score beats the best span's by more than it.

        Returns:
            Per question, `{"answer", "start", "end", "score"}`: `context[start:end]`
            and the span's score (start + end logit); for no answer `""`,
            `None` spans and the no-answer score. One dict for one question.

        Example:
        ```python
        reader.answer("Where is Paris?", "Paris is in France.")
        # {"answer": "France", "start": 12, "end": 18, "score": 7.1}
        ```
        """
        preprocessor = self.text_preprocessor("answer")
        questions, single = check_texts(questions, "question")
        if contexts is None:
            raise ValueError("A question needs a context to find its answer in; none was given.")
        contexts, _ = check_texts([contexts] if isinstance(contexts, str) else contexts, "context")
        if len(contexts) != len(questions):
            raise ValueError(f"{len(questions)} questions but {len(contexts)} contexts; give one context each.")
        examples = [{"id": str(i), "question": q, "context": c, "answers": []}
                    for i, (q, c) in enumerate(zip(questions, contexts))]
        length = preprocessor.sequence_length
        windows = question_answering_windows(examples, preprocessor.tokenizer, length,
                                             **question_answering_window_sizes(length))
        inputs = {name: windows[name].astype("int32")
                  for name in ("token_ids", "segment_ids", "padding_mask", "question_mask")}
        logits = predict_by_length(self, inputs, batch_size, sequence_outputs=("start_logits", "end_logits"))
        spans = best_spans(logits["start_logits"], logits["end_logits"], windows["offsets"], windows["question_ids"],
                           {e["id"]: e["context"] for e in examples}, n_best, max_answer_length,
                           windows["max_context_mask"])
        results = [_answer(spans[e["id"]], e["context"], preprocessor.no_answer_threshold) for e in examples]
        return results[0] if single else results


def _answer(span, context, no_answer_threshold):
    """`{"answer", "start", "end", "score"}` of a question's best span (see `answer`)."""
    unanswered = span["start"] is None or (
        no_answer_threshold is not None and span["no_answer_score"] - span["score"] > no_answer_threshold)
    if unanswered:
        return {"answer": "", "start": None, "end": None, "score": span["no_answer_score"]}
    return {"answer": context[span["start"]:span["end"]], "start": span["start"], "end": span["end"],
            "score": span["score"]}
