"""BERT's WordPiece tokenizer on tensorflow-text, id-for-id with Hugging Face.

Why not `keras_hub.tokenizers.WordPieceTokenizer`: it does not give the ids of
Hugging Face's `BertTokenizerFast` (the reference every public BERT checkpoint
is used with). It case-folds instead of lower-casing (German "ß" becomes "ss"),
splits words at control and format characters (U+0007, U+200B) where BERT
deletes them, limits words by bytes where BERT counts characters, and by
default reads "[MASK]" in a text as punctuation and letters. This tokenizer
follows the reference step by step instead, with the rules of `tokenizers`'
`BertNormalizer`, `BertPreTokenizer` and `WordPiece`:

0. Special tokens written in the text (`[MASK]`, `[SEP]`, ..., matched exactly,
   even inside a word) are words of their own and keep their ids, as Hugging
   Face's added tokens do: "The [MASK] sat." has the mask id. The rest of the
   text goes through steps 1-6.
1. Clean: delete U+0000, U+FFFD and control characters (categories Cc, Cf and
   Co, except tab, newline and carriage return); every whitespace character
   (tab, newline, carriage return and category Z) separates words.
2. Chinese characters (the CJK ideograph blocks below) become words of their
   own, when `split_on_cjk`.
3. Strip accents, when `strip_accents`: NFD, then delete nonspacing marks (Mn).
4. Lower-case, when `lowercase`: the context-free Unicode lower-case mapping of
   each character (so "Σ" is always "σ", never the final "ς").
5. Punctuation (every Unicode P* character and all ASCII symbols, so "$", "+"
   and "`" too) becomes words of its own.
6. WordPiece: greedy longest-match-first, continuation pieces prefixed "##"; a
   word that cannot be segmented, or that has more than `max_chars_per_word`
   characters, becomes `[UNK]`.

The only known differences with the reference are in Unicode tables: the
`tokenizers` library classifies punctuation, control characters and
nonspacing marks with an older Unicode version, so a few characters assigned
since (for example the punctuation at U+2E43..U+2E5D) are treated differently.
The CJK ranges are those of `tokenizers` (which start the last extension block
at U+2B920, where Google's original Python tokenizer has U+2B820).

Everything in `tokenize` is a TensorFlow op, so it runs inside
`tf.data.Dataset.map` whatever the Keras backend. TensorFlow is imported at
the first tokenization, not when the tokenizer is built: under JAX or PyTorch
the text-level calls tokenize on the host instead (`HostWordPiece`, the same
rules in Hugging Face's `tokenizers`), and never import it.
"""

import functools
import os
import re

import numpy as np

from kbert.backend.imports import lazy_import
from kbert.text.character_offsets import character_offsets

tf = lazy_import("tensorflow")
tf_text = lazy_import("tensorflow_text")

# Control characters BERT deletes (Cc minus tab, newline and carriage return,
# plus Cf and Co), and the replacement character U+FFFD.
_CONTROL = r"[\x00-\x08\x0B\x0C\x0E-\x1F\x7F-\x9F\p{Cf}\p{Co}\x{FFFD}]"
_WHITESPACE = r"[\t\n\r\p{Z}]"
# ASCII 33-47, 58-64, 91-96 and 123-126, and every Unicode punctuation character.
_PUNCTUATION = r"[!-/:-@\[-`{-~\p{P}]"
_CJK = (
    r"[\x{3400}-\x{4DBF}\x{4E00}-\x{9FFF}\x{F900}-\x{FAFF}\x{20000}-\x{2A6DF}"
    r"\x{2A700}-\x{2B81F}\x{2B920}-\x{2CEAF}\x{2F800}-\x{2FA1F}]"
)
_SPECIAL_TOKENS = {
    "pad_id": "[PAD]",
    "cls_id": "[CLS]",
    "sep_id": "[SEP]",
    "mask_id": "[MASK]",
}
_CONTINUATION = "##"


def _byte_length(strings):
    return tf.cast(tf.strings.length(strings), tf.int64)


