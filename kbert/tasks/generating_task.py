"""The base of the tasks that generate text: one cached generator per set of arguments."""

from kbert.text.length_buckets import bucket_length, bucket_lengths, length_batches
from kbert.training.task import Task


class GeneratingTask(Task):
    """A task whose backbone generates text, through the `kbert.generation` class `GENERATOR`.

    Subclasses set `GENERATOR`; the backbone is checked against it
    (`GENERATOR.check_model`) at construction. `generate` keeps one
    generator per set of arguments, so that later calls reuse its compiled
    loop (and a sampling generator's seed stream goes on).

    Example:
    >>> from kbert.tasks import CausalLM, Seq2SeqLM
    >>> [task.GENERATOR.__name__ for task in (CausalLM, Seq2SeqLM)]
    ['CausalLMGenerator', 'Seq2SeqGenerator']
    """

    GENERATOR = None

    def __init__(self, backbone, **kwargs):
        self.GENERATOR.check_model(backbone)
        super().__init__(dtype=backbone.dtype_policy, **kwargs)
        self.backbone = backbone
        self._generators = {}

    def build(self, input_shape=None):
        """Nothing to build: the backbone is built at construction, and the task adds no layer."""
        self.built = True

    def generate(self, inputs, max_new_tokens=64, strategy="greedy", batch_size=32, **options):
        """Generated ids `(batch, max_new_tokens)` (int32 NumPy) for the prompts in `inputs`; text for text.

        Given a string (or a list of them) and a `preprocessor`, the texts are
        tokenized and framed as the model was trained, and the output up to
        the end id comes back as a string (a list of them). The texts are
        generated in batches of `batch_size` of similar length, each padded to
        its length bucket (`kbert.text.length_buckets`), and come back in order.

        Args:
            inputs: the dict the subclass describes (the prompts, or the encoder
                inputs); or a string, or a list of them.
            max_new_tokens: length of the generated buffer; after its end id a
                row is padded.
            strategy: `"greedy"`, `"sample"` or `"beam"`.
            batch_size: texts per decoding loop, for text inputs (a dict is one batch).
            **options: the other arguments of `GENERATOR` (`temperature`,
                `top_k`, `top_p`, `num_beams`, `seed`, ...).
        """
        if isinstance(inputs, (str, list, tuple)):
            return self._generate_text(inputs, max_new_tokens, strategy, dict(options, batch_size=batch_size))
        key = (max_new_tokens, strategy, tuple(sorted(options.items())))
        if key not in self._generators:
            self._generators[key] = self.GENERATOR(
                self.backbone, max_new_tokens=max_new_tokens, strategy=strategy, **options
            )
        return self._generators[key](inputs)

    def _generate_by_length(self, rows, names, left, max_new_tokens, strategy, options):
        """Generated ids for each id list of `rows`, in order: `options["batch_size"]` rows of similar
        length at a time, padded (on the `left` for prompts) to their bucket, given as the inputs `names`."""
        options = dict(options)
        batch_size = options.pop("batch_size")
        preprocessor = self.preprocessor
        buckets = bucket_lengths(preprocessor.sequence_length)
        generated = [None] * len(rows)
        for batch in length_batches([len(row) for row in rows], batch_size):
            length = bucket_length(max(len(rows[i]) for i in batch), buckets)
            token_ids, padding_mask = preprocessor.pad([rows[i] for i in batch], self.backbone.pad_id, left, length)
            ids = self.generate({names[0]: token_ids, names[1]: padding_mask}, max_new_tokens, strategy, **options)
            for index, row in zip(batch, ids):
                generated[index] = row
        return generated
