"""A real ``tokenizer.json`` built offline: a small BPE trained on a few sentences."""

from __future__ import annotations

from pathlib import Path

SENTENCES = [
    "Context windows are finite, so older turns must be compacted.",
    "The guard counts tokens before every call and folds old messages into a summary.",
    "コンテキストウィンドウは有限です。古いターンは要約されます。",
    "A tokenizer maps text to ids; the count is the number of ids.",
] * 4


def build_tokenizer(path: Path, *, vocab_size: int = 120) -> Path:
    """Train and save a byte-level-free BPE tokenizer (whitespace pre-tokenised)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["[UNK]"])
    tok.train_from_iterator(SENTENCES, trainer)
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return path
