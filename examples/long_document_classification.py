"""Classify 4096-token documents whose label needs key tokens spread over the whole document.

    KERAS_BACKEND=jax python examples/long_document_classification.py [--train 1024] [--epochs 6] [--smoke]

Each synthetic document is `[CLS]` followed by 4095 noise tokens drawn from a
small vocabulary, with `--keys` key phrases (each `--key-copies` repeats of A
or of B) at random places anywhere in it; the label is 1 when A phrases
outnumber B phrases. A BERT limited to 512 tokens sees only the phrases in
its first eighth (often none), so it stays near chance (50%). BigBird (whose
first block, holding `[CLS]`, is global) and Longformer (with `[CLS]` as its
global token) see the whole document and count them all. All three are small
(1 layer, hidden 32, blocks and windows of 32) and train on CPU in minutes;
the script prints each one's test accuracy and training time.

(A label that is a function of two far-apart tokens such as "the first and
the last key are the same" is an XOR: no single key correlates with it, so
gradient descent finds no signal to start from in a few hundred steps. The
majority needs every key just as much and gives each one a signal.)
"""

import argparse
import time

import keras
import numpy as np

import kbert
from kbert.pretraining import create_optimizer

LENGTH, SHORT = 4096, 512
CLS, KEY_A, KEY_B, FIRST_NOISE, VOCABULARY = 1, 2, 3, 4, 12
SMALL = dict(
    vocabulary_size=VOCABULARY,
    num_layers=1,
    num_heads=2,
    hidden_dim=32,
    intermediate_dim=64,
    dropout=0.0,
    num_segments=0,
)


def make_documents(count, seed, keys, copies, length=LENGTH):
    """Token ids `(count, length)` and labels: 1 when A phrases outnumber B phrases."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(FIRST_NOISE, VOCABULARY, (count, length)).astype("int32")
    ids[:, 0] = CLS
    kinds = rng.integers(KEY_A, KEY_B + 1, (count, keys))
    slots = (length - 1) // copies  # phrases start on a multiple of `copies`: they never overlap
    for row in range(count):
        starts = 1 + copies * rng.choice(slots, keys, replace=False)
        for start, kind in zip(starts, kinds[row]):
            ids[row, start : start + copies] = kind
    labels = (kinds == KEY_A).sum(axis=1) * 2 > keys
    return ids, labels.astype("int32")


def classifier(backbone, length, learning_rate, total_steps):
    inputs = {
        "token_ids": keras.Input((length,), dtype="int32", name="token_ids"),
        "padding_mask": keras.Input((length,), dtype="int32", name="padding_mask"),
    }
    if "global_attention_mask" in backbone.input:
        inputs["global_attention_mask"] = keras.Input(
            (length,), dtype="int32", name="global_attention_mask"
        )
    pooled = backbone(inputs)["pooled_output"]
    model = keras.Model(inputs, keras.layers.Dense(2)(pooled))
    model.compile(
        optimizer=create_optimizer(
            "adamw", learning_rate, total_steps=total_steps, warmup_steps=total_steps // 10,
            weight_decay=0.0,
        ),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def features(ids, model):
    length = model.input["token_ids"].shape[1]
    ids = ids[:, :length]  # the 512-token model sees the first 512 tokens only
    data = {"token_ids": ids, "padding_mask": np.ones_like(ids)}
    if "global_attention_mask" in model.input:  # [CLS] is the global token
        data["global_attention_mask"] = np.zeros_like(ids)
        data["global_attention_mask"][:, 0] = 1
    return data


def models(length, short):
    """`{name: (backbone, the tokens it reads)}`: BERT on the first `short`, BigBird and Longformer on all."""
    return {
        f"BERT, first {short} tokens": (kbert.models.Encoder(**SMALL, max_positions=short), short),
        f"BigBird, {length} tokens": (
            kbert.models.Encoder(
                **SMALL,
                max_positions=length,
                attention="bigbird",
                attention_kwargs={"block_size": 32, "num_random_blocks": 1},
            ),
            length,
        ),
        f"Longformer, {length} tokens": (
            kbert.models.Encoder(
                **SMALL,
                max_positions=length,
                attention="longformer",
                attention_kwargs={"window": 32, "max_global_tokens": 1},
            ),
            length,
        ),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", type=int, default=1024)
    parser.add_argument("--test", type=int, default=512)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=3e-3, help="peak, after warm-up")
    parser.add_argument("--keys", type=int, default=7, help="key phrases per document (odd)")
    parser.add_argument("--key-copies", type=int, default=16)
    parser.add_argument("--only", help="train only the models whose name contains this")
    parser.add_argument("--smoke", action="store_true",
                        help="256-token documents (BERT: 32), 8 of them, one epoch: check that the script runs")
    args = parser.parse_args()
    length, short = (256, 32) if args.smoke else (LENGTH, SHORT)
    if args.smoke:
        args.train, args.test, args.epochs, args.batch_size, args.keys, args.key_copies = 8, 8, 1, 8, 3, 4
    if args.keys % 2 == 0 or args.keys * args.key_copies > length - 1:
        parser.error(f"--keys must be odd (no ties) and fit the document; received {args.keys}.")
    keras.utils.set_random_seed(0)
    train_ids, train_labels = make_documents(args.train, 1, args.keys, args.key_copies, length)
    test_ids, test_labels = make_documents(args.test, 2, args.keys, args.key_copies, length)
    for name, (backbone, model_length) in models(length, short).items():
        if args.only and args.only not in name:
            continue
        steps = args.epochs * (args.train // args.batch_size)
        model = classifier(backbone, model_length, args.learning_rate, steps)
        start = time.perf_counter()
        model.fit(
            features(train_ids, model),
            train_labels,
            batch_size=args.batch_size,
            epochs=args.epochs,
            verbose=0,
        )
        _, accuracy = model.evaluate(features(test_ids, model), test_labels, verbose=0)
        seconds = time.perf_counter() - start
        print(f"{name:24s} test accuracy {accuracy:6.1%}  ({seconds:.0f} s)", flush=True)
    print(
        f"backend {keras.backend.backend()}; {args.train} training documents, "
        f"{args.epochs} epochs; chance is 50%."
    )


if __name__ == "__main__":
    main()
