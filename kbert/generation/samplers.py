"""How the next token is chosen from a step's logits: greedy, sampling, beam search.

The one set of samplers both decoding loops use (`Seq2SeqGenerator` and
`CausalLMGenerator`, through `kbert.generation.generator.Generator`); the
rules are docs/algorithms.md §17's. Every function is written with `keras.ops` on
static shapes, so it runs inside a compiled `while_loop`.

- `filter_logits`: temperature, then top-k, then top-p (the reference's order).
- `next_tokens`: greedy (argmax) or sampled ids.
- `beam_step` and `best_beams`: fixed-width beam search where finished beams
  stay in the beam at no further cost, and the best final beam maximises
  `log p / length ** length_penalty`.

Example:
>>> logits = keras.ops.convert_to_tensor([[0.0, 3.0, 1.0]])
>>> keras.ops.convert_to_numpy(filter_logits(logits, top_k=2))[0].tolist()
[-1000000000.0, 3.0, 1.0]
"""

import keras
import numpy as np
from keras import ops

from kbert.backend.ops import masked_score

STRATEGIES = ("greedy", "sample", "beam")


def filter_logits(logits, temperature=1.0, top_k=None, top_p=None):
    """float32 logits `(rows, vocab)` divided by `temperature`, then limited to the `top_k`
    largest, then to the smallest set of most likely tokens whose mass reaches `top_p`
    (at least one); the others are set to `masked_score("float32")`."""
    logits = logits / temperature
    if top_k is not None:
        kth = ops.top_k(logits, top_k)[0][:, -1:]
        logits = ops.where(logits < kth, masked_score("float32"), logits)
    if top_p is not None and top_p < 1:
        ordered = ops.top_k(logits, ops.shape(logits)[-1])[0]
        probabilities = ops.softmax(ordered, axis=-1)
        # Keep a token while the mass before it is below top_p (at least one).
        keep = (ops.cumsum(probabilities, axis=-1) - probabilities) < top_p
        threshold = ops.min(ops.where(keep, ordered, np.inf), axis=-1, keepdims=True)
        logits = ops.where(logits < threshold, masked_score("float32"), logits)
    return logits


def sample(logits, seed_generator, seed_state):
    """Ids `(rows,)` drawn from `softmax(logits)`, and the seed state after the draw.

    The draw is stateless: `seed_state` is the value of `seed_generator.state`
    carried through the loop, so the function compiles inside it.
    """
    state = seed_generator.state
    with keras.StatelessScope(state_mapping=[(state, seed_state)]) as scope:
        ids = keras.random.categorical(logits, 1, seed=seed_generator)[:, 0]
        seed_state = scope.get_current_value(state)
    return ids, seed_state


def next_tokens(logits, seed_state, seed_generator, strategy="greedy", **filters):
    """Greedy (`strategy="greedy"`) or sampled ids `(rows,)` from float32 logits `(rows, vocab)`.

    `filters` are `filter_logits`' `temperature`, `top_k` and `top_p`.
    Returns `(ids, seed_state)`.
    """
    if strategy == "greedy":
        return ops.argmax(logits, axis=-1), seed_state
    return sample(filter_logits(logits, **filters), seed_generator, seed_state)


def beam_step(logits, scores, finished, num_beams, pad_id):
    """One beam-search step over `rows = batch * num_beams` rows.

    Args:
        logits: float32 `(rows, vocab)`.
        scores: the beams' log probabilities `(batch, num_beams)`.
        finished: bool `(rows,)`; a finished beam continues with `pad_id` at no cost.

    Returns:
        `(order (rows,), next ids (rows,), scores (batch, num_beams))`: the rows
        the new beams continue (to reorder the tokens and caches by), their
        next ids, and their scores.
    """
    vocabulary = ops.shape(logits)[-1]
    log_probabilities = ops.log_softmax(logits, axis=-1)
    padding_row = ops.where(ops.arange(vocabulary) == pad_id, 0.0, masked_score("float32"))
    log_probabilities = ops.where(
        finished[:, None], ops.cast(padding_row, "float32")[None, :], log_probabilities
    )
    candidates = ops.reshape(scores, (-1, 1)) + log_probabilities
    candidates = ops.reshape(candidates, (-1, num_beams * vocabulary))
    scores, flat = ops.top_k(candidates, num_beams)
    source_beam = flat // vocabulary
    next_ids = ops.reshape(flat % vocabulary, (-1,))
    batch = ops.shape(scores)[0]
    order = ops.reshape(ops.arange(batch)[:, None] * num_beams + source_beam, (-1,))
    return order, next_ids, scores


def initial_beam_scores(batch, num_beams):
    """`(batch, num_beams)` scores where only the first beam of each row is live."""
    return ops.tile(
        ops.convert_to_tensor([[0.0] + [masked_score("float32")] * (num_beams - 1)], "float32"), (batch, 1)
    )


def best_beams(tokens, scores, num_beams, end_id, length_penalty=1.0):
    """The beam with the best `score / length ** length_penalty` per row.

    Args:
        tokens: generated ids `(batch * num_beams, steps)`; a beam's length
            runs to its first `end_id` included, or is `steps`.
        scores: `(batch, num_beams)`.

    Returns:
        `(batch, steps)`.
    """
    steps = ops.shape(tokens)[1]
    is_end = ops.equal(tokens, end_id)
    first_end = ops.argmax(ops.cast(is_end, "int32"), axis=-1)
    lengths = ops.where(ops.any(is_end, axis=-1), first_end + 1, steps)
    lengths = ops.reshape(ops.cast(lengths, "float32"), (-1, num_beams))
    best = ops.argmax(scores / lengths**length_penalty, axis=-1)
    tokens = ops.reshape(tokens, (-1, num_beams, steps))
    return ops.take_along_axis(tokens, best[:, None, None], axis=1)[:, 0, :]