def _read_vocabulary(vocabulary):
    if isinstance(vocabulary, (str, os.PathLike)):
        path = os.fspath(vocabulary)
        if not os.path.isfile(path):
            raise ValueError(f"Vocabulary file not found: {path!r}.")
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        if lines[-1] == "":
            lines.pop()
        return [line[:-1] if line.endswith("\r") else line for line in lines]
    if isinstance(vocabulary, (list, tuple)) and all(isinstance(t, str) for t in vocabulary):
        return list(vocabulary)
    raise ValueError(
        "`vocabulary` must be the path of a vocab.txt file or a list of token strings. "
        f"Received: {type(vocabulary).__name__}."
    )


class WordPieceTokenizer:
    """BERT's WordPiece tokenizer: text to token ids, as Hugging Face's `BertTokenizerFast`.

    Args:
        vocabulary: path of a `vocab.txt` (one token per line, the id is the
            line number) or a list of tokens. It must hold `[PAD]`, `[CLS]`,
            `[SEP]`, `[MASK]` and the unknown token.
        lowercase: lower-case the text (BERT "uncased").
        strip_accents: remove accents (NFD, then drop nonspacing marks).
            `None` means the same as `lowercase`, as in BERT.
        split_on_cjk: make every CJK ideograph a word of its own.
        max_chars_per_word: longer words become the unknown token.
        unknown_token: the token for words with no segmentation.

    Example:

    >>> tokenizer = WordPieceTokenizer(
    ...     ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "##s", "!"])
    >>> tokenizer(["The cats!", "dogs"])
    [[5, 6, 7, 8], [1]]
    >>> tokenizer.detokenize([5, 6, 7, 8])
    'the cats!'
    """

    def __init__(
        self,
        vocabulary,
        lowercase=True,
        strip_accents=None,
        split_on_cjk=True,
        max_chars_per_word=100,
        unknown_token="[UNK]",
    ):
        tokens = _read_vocabulary(vocabulary)
        if not tokens:
            raise ValueError("The vocabulary is empty.")
        if int(max_chars_per_word) < 1:
            raise ValueError(
                f"`max_chars_per_word` must be at least 1. Received: {max_chars_per_word}."
            )
        ids = {}
        for index, token in enumerate(tokens):
            if not token:
                raise ValueError(f"The vocabulary has an empty token at line {index + 1}.")
            if token in ids:
                raise ValueError(
                    f"The vocabulary has the token {token!r} twice "
                    f"(lines {ids[token] + 1} and {index + 1})."
                )
            ids[token] = index
        required = dict(_SPECIAL_TOKENS, unknown_id=unknown_token)
        missing = [token for token in required.values() if token not in ids]
        if missing:
            raise ValueError(f"The vocabulary lacks the special token(s) {', '.join(missing)}.")

        self.lowercase = bool(lowercase)
        self.strip_accents = self.lowercase if strip_accents is None else bool(strip_accents)
        self.split_on_cjk = bool(split_on_cjk)
        self.max_chars_per_word = int(max_chars_per_word)
        self.unknown_token = unknown_token
        self._tokens = tokens
        self._ids = ids
        for name, token in required.items():
            setattr(self, name, ids[token])
        # Longest first: RE2 takes the first alternative that matches.
        specials = sorted(required.values(), key=len, reverse=True)
        self._special = "|".join(re.escape(token) for token in specials)
        if self.split_on_cjk:
            self._separate = "|".join([_WHITESPACE, _PUNCTUATION, _CJK])
            self._keep = "|".join([_PUNCTUATION, _CJK])
        else:
            self._separate = "|".join([_WHITESPACE, _PUNCTUATION])
            self._keep = _PUNCTUATION

    @functools.cached_property
    def _word_piece(self):
        """The WordPiece op, built at the first tokenization (it imports TensorFlow), eagerly even
        when that is inside a `tf.data` function's trace, as it was in `__init__`."""
        with tf.init_scope():
            # Words are limited in characters here (as BERT does), so the byte limit
            # of the op only has to let every such word through (4 bytes a character).
            return tf_text.FastWordpieceTokenizer(
                vocab=self._tokens,
                suffix_indicator=_CONTINUATION,
                max_bytes_per_word=4 * self.max_chars_per_word,
                token_out_type=tf.int32,
                unknown_token=self.unknown_token,
                no_pretokenization=True,
            )

    @property
    def vocabulary(self):
        """The tokens, in id order (a new list)."""
        return list(self._tokens)

    @property
    def vocabulary_size(self):
        return len(self._tokens)

    def token_to_id(self, token):
        if token not in self._ids:
            raise ValueError(f"Token {token!r} is not in the vocabulary.")
        return self._ids[token]

    def id_to_token(self, token_id):
        token_id = int(token_id)
        if not 0 <= token_id < len(self._tokens):
            raise ValueError(
                f"Token id {token_id} is outside the vocabulary [0, {len(self._tokens)})."
            )
        return self._tokens[token_id]

    def continuation_mask(self):
        """Bool NumPy array over the vocabulary: True for `##` continuation pieces."""
        return np.array(
            [len(t) > len(_CONTINUATION) and t.startswith(_CONTINUATION) for t in self._tokens],
            dtype=bool,
        )

    def get_config(self):
        """The constructor's arguments, the vocabulary as a list: JSON that rebuilds the tokenizer.

        >>> tokenizer = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"])
        >>> WordPieceTokenizer(**tokenizer.get_config())("A a")
        [5, 5]
        """
        return {
            "vocabulary": self.vocabulary,
            "lowercase": self.lowercase,
            "strip_accents": self.strip_accents,
            "split_on_cjk": self.split_on_cjk,
            "max_chars_per_word": self.max_chars_per_word,
            "unknown_token": self.unknown_token,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def save_vocabulary(self, path):
        """Write the vocabulary as a `vocab.txt`: one token per line, in id order."""
        with open(path, "w", encoding="utf-8") as f:
            f.write("".join(token + "\n" for token in self._tokens))

    def _normalize(self, text):
        """Steps 1, 3 and 4 (delete control characters, strip accents, lower-case) on a
        flat `tf.string` tensor; each step maps every character on its own."""
        text = tf.strings.regex_replace(text, _CONTROL, "")
        if self.strip_accents:
            text = tf_text.normalize_utf8(text, "NFD")
            text = tf.strings.regex_replace(text, r"\p{Mn}", "")
        if self.lowercase:
            # ICU lower-cases a word-final capital sigma to "ς"; BERT maps each
            # character on its own, which always gives "σ".
            text = tf.strings.regex_replace(text, "Σ", "σ")
            text = tf.strings.lower(text, encoding="utf-8")
        return text

    def _special_chunks(self, strings):
        """`(chunks, is_special, starts)`: the strings cut around special tokens (step 0).

        `chunks` is a `tf.RaggedTensor` `(n, None)`; `is_special` and `starts`
        (byte offsets into the strings) are flat, one entry per chunk.
        """
        # `regex_split` stops at U+0000; it is deleted by `_normalize` anyway, like U+0001.
        strings = tf.strings.regex_replace(strings, r"\x00", "\x01")
        chunks, starts, _ = tf_text.regex_split_with_offsets(strings, self._special, self._special)
        is_special = tf.strings.regex_full_match(chunks.flat_values, self._special)
        return chunks, is_special, starts.flat_values

    def split_words(self, strings):
        """BERT's basic tokenization (steps 0-5 of the module docstring), graph-safe.

        Args:
            strings: `tf.string` tensor of shape `(n,)`.

        Returns:
            `tf.RaggedTensor` of words, shape `(n, None)`.
        """
        chunks, is_special, _ = self._special_chunks(strings)
        # Special tokens in the raw text are words of their own, left as they are.
        text = tf.where(is_special, chunks.flat_values, self._normalize(chunks.flat_values))
        words, _ = self._words_with_offsets(text, is_special)
        return chunks.with_flat_values(words).merge_dims(1, 2)

    def _flat_strings(self, strings):
        """`(strings as a 1-D tf.string tensor, input rank)`, checked."""
        strings = tf.convert_to_tensor(strings)
        if strings.dtype != tf.string:
            raise ValueError(f"`tokenize` takes strings. Received dtype {strings.dtype.name}.")
        rank = strings.shape.rank
        if rank not in (0, 1):
            raise ValueError(
                "`tokenize` takes a scalar or a 1-D batch of strings. "
                f"Received shape {strings.shape}."
            )
        return tf.reshape(strings, [-1]), rank

    def _unknown_if_too_long(self, words):
        """`(words, too_long)`: ragged words with those over `max_chars_per_word`
        (special tokens aside) replaced by the unknown token, and the flat bool mask."""
        flat = words.flat_values
        too_long = tf.strings.length(flat, unit="UTF8_CHAR") > self.max_chars_per_word
        too_long &= ~tf.strings.regex_full_match(flat, self._special)
        return words.with_flat_values(tf.where(too_long, self.unknown_token, flat)), too_long

    def tokenize(self, strings):
        """Token ids of strings, with TensorFlow ops only (usable in `tf.data.Dataset.map`).

        Args:
            strings: `tf.string` tensor (or anything convertible) of shape `(n,)`,
                or a scalar.

        Returns:
            int32 `tf.RaggedTensor` of shape `(n, None)`; a 1-D int32 tensor for
            a scalar input.
        """
        strings, rank = self._flat_strings(strings)
        words, _ = self._unknown_if_too_long(self.split_words(strings))
        ids = self._word_piece.tokenize(words).merge_dims(1, 2)
        return ids[0] if rank == 0 else ids

    def tokenize_with_offsets(self, strings):
        """Token ids, and the character span of each token in the original string.

        The span `[start, end)` counts characters (code points, as Python's
        `str` indexing) of the string as given, before any normalization: a
        continuation piece spans only its own characters (not the `##`), an
        unknown token spans its whole word, an accent stripped or a control
        character deleted inside a token is covered by its span, and a
        special token written in the text spans its text. The spans are those
        of Hugging Face's `BertTokenizerFast` `offset_mapping`.

        Each character is normalized on its own to keep track of where it came
        from; that gives the ids of `tokenize` for every text but one holding
        several combining marks in non-canonical order (which NFD would have
        reordered) when accents are stripped.

        Args:
            strings: `tf.string` tensor of shape `(n,)`, or a scalar.

        Returns:
            `(ids, starts, ends)`: int32 `tf.RaggedTensor`s of shape `(n, None)`
            (1-D tensors for a scalar input).

        Example:

        >>> tokenizer = WordPieceTokenizer(
        ...     ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "cafe", "the", "cat", "##s", "!"])
        >>> ids, starts, ends = tokenizer.tokenize_with_offsets(["The CATS! Café"])
        >>> ids.to_list(), starts.to_list(), ends.to_list()
        ([[6, 7, 8, 9, 5]], [[0, 4, 7, 8, 10]], [[3, 7, 8, 9, 14]])
        """
        strings, rank = self._flat_strings(strings)
        chunks, is_special, chunk_starts = self._special_chunks(strings)
        chars, char_starts = tf.strings.unicode_split_with_offsets(chunks.flat_values, "UTF-8")
        char_chunk = chars.value_rowids()
        # Every character normalized alone; special tokens kept as they are.
        normalized = tf.where(
            tf.gather(is_special, char_chunk), chars.flat_values, self._normalize(chars.flat_values)
        )
        text = tf.strings.reduce_join(chars.with_flat_values(normalized), axis=1)
        words, word_starts = self._words_with_offsets(text, is_special)
        word_ends = word_starts.flat_values + _byte_length(words.flat_values)
        words, too_long = self._unknown_if_too_long(words)
        ids, starts, ends = self._word_piece.tokenize_with_offsets(words)
        piece_word = ids.values.value_rowids()
        word_start = tf.gather(word_starts.flat_values, piece_word)
        word_end = tf.gather(word_ends, piece_word)
        # A word over the length limit: its unknown token spans the whole word.
        too_long = tf.gather(too_long, piece_word)
        starts = word_start + tf.where(too_long, tf.zeros_like(word_start), starts.flat_values)
        ends = tf.where(too_long, word_end, word_start + ends.flat_values)

        # Normalized bytes back to the characters they came from.
        text_base = tf.cumsum(_byte_length(text), exclusive=True)
        base = tf.gather(text_base, tf.gather(words.value_rowids(), piece_word))
        normalized_ends = tf.cumsum(_byte_length(normalized))
        first = tf.searchsorted(normalized_ends, base + starts, side="right", out_type=tf.int64)
        last = tf.searchsorted(normalized_ends, base + ends - 1, side="right", out_type=tf.int64)
        raw_starts = char_starts.flat_values + tf.gather(chunk_starts, char_chunk)
        raw_ends = raw_starts + _byte_length(chars.flat_values)

        ids = chunks.with_flat_values(ids.merge_dims(1, 2)).merge_dims(1, 2)
        starts = character_offsets(strings, ids.with_flat_values(tf.gather(raw_starts, first)))
        ends = character_offsets(strings, ids.with_flat_values(tf.gather(raw_ends, last)))
        if rank == 0:
            return ids[0], starts[0], ends[0]
        return ids, starts, ends

    def _words_with_offsets(self, text, is_special):
        """Words of normalized chunks (flat `text`), and their byte offsets into them.

        Ragged `(chunks, None)`: a special chunk is one word, the others are
        split at white space, punctuation and CJK characters (steps 2 and 5).
        """
        words, starts, _ = tf_text.regex_split_with_offsets(
            tf.where(is_special, "", text), self._separate, self._keep
        )
        lengths = tf.cast(is_special, tf.int64)
        special = tf.RaggedTensor.from_row_lengths(tf.boolean_mask(text, is_special), lengths)
        special_starts = special.with_flat_values(tf.zeros_like(special.flat_values, tf.int64))
        return tf.concat([words, special], axis=1), tf.concat([starts, special_starts], axis=1)

    def __call__(self, texts):
        """Token ids (Python lists) of a string or a list of strings."""
        if isinstance(texts, str):
            return self.tokenize(tf.constant([texts])).to_list()[0]
        texts = list(texts)
        if not all(isinstance(t, str) for t in texts):
            raise ValueError("The tokenizer takes a string or a list of strings.")
        return self.tokenize(tf.constant(texts, dtype=tf.string)).to_list()

    def detokenize(self, ids):
        """Text from token ids: one sequence of ids, or a batch of them.

        Pieces are joined with spaces, `##` continuations are glued to the
        piece before, `[PAD]` is dropped (other special tokens are kept), and
        the spaces before `. , ? !` and English contractions (`'s`, `n't`, ...)
        are removed, as Hugging Face's `decode(ids, clean_up_tokenization_spaces=True)`
        does. Lower-casing and accent stripping cannot be undone.

        Args:
            ids: a list of ids, a list of such lists, or a tensor / array of them
                (`tf.RaggedTensor` included).

        Returns:
            A string for one sequence, a list of strings for a batch.
        """
        if hasattr(ids, "to_list"):
            ids = ids.to_list()
        elif not isinstance(ids, (list, tuple)):
            ids = np.asarray(ids).tolist()
        if all(isinstance(i, (int, np.integer)) for i in ids):
            return self._detokenize_one(ids)
        return [self._detokenize_one(sequence) for sequence in ids]

    def _detokenize_one(self, ids):
        words = []
        for token_id in ids:
            if token_id == self.pad_id:
                continue
            token = self.id_to_token(token_id)
            if words and len(token) > len(_CONTINUATION) and token.startswith(_CONTINUATION):
                words[-1] += token[len(_CONTINUATION) :]
            else:
                words.append(token)
        text = " ".join(words)
        # Hugging Face's `clean_up_tokenization`.
        for spaced, joined in (
            (" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"),
            (" n't", "n't"), (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"),
        ):  # fmt: skip
            text = text.replace(spaced, joined)
        return text
