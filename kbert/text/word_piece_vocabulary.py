"""Learn a WordPiece vocabulary from a corpus.

Words are counted after `WordPieceTokenizer.split_words` (BERT's basic
tokenization, with the same lower-casing the tokenizer will use), then the
vocabulary is learned by tensorflow-text's WordPiece learner
(`tensorflow_text.tools.wordpiece_vocab`, the algorithm behind its
`bert_vocab_from_dataset`). That helper is not called directly: it splits
words with tensorflow-text's own `BasicTokenizer`, which case-folds ("ß"
becomes "ss") where BERT lower-cases, and its learner skips words over 50
characters and characters beyond the 1,000 most frequent. Here every character
seen is in the vocabulary, as a word start and as a `##` continuation, so any
text made of those characters has a segmentation and never becomes `[UNK]`
(unless it is a word longer than the tokenizer's `max_chars_per_word`).
"""

import collections
import math

from kbert.backend.imports import quiet_import
from kbert.text.word_piece_tokenizer import WordPieceTokenizer

tf = quiet_import("tensorflow")
_learner = quiet_import("tensorflow_text.tools.wordpiece_vocab.wordpiece_tokenizer_learner_lib")

_BATCH_SIZE = 512
# The learner's defaults (tensorflow-text `wordpiece_tokenizer_learner_lib.learn`).
_MAX_PIECE_LENGTH = 50
_ITERATIONS = 4
_SLACK = 0.05
# A piece must be seen at least this often to be learned.
_MIN_COUNT = 2


def _batches(texts):
    """Batches of strings (`tf.string` tensors of shape `(n,)`) from the corpus."""
    if isinstance(texts, tf.data.Dataset):
        spec = texts.element_spec
        is_strings = isinstance(spec, tf.TensorSpec) and spec.dtype == tf.string
        if not is_strings or spec.shape.rank not in (0, 1):
            raise ValueError(
                "The dataset must hold strings (scalars or 1-D batches). "
                f"Received element_spec {spec}."
            )
        yield from texts.batch(_BATCH_SIZE) if spec.shape.rank == 0 else texts
        return
    if isinstance(texts, str):
        raise ValueError("`texts` must be an iterable of strings, not one string.")
    batch = []
    for text in texts:
        if not isinstance(text, str):
            raise ValueError(f"`texts` must hold strings. Received a {type(text).__name__}.")
        batch.append(text)
        if len(batch) == _BATCH_SIZE:
            yield tf.constant(batch)
            batch = []
    if batch:
        yield tf.constant(batch)


def _count_words(texts, tokenizer):
    # Eager calls: no tracing cost, and TensorFlow runs each op on all cores.
    counts = collections.Counter()
    for batch in _batches(texts):
        counts.update(tokenizer.split_words(batch).flat_values.numpy())
    return {word.decode("utf-8"): count for word, count in counts.items()}


def _learn(counts, vocabulary_size, reserved_tokens):
    """tensorflow-text's WordPiece learner, with a faster threshold search.

    The learner keeps the pieces seen at least `threshold` times; its own
    `learn` bisects the threshold between 1 and the largest count, one full
    learning pass per step. Here the lowest threshold is tried first (small
    corpora stop there) and the search then bisects the logarithm of the
    threshold: on 5 MB of English docstrings, 7 passes instead of 17.
    """
    params = _learner.Params(
        upper_thresh=None,
        lower_thresh=_MIN_COUNT,
        num_iterations=_ITERATIONS,
        max_input_tokens=None,
        max_token_length=_MAX_PIECE_LENGTH,
        max_unique_chars=None,
        vocab_size=vocabulary_size,
        slack_ratio=_SLACK,
        include_joiner_token=True,
        joiner="##",
        reserved_tokens=reserved_tokens,
    )
    words = _learner.get_input_words(counts.items(), reserved_tokens, _MAX_PIECE_LENGTH)
    low, high = _MIN_COUNT, max(counts.values())
    vocabulary = _learner.learn_with_thresh(words, low, params)
    if len(vocabulary) <= vocabulary_size:
        return vocabulary
    # The threshold `low` gives too many pieces; `vocabulary` is the largest
    # one found that fits (or, until one does, the one of `low`, cut later).
    while high - low > 1:
        threshold = min(high - 1, max(low + 1, round(math.sqrt(low * high))))
        candidate = _learner.learn_with_thresh(words, threshold, params)
        if len(candidate) > vocabulary_size:
            low = threshold
            continue
        high, vocabulary = threshold, candidate
        if len(candidate) >= (1 - _SLACK) * vocabulary_size:
            break
    return vocabulary


def learn_word_piece_vocabulary(
    texts,
    vocabulary_size,
    lowercase=True,
    reserved_tokens=("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"),
):
    """Learn a WordPiece vocabulary (a list of tokens) from texts.

    Args:
        texts: an iterable of strings (a list, a generator), or a
            `tf.data.Dataset` of strings (scalars or batches).
        vocabulary_size: the most tokens to return. It must leave room for the
            reserved tokens and for every character seen, twice (as a word
            start and as a `##` continuation).
        lowercase: learn from lower-cased, accent-stripped text (BERT
            "uncased"); use the same value for `WordPieceTokenizer`.
        reserved_tokens: the first tokens, in order. They must include
            `[PAD] [UNK] [CLS] [SEP] [MASK]`.

    Returns:
        A list of at most `vocabulary_size` tokens: the reserved tokens, every
        character seen, their `##` forms, then learned pieces by decreasing
        frequency. It is shorter when the corpus has fewer pieces seen at
        least twice.

    Example:

    >>> vocabulary = learn_word_piece_vocabulary(["The cat sat on the mat."] * 20, 40)
    >>> vocabulary[:5]
    ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']
    >>> tokenizer = WordPieceTokenizer(vocabulary)
    >>> tokenizer.detokenize(tokenizer("The mat sat."))
    'the mat sat.'
    """
    reserved_tokens = list(reserved_tokens)
    if len(set(reserved_tokens)) != len(reserved_tokens):
        raise ValueError(f"`reserved_tokens` has duplicates: {reserved_tokens}.")
    # Checks that the reserved tokens include the special tokens.
    tokenizer = WordPieceTokenizer(reserved_tokens, lowercase=lowercase)
    # Reserved tokens written in the text are words of their own: nothing to learn.
    counts = {w: c for w, c in _count_words(texts, tokenizer).items() if w not in reserved_tokens}
    if not counts:
        raise ValueError("The corpus is empty: it has no words to learn a vocabulary from.")

    characters = sorted({char for word in counts for char in word})
    coverage = [c for c in characters if c not in reserved_tokens]
    coverage += ["##" + c for c in characters if "##" + c not in reserved_tokens]
    minimum = len(reserved_tokens) + len(coverage)
    if vocabulary_size < minimum:
        raise ValueError(
            f"`vocabulary_size`={vocabulary_size} is too small: the reserved tokens and the "
            f"{len(characters)} distinct characters of the corpus (with their ## forms) "
            f"need {minimum}."
        )
    learned = _learn(counts, vocabulary_size, reserved_tokens)
    covered = set(coverage)
    pieces = [t for t in learned[len(reserved_tokens) :] if t not in covered]
    return reserved_tokens + coverage + pieces[: vocabulary_size - minimum]
