"""A `WordPieceTokenizer`'s ids on the host, with Hugging Face's `tokenizers` and no TensorFlow.

`WordPieceTokenizer` is TensorFlow ops (it must run in `tf.data` and in an
exported SavedModel); its rules are those of `tokenizers`' `BertNormalizer`,
`BertPreTokenizer` and `WordPiece`, with its special tokens matched in the
raw text as added tokens. `HostWordPiece` builds that `tokenizers.Tokenizer`
from the same settings, so that the text-level inference calls under JAX or
PyTorch (`TextPreprocessor.encode`, `kbert predict`) tokenize without
importing TensorFlow (about 3 s of a process's start-up). The ids are the
same, but for the Unicode-table differences `WordPieceTokenizer` lists
(`tests/text/test_host_word_piece.py` compares the two).
"""

# The ids of the tokens `WordPieceTokenizer` keeps whole where the raw text has them.
_SPECIAL_IDS = ("pad_id", "cls_id", "sep_id", "mask_id", "unknown_id")


class HostWordPiece:
    """A `WordPieceTokenizer`'s `tokenize`, in `tokenizers` (Rust) on the host: lists of ids.

    Args:
        tokenizer: the `kbert.text.WordPieceTokenizer` whose vocabulary and
            settings (`lowercase`, `strip_accents`, `split_on_cjk`,
            `max_chars_per_word`, `unknown_token`) to follow.

    Example:

    >>> from kbert.text import WordPieceTokenizer
    >>> tokenizer = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "##s", "!"])
    >>> HostWordPiece(tokenizer)(["The cats!", "the [MASK] dogs"])
    [[5, 6, 7, 8], [5, 4, 1]]
    >>> HostWordPiece(tokenizer).tokenize_with_offsets(["The cats!"])
    ([[5, 6, 7, 8]], [[0, 4, 7, 8]], [[3, 7, 8, 9]])
    """

    def __init__(self, tokenizer):
        from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers

        vocabulary = {token: index for index, token in enumerate(tokenizer.vocabulary)}
        host = Tokenizer(models.WordPiece(vocabulary, unk_token=tokenizer.unknown_token,
                                          max_input_chars_per_word=tokenizer.max_chars_per_word))
        host.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=tokenizer.split_on_cjk,
            strip_accents=tokenizer.strip_accents, lowercase=tokenizer.lowercase)
        host.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        host.add_special_tokens([AddedToken(token, special=True, normalized=False)
                                 for token in dict.fromkeys(tokenizer.id_to_token(getattr(tokenizer, name))
                                                               for name in _SPECIAL_IDS)])
        self._host = host

    def __call__(self, texts):
        """The token ids of each of `texts` (a list of strings): a list of lists, no special tokens added."""
        return [encoding.ids for encoding in self._host.encode_batch(list(texts), add_special_tokens=False)]

    def tokenize_with_offsets(self, texts):
        """`(ids, starts, ends)`, lists of lists: `WordPieceTokenizer.tokenize_with_offsets` of `texts`,
        each token's `[start, end)` span in characters of its text."""
        encodings = self._host.encode_batch(list(texts), add_special_tokens=False)
        return ([encoding.ids for encoding in encodings], [[start for start, _ in e.offsets] for e in encodings],
                [[end for _, end in e.offsets] for e in encodings])
