"""Fine-tuning speed: a bert_base sentence classifier, kbert against its peers, one backend per run.

    KERAS_BACKEND=jax python benchmarks/finetuning.py [--batch 8] [--length 128] [--repeats 3]

The same-size random bert_base with a two-class head is fine-tuned one batch
at a time (`train_on_batch`, dropout on, AdamW with warm-up and linear decay,
gradients clipped to norm 1, weight decay 0.01: BERT's fine-tuning recipe):

- kbert: `kbert.tasks.TextClassifier(bert_base(), num_classes=2)`;
- KerasHub: `keras_hub.models.BertTextClassifier` (Keras' AdamW) on a `BertBackbone` of the
  same size (no preprocessor: the same token ids go in);
- transformers (torch only): `BertForSequenceClassification` with sdpa
  attention and `torch.optim.AdamW`.

After a warm-up step that pays compilation, the systems are timed in turns
and the median of `--repeats` steps is reported as seconds and steps per second, with each system's step time
divided by kbert's (> 1: kbert is faster).
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import kbert  # noqa: E402  (imports Keras quietly)
import keras  # noqa: E402
from encoder_throughput import SIZE, keras_adamw, make_inputs, median_times  # noqa: E402

from kbert.backend.imports import quiet_import  # noqa: E402
from kbert.pretraining import create_optimizer  # noqa: E402

NUM_CLASSES = 2


def _optimizer():
    return create_optimizer("adamw", 2e-5, total_steps=1000, warmup_steps=100)


def kbert_step(inputs, labels):
    model = kbert.tasks.TextClassifier(kbert.models.bert_base(), num_classes=NUM_CLASSES)
    model.compile(optimizer=_optimizer())
    return lambda: model.train_on_batch(inputs, {"labels": labels})


def keras_hub_step(inputs, labels):
    keras_hub = quiet_import("keras_hub")  # it imports TensorFlow: keep its lines quiet
    backbone = keras_hub.models.BertBackbone(max_sequence_length=512, num_segments=2, dropout=0.1, **SIZE)
    model = keras_hub.models.BertTextClassifier(backbone, num_classes=NUM_CLASSES, preprocessor=None)
    model.compile(
        optimizer=keras_adamw(2e-5),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return lambda: model.train_on_batch(inputs, labels)


def transformers_step(inputs, labels):
    import torch
    import transformers

    config = transformers.BertConfig(num_labels=NUM_CLASSES, attn_implementation="sdpa")
    model = transformers.BertForSequenceClassification(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01)
    batch = {
        "input_ids": torch.as_tensor(inputs["token_ids"], dtype=torch.long),
        "token_type_ids": torch.as_tensor(inputs["segment_ids"], dtype=torch.long),
        "attention_mask": torch.as_tensor(inputs["padding_mask"], dtype=torch.long),
        "labels": torch.as_tensor(labels, dtype=torch.long),
    }

    def step():
        optimizer.zero_grad()
        model(**batch).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    return step


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    backend = keras.backend.backend()
    inputs, labels = make_inputs(args.batch, args.length)

    systems = {"kbert TextClassifier": kbert_step, "KerasHub BertTextClassifier": keras_hub_step}
    if backend == "torch":
        systems["transformers BertForSequenceClassification"] = transformers_step
    seconds = median_times({name: make_step(inputs, labels) for name, make_step in systems.items()}, args.repeats)

    ours = seconds["kbert TextClassifier"]
    print(f"\nbert_base fine-tuning, batch {args.batch} x {args.length} tokens, float32, backend {backend}\n")
    print(f"| {'system':<44} | step (s) | steps/s | time vs kbert |")
    print(f"|{'-' * 46}|----------|---------|---------------|")
    for name, step in seconds.items():
        print(f"| {name:<44} | {step:8.3f} | {1 / step:7.3f} | {step / ours:12.2f}x |")


if __name__ == "__main__":
    main()
