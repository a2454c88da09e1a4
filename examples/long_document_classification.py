"""Classify 4096-token documents whose label needs two tokens thousands of positions apart.

    KERAS_BACKEND=jax python examples/long_document_classification.py [--train 1024] [--epochs 3]

Each synthetic document is `[CLS]` followed by 4095 noise tokens drawn from a
small vocabulary, with one key token (A or B) somewhere in positions 1-255 and
a second one (A or B) somewhere in the last 512 positions, more than 3000
tokens later. The label is 1 when the two keys are the same. A BERT limited to
512 tokens sees the first key only, so it cannot beat chance (50%). BigBird
(whose first block, holding `[CLS]`, is global) and Longformer (with `[CLS]`
as its global token) see the whole document and learn the rule. All three are
small (1 layer, hidden 32, blocks and windows of 32) and train on CPU in
minutes; the script prints each one's test accuracy and training time.
"""

import argparse
import time

import keras
import numpy as np

import kbert

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


def make_documents(count, seed):
    """Token ids `(count, LENGTH)` and labels: 1 when the two key tokens match."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(FIRST_NOISE, VOCABULARY, (count, LENGTH)).astype("int32")
    ids[:, 0] = CLS
    first = rng.integers(KEY_A, KEY_B + 1, count)
    second = rng.integers(KEY_A, KEY_B + 1, count)
    rows = np.arange(count)
    ids[rows, rng.integers(1, 256, count)] = first
    ids[rows, rng.integers(LENGTH - SHORT, LENGTH, count)] = second
    return ids, (first == second).astype("int32")


def classifier(backbone, length, learning_rate):
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
        optimizer=keras.optimizers.Adam(learning_rate),
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", type=int, default=1024)
    parser.add_argument("--test", type=int, default=512)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=2e-3)
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    train_ids, train_labels = make_documents(args.train, seed=1)
    test_ids, test_labels = make_documents(args.test, seed=2)

    models = {
        "BERT, first 512 tokens": (kbert.models.Encoder(**SMALL, max_positions=SHORT), SHORT),
        "BigBird, 4096 tokens": (
            kbert.models.Encoder(
                **SMALL,
                max_positions=LENGTH,
                attention="bigbird",
                attention_kwargs={"block_size": 32, "num_random_blocks": 1},
            ),
            LENGTH,
        ),
        "Longformer, 4096 tokens": (
            kbert.models.Encoder(
                **SMALL,
                max_positions=LENGTH,
                attention="longformer",
                attention_kwargs={"window": 32, "max_global_tokens": 1},
            ),
            LENGTH,
        ),
    }
    for name, (backbone, length) in models.items():
        model = classifier(backbone, length, args.learning_rate)
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
