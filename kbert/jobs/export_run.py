"""The CLI's `kbert export`: a saved model for serving, as a TensorFlow SavedModel that reads strings or as ONNX.

- `saved_model` (TensorFlow backend): a SavedModel whose `serve` signature
  takes a batch of strings (`texts`), tokenizes and packs them in the graph
  in the model's own layout (XLNet's last `<cls>` and left padding included;
  tensorflow-text ops: load it with `import tensorflow_text` beside
  `tf.saved_model.load`, no kbert needed) and returns the model's `logits`.
  Classifiers also have `serve_pairs` (`texts`, `text_pairs`) for sentence
  pairs; `labels()` returns the class names. Classifiers and taggers.
  A batch runs at the smallest length bucket that holds its longest text
  (one branch of static shape per bucket, `kbert.text.length_buckets`); a
  tagger's logits are padded back to the sequence length with zeros.
- `onnx` (PyTorch backend): the token-level classifier or tagger, int64
  `token_ids`, `segment_ids` and `padding_mask` in (RoBERTa and DistilBERT
  take no `segment_ids`), with dynamic batch and length axes, `logits` out,
  through Keras' exporter (`model.export(format="onnx")`, PyTorch's ONNX
  exporter underneath). The ids are in the model's own layout, which the
  model's `layout` metadata states: BERT's `[CLS] A [SEP] B [SEP]` padded on
  the right, or XLNet's `A <sep> B <sep> <cls>` padded on the left (`<cls>`
  in segment 2). The `labels` metadata is a JSON list of the class names.
  Not for sparse attention (BigBird, Longformer): its pattern is planned per
  length, with ops that exporter lacks.
- `huggingface` (any backend): a folder transformers' `Auto*` classes and
  `pipeline` load, through `kbert.to_huggingface`.

Each format's optional packages (`kbert.jobs.extras.EXPORT_PACKAGES`, the
`export` extra) are checked before the model is loaded.
"""

import json
import os
import warnings

import keras

from kbert.checkpoints.huggingface_export import to_huggingface
from kbert.jobs.extras import EXPORT_PACKAGES, require_packages
from kbert.jobs.predict_run import load_predictor
from kbert.tasks import TextClassifier, TokenClassifier
from kbert.text.length_buckets import model_bucket_lengths

# The backend that can produce each format.
FORMATS = {"saved_model": "tensorflow", "onnx": "torch", "huggingface": None}
INPUTS = ("token_ids", "segment_ids", "padding_mask")
SPARSE_ATTENTION = ("bigbird", "longformer")


def _check(format, output):
    if format not in FORMATS:
        raise ValueError(f"Unknown --format {format!r}; expected one of {', '.join(FORMATS)}.")
    backend = keras.backend.backend()
    if FORMATS[format] is not None and backend != FORMATS[format]:
        raise ValueError(f"--format {format} is produced on the {FORMATS[format]} backend (add --backend "
                         f"{FORMATS[format]}); this run is on {backend}.")
    require_packages(EXPORT_PACKAGES[format], f"--format {format}", extra="export")
    _check_output(output)


def _check_output(output):
    """A one-line `ValueError` unless `output` is, or can be made as, an empty folder this process may write."""
    if os.path.exists(output) and not os.path.isdir(output):
        raise ValueError(f"--output {output} is a file; give a new folder.")
    if os.path.isdir(output) and os.listdir(output):
        raise ValueError(f"--output {output} is not empty; give a new folder.")
    try:
        os.makedirs(output, exist_ok=True)
    except OSError as error:  # a path under a file, a read-only place
        raise ValueError(f"--output {output} cannot be made: {error.strerror}.") from None
    if not os.access(output, os.W_OK):
        raise ValueError(f"--output {output} is not writable.")


def label_names(model):
    """The name of each output class (`LABEL_i` where the model has none); a regressor's one value is `score`."""
    count = getattr(model, "num_classes", None) or model.num_labels
    if count == 1:
        return ["score"]
    return [model.preprocessor.label_name(index) for index in range(count)]


