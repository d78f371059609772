"""agent_rl.tokenizers: a reproducible, locally trained SentencePiece tokenizer, Hugging Face
`tokenizer.json` directories (`load_hf`) with their chat templates (`chat`), and the per-id
byte table that jitted environments use to read generated tokens as text."""
from agent_rl.tokenizers.hf import HFTokenizer, load_hf, load_tokenizer
from agent_rl.tokenizers.hf_train import synthetic_byte_level, train_hf_tokenizer
from agent_rl.tokenizers.tokenizer import Tokenizer
from agent_rl.tokenizers.train import (BOS_ID, EOS_ID, NEWLINE, PAD_ID, SPECIAL_TOKENS, UNK_ID,
                                       train_tokenizer)

__all__ = ["Tokenizer", "HFTokenizer", "load_hf", "load_tokenizer", "train_hf_tokenizer",
           "synthetic_byte_level", "train_tokenizer", "SPECIAL_TOKENS", "NEWLINE", "PAD_ID",
           "UNK_ID", "BOS_ID", "EOS_ID"]
from agent_rl.tokenizers.byte_level import ByteTokenizer
