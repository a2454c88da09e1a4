"""`VocabularyKind`: how a `kbert pretrain` run learns its vocabulary, and the four kinds it has.

`WORD_PIECE` (the encoders' and GPT-2's `vocab.txt`), `BYTE_LEVEL_BPE`
(BART's `vocab.json` and `merges.txt`), `SENTENCE_PIECE` (T5's
`spiece.model`, with `T5_SENTINELS` sentinel pieces at the top) and `WORDS`
(ELMo's `vocab.txt`, one word a line, for its softmax). Each is learned from the training documents
the first time and read back from the output folder on a resumed run.
"""

import dataclasses
import os
from collections.abc import Callable

from kbert.jobs.run_outputs import saved_vocabulary
from kbert.pretraining.bilm_dataset import learn_word_vocabulary

# T5's 100 sentinels `<extra_id_0>` … `<extra_id_99>`, at the top of its vocabulary.
T5_SENTINELS = 100


@dataclasses.dataclass(frozen=True)
class VocabularyKind:
    """The vocabulary of a pretraining objective: its files, how it is learned or read, its size.

    Attributes:
        files: the names of the files it leaves in the run's output folder.
        load: `(output, train_documents, vocabulary_size, log)` to the
            vocabulary the objective's model, data and report read (a
            tokenizer, or a list of words), learned into `output` if its
            files are absent.
        size: `(vocabulary)` to the number of ids.
        packages: the import names of the optional packages its pipeline
            needs (`kbert.jobs.extras.require_packages` checks them).

    >>> kind = VocabularyKind(files=("words.txt",), load=lambda *_: ["[PAD]", "a"], size=len, packages=())
    >>> kind.size(kind.load("runs/x", [], 10, print))
    2
    """

    files: tuple
    load: Callable
    size: Callable
    packages: tuple


def _word_piece(output, train_documents, vocabulary_size, log):
    """The WordPiece tokenizer of `output/vocab.txt`, learned from `train_documents` if absent."""
    from kbert.text import WordPieceTokenizer, learn_word_piece_vocabulary

    path = saved_vocabulary(output, learn_word_piece_vocabulary, train_documents, vocabulary_size,
                            "token WordPiece", log)
    return WordPieceTokenizer(path, lowercase=True)


def _byte_level_bpe(output, train_documents, vocabulary_size, log):
    """The byte-level BPE of the output folder, learned from `train_documents` if absent."""
    from kbert.text import BytePairTokenizer, learn_byte_pair_vocabulary

    paths = [os.path.join(output, name) for name in BYTE_LEVEL_BPE.files]
    if not all(os.path.exists(path) for path in paths):
        learn_byte_pair_vocabulary(train_documents, vocabulary_size, output)
        log(f"Learned a byte-level BPE of at most {vocabulary_size:,} ids from "
            f"{len(train_documents)} documents.")
    return BytePairTokenizer(*paths, add_prefix_space=True)


def _sentence_piece(output, train_documents, vocabulary_size, log):
    """T5's SentencePiece model of `output/spiece.model`, learned from `train_documents` if absent.

    `vocabulary_size` counts the `T5_SENTINELS` sentinels: the pieces learned are the rest.
    """
    from kbert.text import SentencePieceTokenizer, train_sentence_piece

    if vocabulary_size < T5_SENTINELS + 8:
        raise ValueError(f"A T5 vocabulary holds {T5_SENTINELS} sentinels and at least 8 pieces: "
                         f"--vocabulary-size must be at least {T5_SENTINELS + 8}; received {vocabulary_size}.")
    path = os.path.join(output, SENTENCE_PIECE.files[0])
    if not os.path.exists(path):
        lines = [line for document in train_documents for line in document.splitlines()]
        model = train_sentence_piece(lines, vocabulary_size - T5_SENTINELS, sentinels=T5_SENTINELS)
        with open(path, "wb") as f:
            f.write(model)
        tokenizer = SentencePieceTokenizer(model)
        log(f"Learned a {tokenizer.vocabulary_size:,}-piece SentencePiece vocabulary ({T5_SENTINELS} sentinels; "
            f"at most {vocabulary_size:,}) from {len(train_documents)} documents.")
        return tokenizer
    return SentencePieceTokenizer(path)


def _words(output, train_documents, vocabulary_size, log):
    """The words of `output/vocab.txt`, learned from `train_documents` if absent."""
    path = saved_vocabulary(output, learn_word_vocabulary, train_documents, vocabulary_size, "word", log)
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def _tokenizer_size(tokenizer):
    return tokenizer.vocabulary_size


WORD_PIECE = VocabularyKind(files=("vocab.txt",), load=_word_piece, size=_tokenizer_size,
                            packages=("tensorflow", "tensorflow_text"))
BYTE_LEVEL_BPE = VocabularyKind(files=("vocab.json", "merges.txt"), load=_byte_level_bpe, size=_tokenizer_size,
                                packages=("tensorflow", "keras_hub", "tokenizers"))
SENTENCE_PIECE = VocabularyKind(files=("spiece.model",), load=_sentence_piece, size=_tokenizer_size,
                                packages=("tensorflow", "tensorflow_text", "sentencepiece"))
WORDS = VocabularyKind(files=("vocab.txt",), load=_words, size=len, packages=("tensorflow",))
