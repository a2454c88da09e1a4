"""Pretrain BERT (MLM + NSP) on a Cloud TPU with `TPUStrategy`; runs on local devices too.

On a Cloud TPU VM (TensorFlow and kbert installed), the exact command is:

    KERAS_BACKEND=tensorflow python examples/tpu_fit.py --tpu local \\
        --tfrecords "gs://my-bucket/bert/*.tfrecord" --vocabulary gs://my-bucket/vocab.txt \\
        --output gs://my-bucket/runs/bert_base --steps 100000 --batch-size 256

The TPU is resolved by `kbert.distribute.default_strategy` (`--tpu local` on
a TPU VM, a TPU name for a TPU node, or `$TPU_NAME`); without one it falls
back to the local devices (several GPUs: `MirroredStrategy`; else one
device), so the same script runs here, for example briefly on this CPU:

    KERAS_BACKEND=tensorflow python examples/tpu_fit.py --model bert_tiny \\
        --num-layers 1 --steps 4 --batch-size 8 --sequence-length 64 --documents 200

Inputs, both with static shapes (what a TPU needs), batched to the global
batch size, which the strategy splits across the replicas:

- `--tfrecords`: files in the format of Google's `create_pretraining_data.py`
  (`input_ids`, `input_mask`, `segment_ids`, `masked_lm_positions`,
  `masked_lm_ids`, `masked_lm_weights`, `next_sentence_labels`);
- otherwise text (`--text` files or folders; by default the Python
  documentation that `kbert pretrain` uses) through
  `kbert.pretraining.pretraining_dataset`, with a WordPiece vocabulary
  from `--vocabulary` or learned from the text.

On a TPU the model computes in `mixed_bfloat16` and runs `--steps-per-execution`
steps per host call; it is saved to `--output/model.keras`.
"""

import argparse
import os
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402

import kbert  # noqa: E402
from kbert import distribute  # noqa: E402
from kbert.pretraining import (  # noqa: E402
    BertPretrainer,
    create_optimizer,
    pretraining_dataset,
    read_documents,
)


