"""`predict_by_length`: a model's outputs on packed rows, in batches of similar length cut to their bucket.

The text-level calls (`classify`, `tag`, `answer`, `choose`, `fill_mask`)
pack every text to the preprocessor's full sequence length, then predict
here: the rows are sorted by length, batched, and each batch is cut to the
smallest bucket (`kbert.text.length_buckets`) that holds its longest row
(on eager PyTorch, to that row's length).
Padding is masked, so the results equal those of the full-length rows
(`tests/training/test_length_bucketed_prediction.py` checks every task type
on every backend); the outputs come back in input order.
"""

import weakref

import numpy as np

from kbert.backend.ops import predicts_eagerly
from kbert.text.length_buckets import bucket_length, length_batches, model_bucket_lengths, padded_rows, row_lengths

# Eager PyTorch pads a batch to its longest row rounded up to this (the fused kernels' preferred multiple).
EAGER_MULTIPLE = 8
# Each model's predict functions, by bucket length.
_BUCKET_FUNCTIONS = weakref.WeakKeyDictionary()
# The inputs that have a token axis (their last), as the padding mask does.
SEQUENCE_INPUTS = ("token_ids", "segment_ids", "padding_mask", "question_mask", "global_attention_mask")


def _cut(value, length, left):
    return value[..., -length:] if left else value[..., :length]


def _padded_back(value, length, left):
    """`value` (`(rows, bucket, ...)`) padded with zeros on its token axis to `length`."""
    widths = [(0, 0)] * value.ndim
    widths[1] = (length - value.shape[1], 0) if left else (0, length - value.shape[1])
    return np.pad(value, widths)


def _with_rows(batch, rows):
    """`batch` with its last row repeated up to `rows` rows (`batch` itself when it has them)."""
    if len(next(iter(batch.values()))) == rows:
        return batch
    return {name: np.concatenate([value, np.repeat(value[-1:], rows - len(value), axis=0)])
            for name, value in batch.items()}


def _predict_on_batch(model, batch, length):
    """`model.predict_on_batch(batch)` through a predict function of `length`'s own.

    Keras keeps one predict function per model, and TensorFlow's relaxes its
    shapes at the second length it sees (`reduce_retracing`); one function
    per bucket keeps each bucket's shapes static, which XLA compiles once and
    sparse attention needs. The model's own function is left as it was.
    """
    functions = _BUCKET_FUNCTIONS.setdefault(model, {})
    own = model.predict_function
    model.predict_function = functions.get(length)
    try:
        return model.predict_on_batch(batch)
    finally:
        functions[length], model.predict_function = model.predict_function, own


def predict_by_length(model, inputs, batch_size=32, sequence_outputs=()):
    """`model`'s outputs on `inputs`, predicted in batches of rows of similar length, in input order.

    Args:
        model: a task model or backbone (`predict_on_batch`); a backbone that
            reads its last token (XLNet, `summary_token_index` -1) takes rows
            padded on the left, which are cut from the left.
        inputs: a dict of NumPy arrays, one row per example, every
            `SEQUENCE_INPUTS` entry of the padding mask's shape.
        batch_size: rows per model call.
        sequence_outputs: the names of outputs with a token axis (axis 1;
            `True` when the model returns one such array), padded back with
            zeros to the full length.

    A batch is padded to the smallest length bucket that holds its longest
    row; where the model predicts eagerly (`predicts_eagerly`: PyTorch without
    `jit_compile`), where a new length compiles nothing, to that row's length
    rounded up to a multiple of `EAGER_MULTIPLE` instead. A model whose
    predict compiles (`model.jit_compile`: JAX, XLA, `torch.compile`) gets a
    short batch padded to `padded_rows` rows, so that each bucket compiles for
    a few batch shapes only.

    Returns:
        The outputs as `model.predict` gives them (an array or a dict of them).

    Example:
    >>> import kbert
    >>> backbone = kbert.models.Encoder(vocabulary_size=10, num_layers=1, num_heads=2, hidden_dim=8,
    ...                                 intermediate_dim=16, max_positions=64)
    >>> model = kbert.tasks.TextClassifier(backbone, num_classes=2)
    >>> mask = np.zeros((3, 64), "int32")
    >>> mask[:, :5] = 1
    >>> inputs = {"token_ids": mask * 7, "segment_ids": 0 * mask, "padding_mask": mask}
    >>> logits = predict_by_length(model, inputs, batch_size=2)
    >>> logits.shape, bool(np.allclose(logits, model.predict(inputs, verbose=0), atol=1e-5))
    ((3, 2), True)
    """
    backbone = getattr(model, "backbone", model)
    left = getattr(backbone, "summary_token_index", 0) == -1
    full = np.asarray(inputs["padding_mask"]).shape[-1]
    buckets = model_bucket_lengths(backbone, full)
    lengths = row_lengths(inputs["padding_mask"])
    compiled = bool(getattr(model, "jit_compile", False))
    exact = predicts_eagerly(model) and len(buckets) > 1
    pieces, order = [], []
    for rows in length_batches(lengths, batch_size):
        longest = int(lengths[rows].max())
        length = min(full, -(-longest // EAGER_MULTIPLE) * EAGER_MULTIPLE) if exact else bucket_length(
            longest, buckets)
        batch = {name: _cut(value[rows], length, left) if name in SEQUENCE_INPUTS else value[rows]
                 for name, value in ((n, np.asarray(v)) for n, v in inputs.items())}
        filled = padded_rows(len(rows), batch_size) if compiled else len(rows)
        outputs = _predict_on_batch(model, _with_rows(batch, filled), length)
        outputs = outputs if isinstance(outputs, dict) else {None: outputs}
        real = {name: np.asarray(value)[: len(rows)] for name, value in outputs.items()}
        pieces.append({name: _padded_back(value, full, left) if sequence_outputs is True or name in sequence_outputs
                       else value for name, value in real.items()})
        order.append(rows)
    place = np.argsort(np.concatenate(order), kind="stable")
    outputs = {name: np.concatenate([piece[name] for piece in pieces])[place] for name in pieces[0]}
    return outputs[None] if None in outputs else outputs