def _saved_model_endpoints(model, preprocessor):
    """`{name: (function, input signature)}` of the SavedModel: `serve` on `texts`, `serve_pairs` on `texts`
    and `text_pairs` (classifiers), each packed, and laid out as the backbone reads (XLNet's last `<cls>`)."""
    import tensorflow as tf

    from kbert.text.last_token_layout import last_token_layout

    packer = preprocessor.packer()
    length = packer.sequence_length
    buckets = model_bucket_lengths(model.backbone, length)
    last_token = getattr(model.backbone, "summary_token_index", 0) == -1
    one_segment = getattr(model.backbone, "num_segments", 2) < 2

    def at_length(inputs, size):  # rows cut to `size` tokens on their padded side; a tagger's logits padded back
        logits = model({name: value[:, length - size:] if last_token else value[:, :size]
                        for name, value in inputs.items()}, training=False)
        padding = [length - size, 0] if last_token else [0, length - size]
        return logits if len(logits.shape) == 2 else tf.pad(logits, [[0, 0], padding, [0, 0]])

    def by_bucket(inputs):  # one branch of static shape per bucket: the smallest that holds the longest row
        if len(buckets) == 1:
            return model(inputs, training=False)
        longest = tf.reduce_max(tf.reduce_sum(inputs["padding_mask"], axis=1))
        index = tf.searchsorted(tf.constant(buckets, tf.int32), tf.reshape(longest, [1]))[0]
        branches = [lambda size=size: at_length(inputs, size) for size in buckets]
        return tf.switch_case(tf.minimum(index, len(buckets) - 1), branches)

    def logits(first, second=None):
        second = None if second is None else preprocessor.tokenizer.tokenize(second)
        inputs = packer(preprocessor.tokenizer.tokenize(first), second)  # rows of sequence_length
        inputs = {name: tf.ensure_shape(value, [None, length]) for name, value in inputs.items()}
        inputs = last_token_layout(inputs) if last_token else inputs
        if one_segment:  # RoBERTa, DistilBERT: both texts in segment 0
            inputs["segment_ids"] = tf.zeros_like(inputs["segment_ids"])
        return {"logits": by_bucket(inputs)}

    strings = [tf.TensorSpec([None], tf.string, name="texts")]
    endpoints = {"serve": (logits, strings)}
    if isinstance(model, TextClassifier):
        endpoints["serve_pairs"] = (logits, [*strings, tf.TensorSpec([None], tf.string, name="text_pairs")])
    return endpoints


def export_saved_model(model, output):
    """Write `model` (a classifier or tagger with a preprocessor) as a SavedModel that reads strings."""
    import tensorflow as tf

    if not isinstance(model, (TextClassifier, TokenClassifier)):
        raise ValueError(f"--format saved_model exports classifiers and taggers; the model is a "
                         f"{type(model).__name__}.")
    preprocessor = model.text_preprocessor("export")
    # The endpoints bring their variables; tracking the model would also save its default signature,
    # traced at any length, which sparse attention (BigBird) cannot take.
    archive = keras.export.ExportArchive()
    # The lookup tables an endpoint reads that it does not capture (byte-level BPE's merge cache).
    for resource in getattr(preprocessor.tokenizer, "resources", tuple)():
        archive.track(resource)
    for name, (function, signature) in _saved_model_endpoints(model, preprocessor).items():
        archive.add_endpoint(name, function, input_signature=signature)
    names = tf.constant(label_names(model))
    archive.add_endpoint("labels", lambda: {"labels": names}, input_signature=[])
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
    signature = [{name: keras.InputSpec(shape=(None, None), dtype="int64", name=name) for name in names}]
    os.makedirs(output, exist_ok=True)
    path = os.path.join(output, "model.onnx")
    with warnings.catch_warnings():  # the tracer's notes on Python-level shape checks, not the user's concern
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        model.export(path, format="onnx", input_signature=signature, verbose=False)
    _name_onnx_output(path, label_names(model), _layout(model))


def _layout(model):
    """How the ids an export takes are laid out, in words (the ONNX model's `layout` metadata)."""
    if getattr(model.backbone, "summary_token_index", 0) == -1:
        return ("XLNet: A <sep> B <sep> <cls>, padded on the left; segment_ids 0 for A, 1 for B, 2 for <cls>, "
                "0 in the padding")
    return "BERT: [CLS] A [SEP] B [SEP], padded on the right; segment_ids 0 for A, 1 for B"


def _name_onnx_output(path, labels, layout):
    """Name the ONNX model's output `logits` and write its label names (JSON) and layout as metadata."""
    import onnx

    graph_model = onnx.load(path)
    old = graph_model.graph.output[0].name
    for node in graph_model.graph.node:
        node.output[:] = ["logits" if name == old else name for name in node.output]
    graph_model.graph.output[0].name = "logits"
    onnx.helper.set_model_props(graph_model, {"labels": json.dumps(labels), "layout": layout})
    onnx.save(graph_model, path)


def run_export(model, format, output, log=print):
    """Load `model` (what `kbert predict --model` takes) and export it as `format` to the folder `output`."""
    _check(format, output)
    predictor = load_predictor(model)
    writers = {"saved_model": export_saved_model, "onnx": export_onnx, "huggingface": to_huggingface}
    writers[format](predictor, output)
    log(f"Exported {type(predictor).__name__} as {format} to {output}")
