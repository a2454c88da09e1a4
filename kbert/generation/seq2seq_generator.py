"""The decoding loop of encoder-decoder models, as one compiled loop with static shapes.

Why not keras-hub's samplers: they drive decoder-only `CausalLM`s through a
prompt buffer and a single `call_with_cache` function; an encoder-decoder
needs the encoder output and the per-layer cross-attention caches beside the
self-attention cache, per-sequence stopping at EOS and beam reordering of all
of them, so the loop is written here against the small interface of
`kbert.models.T5` (`encode`, `decode`, `cross_attention_caches`,
`self_attention_caches`, `decode_step`). The loop itself and the samplers
are shared with `CausalLMGenerator` (`kbert.generation.generator`,
`kbert.generation.samplers`).
"""

from keras import ops

from kbert.backend.ops import take_indices
from kbert.generation.generator import Generator


class Seq2SeqGenerator(Generator):
    """Generates target token ids from encoder inputs with a `kbert.models.T5`.

    `kbert.tasks.Seq2SeqLM.generate` builds and keeps these for its backbone.

    One `keras.ops.while_loop` over a fixed-size buffer of `max_new_tokens`
    (XLA-compiled on TensorFlow and JAX, a Python loop under `torch.no_grad`
    on PyTorch, with the model's step compiled by `torch.compile` when
    `jit_compile=True`), stopping when every sequence has produced `end_id`; after its
    end id a sequence is padded with `pad_id`. With `use_cache` each step runs
    the decoder on one token against per-layer key/value caches (cross-attention
    keys and values are projected once); without it each step re-runs the
    decoder over the whole buffer (causally masked), which is the baseline the
    cache is measured against.

    Strategies (docs/algorithms.md §17): `"greedy"` (argmax); `"sample"`, from
    `softmax(logits / temperature)` after keeping the `top_k` largest logits
    and then the smallest set of most likely tokens whose mass reaches
    `top_p` (the reference order: temperature, top-k, top-p); `"beam"`, a
    fixed-width beam search of `num_beams` beams where finished beams stay in
    the beam at no further cost, and the best final beam maximises
    `log p / length ** length_penalty`.

    Args:
        model: a `kbert.models.T5` (or any model with its generation interface).
        max_new_tokens: length of the generated buffer.
        strategy: one of `kbert.generation.STRATEGIES`.
        temperature, top_k, top_p: sampling options.
        num_beams, length_penalty: beam-search options.
        use_cache: incremental decoding with key/value caches.
        jit_compile: `"auto"` (default) compiles the loop with XLA on
            TensorFlow and JAX and runs eagerly on PyTorch; `True` on PyTorch
            also compiles the cached decoder step with `torch.compile`
            (inductor), which removes the per-layer Python overhead of eager
            decoding but pays about a minute of compilation on CPU for
            t5_small at the first call (and again for a new batch size).
        seed: seed of the sampling `keras.random.SeedGenerator`.
        start_id, end_id, pad_id: default to the model's `decoder_start_id`,
            `end_id` and `pad_id` (T5: 0, 1, 0; BART: 2, 2, 1).

    Call arguments:
        inputs: dict with `encoder_token_ids` and `encoder_padding_mask`, `(batch, length)`.

    Returns:
        int32 NumPy `(batch, max_new_tokens)`, the start id excluded.

    Example:
    ```python
    generator = Seq2SeqGenerator(kbert.models.t5_small(), max_new_tokens=32)
    ids = generator({"encoder_token_ids": ids, "encoder_padding_mask": mask})
    ```
    """

    INTERFACE = (
        "encode",
        "decode",
        "cross_attention_caches",
        "self_attention_caches",
        "decode_step",
        "decoder_start_id",
    )
    MODEL_KIND = "an encoder-decoder backbone such as kbert.models.T5"

    def __init__(self, model, max_new_tokens=64, start_id=None, **options):
        self.start_id = None if start_id is None else int(start_id)
        super().__init__(model, max_new_tokens=max_new_tokens, **options)
        if self.start_id is None:
            self.start_id = model.decoder_start_id
        self._decode_step = self._compiled_step("decode_step")

    def __call__(self, inputs):
        return self._run(*self._read_inputs(inputs, ("encoder_token_ids", "encoder_padding_mask")))

    # --- The loop ---------------------------------------------------------------

    def _generate(self, seed_state, token_ids, padding_mask):
        model, steps, beams = self.model, self.max_new_tokens, self.num_beams
        encoder_outputs = model.encode(token_ids, padding_mask)
        if beams > 1:
            encoder_outputs = ops.repeat(encoder_outputs, beams, axis=0)
            padding_mask = ops.repeat(padding_mask, beams, axis=0)
        # Bool once here, rather than cast in every cross-attention layer at every step.
        padding_mask = ops.cast(padding_mask, "bool")
        rows = ops.shape(encoder_outputs)[0]
        tokens = ops.concatenate(
            [
                ops.full((rows, 1), self.start_id, "int32"),
                ops.full((rows, steps), self.pad_id, "int32"),
            ],
            axis=1,
        )
        if self.use_cache:
            cross_caches = model.cross_attention_caches(encoder_outputs)
            caches = model.self_attention_caches(rows, steps)
        else:
            caches = ()

        def next_logits(index, tokens, caches):
            if self.use_cache:
                current = take_indices(tokens, index, axis=1)
                return self._decode_step(current, index, caches, cross_caches, padding_mask)
            decoder_ids = tokens[:, :steps]
            logits = model.decode(
                decoder_ids, ops.ones_like(decoder_ids), encoder_outputs, padding_mask
            )
            return ops.take(logits, index, axis=1), caches

        return self._decode(next_logits, tokens, caches, 1, seed_state)
