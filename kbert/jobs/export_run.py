"""The CLI's `kbert export`: a saved model for serving, as a TensorFlow SavedModel that reads strings or as ONNX.

- `saved_model` (TensorFlow backend): a SavedModel whose `serve` signature
  takes a batch of strings (`texts`), tokenizes and packs them in the graph
  (tensorflow-text ops: load it with `import tensorflow_text` beside
  `tf.saved_model.load`, no kbert needed) and returns the model's `logits`.
  Classifiers and taggers, whose inputs are one text. A batch runs at the
  smallest length bucket that holds its longest text (one branch of static
  shape per bucket, `kbert.text.length_buckets`); a tagger's logits are
  padded back to the sequence length with zeros.
- `onnx` (PyTorch backend): the token-level classifier or tagger, `token_ids`,
  `segment_ids` and `padding_mask` in, with dynamic batch and length axes,
  through Keras' exporter (`model.export(format="onnx")`, PyTorch's ONNX
  exporter underneath). Not for sparse attention (BigBird, Longformer):
  its pattern is planned per length, with ops that exporter lacks.
"""

import os
import warnings

import keras

from kbert.jobs.predict_run import load_predictor
from kbert.tasks import TextClassifier, TokenClassifier
from kbert.text.length_buckets import model_bucket_lengths

# The backend that can produce each format.
FORMATS = {"saved_model": "tensorflow", "onnx": "torch"}
INPUTS = ("token_ids", "segment_ids", "padding_mask")
SPARSE_ATTENTION = ("bigbird", "longformer")


def _check(format, output):
    if format not in FORMATS:
        raise ValueError(f"Unknown --format {format!r}; expected one of {', '.join(FORMATS)}.")
    backend = keras.backend.backend()
    if backend != FORMATS[format]:
        raise ValueError(f"--format {format} is produced on the {FORMATS[format]} backend (add --backend "
                         f"{FORMATS[format]}); this run is on {backend}.")
    if os.path.exists(output) and os.listdir(output):
        raise ValueError(f"--output {output} is not empty; give a new folder.")


def export_saved_model(model, output):
    """Write `model` (a classifier or tagger with a preprocessor) as a SavedModel that reads strings."""
    import tensorflow as tf

    if not isinstance(model, (TextClassifier, TokenClassifier)):
        raise ValueError(f"--format saved_model exports classifiers and taggers; the model is a "
                         f"{type(model).__name__}.")
    preprocessor = model.text_preprocessor("export")
    packer = preprocessor.packer()
    length = packer.sequence_length
    buckets = model_bucket_lengths(model.backbone, length)

    def at_length(inputs, size):  # the model on rows cut to `size` tokens; a tagger's logits padded back
        logits = model({name: value[:, :size] for name, value in inputs.items()}, training=False)
        return logits if len(logits.shape) == 2 else tf.pad(logits, [[0, 0], [0, length - size], [0, 0]])

    def serve(texts):
        inputs = packer(preprocessor.tokenizer.tokenize(texts))  # rows of sequence_length, said statically
        inputs = {name: tf.ensure_shape(value, [None, length]) for name, value in inputs.items()}
        if len(buckets) == 1:
            return {"logits": model(inputs, training=False)}
        longest = tf.reduce_max(tf.reduce_sum(inputs["padding_mask"], axis=1))
        index = tf.searchsorted(tf.constant(buckets, tf.int32), tf.reshape(longest, [1]))[0]
        branches = [lambda size=size: at_length(inputs, size) for size in buckets]
        return {"logits": tf.switch_case(tf.minimum(index, len(buckets) - 1), branches)}

    # The endpoint brings its variables; tracking the model would also save its default signature,
    # traced at any length, which sparse attention (BigBird) cannot take.
    archive = keras.export.ExportArchive()
    archive.add_endpoint("serve", serve, input_signature=[tf.TensorSpec([None], tf.string, name="texts")])
    archive.write_out(output, verbose=False)


def export_onnx(model, output):
    """Write the token-level `model` as `output/model.onnx` (dynamic batch and length)."""
    import torch

    if not isinstance(model, (TextClassifier, TokenClassifier)):
        raise ValueError(f"--format onnx exports classifiers and taggers; the model is a {type(model).__name__}.")
    if getattr(model.backbone, "attention", None) in SPARSE_ATTENTION:
        raise ValueError(f"--format onnx cannot write {model.backbone.attention} attention (planned per length, "
                         "with ops PyTorch's ONNX exporter lacks); --format saved_model (TensorFlow) can.")
    one_segment = getattr(model.backbone, "num_segments", 2) < 2  # RoBERTa, DistilBERT: no segment_ids to give
    names = [name for name in INPUTS if name in model.backbone.input and not (one_segment and name == "segment_ids")]
    signature = [{name: keras.InputSpec(shape=(None, None), dtype="int32", name=name) for name in names}]
    os.makedirs(output, exist_ok=True)
    with warnings.catch_warnings():  # the tracer's notes on Python-level shape checks, not the user's concern
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        model.export(os.path.join(output, "model.onnx"), format="onnx", input_signature=signature, verbose=False)


def run_export(model, format, output, log=print):
    """Load `model` (what `kbert predict --model` takes) and export it as `format` to the folder `output`."""
    _check(format, output)
    predictor = load_predictor(model)
    (export_saved_model if format == "saved_model" else export_onnx)(predictor, output)
    log(f"Exported {type(predictor).__name__} as {format} to {output}")