def tfrecord_dataset(pattern, sequence_length, max_predictions, batch_size, seed=0):
    """Batches `(x, y)` for `BertPretrainer` from BERT-format TFRecords (static shapes)."""
    import tensorflow as tf

    def ints(length):
        return tf.io.FixedLenFeature([length], tf.int64)

    features = {
        "input_ids": ints(sequence_length),
        "input_mask": ints(sequence_length),
        "segment_ids": ints(sequence_length),
        "masked_lm_positions": ints(max_predictions),
        "masked_lm_ids": ints(max_predictions),
        "masked_lm_weights": tf.io.FixedLenFeature([max_predictions], tf.float32),
        "next_sentence_labels": ints(1),
    }

    def parse(record):
        example = tf.io.parse_single_example(record, features)
        x = {
            "token_ids": example["input_ids"],
            "padding_mask": example["input_mask"],
            "segment_ids": example["segment_ids"],
            "mask_positions": example["masked_lm_positions"],
        }
        x = {key: tf.cast(value, tf.int32) for key, value in x.items()}
        y = {
            "mask_ids": tf.cast(example["masked_lm_ids"], tf.int32),
            "mask_weights": example["masked_lm_weights"],
            "pair_labels": tf.cast(example["next_sentence_labels"][0], tf.int32),
        }
        return x, y

    files = tf.data.Dataset.list_files(pattern, shuffle=True, seed=seed)
    records = files.interleave(tf.data.TFRecordDataset, num_parallel_calls=tf.data.AUTOTUNE)
    return (
        records.shuffle(10_000, seed=seed)
        .repeat()
        .map(parse, num_parallel_calls=tf.data.AUTOTUNE)
        .batch(batch_size, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
    )


def text_dataset(args, max_predictions):
    """Batches from raw text through kbert's pipeline, and the vocabulary size."""
    from kbert.jobs.pretraining_run import default_corpus
    from kbert.text import WordPieceTokenizer, learn_word_piece_vocabulary

    if args.text:
        documents = ["\n".join(d) for d in read_documents(args.text)]
    else:
        documents = default_corpus()
    documents = documents[: args.documents] if args.documents else documents
    vocabulary = args.vocabulary
    if vocabulary is None:
        vocabulary = learn_word_piece_vocabulary(documents, args.vocabulary_size)
        print(f"Learned a {len(vocabulary):,}-token WordPiece vocabulary.")
    tokenizer = WordPieceTokenizer(vocabulary, lowercase=True)
    dataset = pretraining_dataset(
        documents,
        tokenizer,
        objective="mlm_nsp",
        sequence_length=args.sequence_length,
        batch_size=args.batch_size,
        max_predictions=max_predictions,
        seed=args.seed,
    )
    return dataset, tokenizer.vocabulary_size


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tpu", help="'local' on a TPU VM, a TPU name or grpc:// address")
    parser.add_argument("--model", default="bert_base", help="a kbert preset (bert_base)")
    parser.add_argument("--num-layers", type=int, help="override the preset's layer count")
    parser.add_argument("--tfrecords", help="BERT-format TFRecord file pattern (local or gs://)")
    parser.add_argument("--text", nargs="*", help="text files or folders (default: Python docs)")
    parser.add_argument("--documents", type=int, help="use only the first N text documents")
    parser.add_argument("--vocabulary", help="WordPiece vocab.txt (default: learned from --text)")
    parser.add_argument("--vocabulary-size", type=int, default=30522)
    parser.add_argument("--sequence-length", type=int, default=128)
    parser.add_argument("--max-predictions", type=int, help="default: 20 at 128, else 0.155 L")
    parser.add_argument("--batch-size", type=int, default=256, help="global batch size")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--steps-per-execution", type=int, help="default: 100 on TPU, else 1")
    parser.add_argument("--output", default="runs/tpu_fit")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if keras.backend.backend() != "tensorflow":
        parser.error("TPUStrategy needs KERAS_BACKEND=tensorflow.")
    if args.tfrecords and not args.vocabulary:
        parser.error("--tfrecords needs --vocabulary (the ids in the records are its ids).")

    import tensorflow as tf

    from kbert.pretraining.pretraining_dataset import default_max_predictions

    strategy = distribute.default_strategy(args.tpu)
    on_tpu = isinstance(strategy, tf.distribute.TPUStrategy)
    replicas = strategy.num_replicas_in_sync
    if args.batch_size % replicas:
        parser.error(f"--batch-size {args.batch_size} must be a multiple of {replicas} replicas.")
    print(f"{type(strategy).__name__} with {replicas} replica(s); "
          f"global batch {args.batch_size} ({args.batch_size // replicas} per replica).")
    if on_tpu:
        keras.config.set_dtype_policy("mixed_bfloat16")

    max_predictions = args.max_predictions or default_max_predictions(args.sequence_length)
    if args.tfrecords:
        from kbert.text import WordPieceTokenizer

        vocabulary_size = WordPieceTokenizer(args.vocabulary).vocabulary_size
        dataset = tfrecord_dataset(
            args.tfrecords, args.sequence_length, max_predictions, args.batch_size, args.seed
        )
    else:
        dataset, vocabulary_size = text_dataset(args, max_predictions)

    overrides = {"vocabulary_size": vocabulary_size}
    if args.num_layers:
        overrides["num_layers"] = args.num_layers
    with strategy.scope():
        backbone = kbert.models.build(args.model, **overrides)
        model = BertPretrainer(backbone, pair_objective="nsp")
        model.compile(
            optimizer=create_optimizer(
                "adamw",
                args.learning_rate,
                total_steps=args.steps,
                warmup_steps=max(args.steps // 100, 1),
            ),
            jit_compile=distribute.jit_compile_for(strategy),
            steps_per_execution=args.steps_per_execution or (100 if on_tpu else 1),
        )
    print(f"{args.model}: {backbone.count_params():,} parameters, {model.compute_dtype} compute, "
          f"jit_compile={model.jit_compile}.")

    start = time.time()
    history = model.fit(dataset, steps_per_epoch=args.steps, epochs=1, shuffle=False, verbose=2)
    seconds = time.time() - start
    examples = args.steps * args.batch_size
    print(f"{args.steps} steps in {seconds:.1f} s ({examples / seconds:,.0f} examples/s); "
          f"final loss {history.history['loss'][-1]:.4f}.")
    if "://" not in args.output:  # a local folder; gs:// needs none
        os.makedirs(args.output, exist_ok=True)
    path = os.path.join(args.output, "model.keras")
    model.save(path)
    print(f"Saved {path}")
    return history.history


if __name__ == "__main__":
    main()
