"""The pretraining optimizers: AdamW or LAMB with warm-up/decay, clipping and selective decay.

`create_optimizer` configures them the BERT way: kbert's `AdamW` (Keras'
with the Adam paper's epsilon, fused into one kernel on PyTorch; see
`kbert.training.adam_w`) or Keras' `Lamb`. How they differ from the
reference implementations (docs/algorithms.md §16):

- Weight decay is decoupled in both: before each update Keras applies
  `w ← w − lr·wd·w` to every variable not excluded. Google's BERT AdamW adds
  `wd·w` to the update before multiplying by `lr`, which is the same thing.
  LayerNorm (`gamma`, `beta`) and bias variables are excluded, as in BERT.
- Bias correction: both correct the moments (`m/(1−β1ᵗ)`, `v/(1−β2ᵗ)`), as
  `torch.optim.AdamW` and transformers do; Google's BERT AdamW and ALBERT's
  LAMB do not. The difference fades after a few thousand steps
  (`1/(1−β2)`) and is mostly hidden by warm-up. AdamW adds `epsilon` to
  `√v̂`, after the correction, as PyTorch does.
- LAMB's trust ratio: ALBERT's LAMB computes `u = m/(√v+ε) + wd·w` and
  `w ← w − lr·(‖w‖/‖u‖)·u`, with decay inside the ratio and LayerNorm/bias
  variables excluded from both decay and ratio (their ratio is 1). Keras'
  Lamb applies the ratio `‖w‖/‖m̂/(√v̂+ε)‖` (1 when a norm is 0) to every
  variable, LayerNorm and bias included, and the decay outside it. It is
  used as is: the one requirement that matters for stability, no decay on
  LayerNorm and bias, is met by `exclude_from_weight_decay`.

The exclusion list is not part of an optimizer's Keras config: a model
reloaded from `.keras` with its optimizer should be compiled again with
`create_optimizer` to keep LayerNorm and bias out of the decay.
"""

import keras

from kbert.training.adam_w import AdamW
from kbert.training.warmup_linear_decay import WarmupLinearDecay

OPTIMIZERS = {"adamw": AdamW, "lamb": keras.optimizers.Lamb}

# LayerNorm scale and offset, and every bias (the masked-LM output bias
# included). Keras matches these with `re.search` against the name of the
# variable it updates, which is the short name on JAX and PyTorch ("bias")
# but the TensorFlow variable's name on TensorFlow ("attention/bias:0"), so
# each pattern matches the last path segment exactly: a layer called
# "attention_bias" keeps its kernel decayed.
NO_DECAY_VARIABLE_NAMES = tuple(rf"(^|/){name}(:\d+)?$" for name in ("gamma", "beta", "bias"))


def create_optimizer(
    name="adamw",
    learning_rate=1e-4,
    *,
    total_steps,
    warmup_steps,
    weight_decay=0.01,
    beta_1=0.9,
    beta_2=0.999,
    epsilon=1e-6,
    clipnorm=1.0,
):
    """A BERT pretraining optimizer: AdamW or LAMB, warm-up and linear decay, global clipping.

    The rate follows `WarmupLinearDecay(learning_rate, warmup_steps,
    total_steps)`; gradients are clipped to a global norm of `clipnorm`;
    weight decay skips LayerNorm and bias variables. See the module
    docstring for how Keras' AdamW and Lamb differ from the originals.

    Args:
        name: `"adamw"` (BERT, RoBERTa, ELECTRA) or `"lamb"` (ALBERT, large batches).
        learning_rate: peak learning rate (BERT: 1e-4; ALBERT LAMB: 0.00176).
        total_steps: training steps; the rate reaches 0 there.
        warmup_steps: steps of linear warm-up (BERT: 10k).
        weight_decay: decoupled weight decay rate (0.01).
        beta_1: first-moment decay.
        beta_2: second-moment decay (RoBERTa: 0.98).
        epsilon: added to the root of the second moment (BERT: 1e-6).
        clipnorm: global gradient norm bound; `None` for no clipping.

    Returns:
        A kbert `AdamW` or a `keras.optimizers.Lamb`.

    Example:
    >>> optimizer = create_optimizer("lamb", 1.76e-3, total_steps=125_000, warmup_steps=3_125)
    >>> type(optimizer).__name__, optimizer.global_clipnorm
    ('Lamb', 1.0)
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"Unknown optimizer {name!r}; expected one of {sorted(OPTIMIZERS)}.")
    optimizer = OPTIMIZERS[name](
        learning_rate=WarmupLinearDecay(learning_rate, warmup_steps, total_steps),
        weight_decay=weight_decay,
        beta_1=beta_1,
        beta_2=beta_2,
        epsilon=epsilon,
        global_clipnorm=clipnorm,
    )
    optimizer.exclude_from_weight_decay(var_names=list(NO_DECAY_VARIABLE_NAMES))
    return optimizer
