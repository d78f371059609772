"""agent_rl.tokenizers: a reproducible, locally trained SentencePiece tokenizer and the
per-id byte table that jitted environments use to read generated tokens as text."""
from agent_rl.tokenizers.tokenizer import Tokenizer
from agent_rl.tokenizers.train import (BOS_ID, EOS_ID, NEWLINE, PAD_ID, SPECIAL_TOKENS, UNK_ID,
                                       train_tokenizer)

__all__ = ["Tokenizer", "train_tokenizer", "SPECIAL_TOKENS", "NEWLINE", "PAD_ID", "UNK_ID",
           "BOS_ID", "EOS_ID"]
from agent_rl.tokenizers.byte_level import ByteTokenizer
