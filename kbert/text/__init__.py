"""Text to model inputs: WordPiece, SentencePiece and byte-level BPE tokenizers, vocabulary
learning, segment packing, ELMo's character ids.

This package runs on TensorFlow and tensorflow-text whatever the Keras backend
(the text pipeline lives in `tf.data`), so `import kbert` does not import it:
import `kbert.text` where text is processed.

>>> from kbert.text import WordPieceTokenizer, SegmentPacker
>>> tokenizer = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "!"])
>>> packer = SegmentPacker(6, start_id=tokenizer.cls_id, end_id=tokenizer.sep_id)
>>> packer(tokenizer.tokenize("Hello!"))["token_ids"].numpy().tolist()
[2, 5, 6, 3, 0, 0]
"""

from kbert.text.character_ids import MAX_CHARACTERS, character_ids, split_words, word_character_ids
from kbert.text.byte_pair_tokenizer import BytePairTokenizer, learn_byte_pair_vocabulary
from kbert.text.segment_packer import SegmentPacker
from kbert.text.sentence_piece_tokenizer import SentencePieceTokenizer, train_sentence_piece
from kbert.text.word_piece_tokenizer import WordPieceTokenizer
from kbert.text.word_piece_vocabulary import learn_word_piece_vocabulary

__all__ = [
    "BytePairTokenizer",
    "SegmentPacker",
    "SentencePieceTokenizer",
    "character_ids",
    "WordPieceTokenizer",
    "learn_byte_pair_vocabulary",
    "learn_word_piece_vocabulary",
    "split_words",
    "train_sentence_piece",
    "word_character_ids",
]
