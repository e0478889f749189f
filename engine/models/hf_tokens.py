"""A Hugging Face ``tokenizers.Tokenizer`` as a handler's ``text_tokenizer`` (TEI's /tokenize:
inferpool.engine.models.text_api.TextTokenizer).

The tokenizer is the handler's own, with its truncation, so /tokenize gives the ids the model
is given. A token's text is its span of the input (the token string for a special token, which
has no span), as TEI reports them.
"""

from __future__ import annotations

from typing import Any

from inferpool.engine.models.text_api import Token


class HfTokens:
    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        """A ``tokenizers.Tokenizer`` (its Rust core is thread-safe and releases the GIL)."""

    def tokenize(self, texts: list[str], add_special_tokens: bool) -> list[list[Token]]:
        encodings = self.tokenizer.encode_batch(texts, add_special_tokens=add_special_tokens)
        return [_tokens(text, encoding) for text, encoding in zip(texts, encodings, strict=True)]


def _tokens(text: str, encoding: Any) -> list[Token]:
    tokens = []
    for token_id, piece, special, (start, stop) in zip(
        encoding.ids, encoding.tokens, encoding.special_tokens_mask, encoding.offsets, strict=True
    ):
        if special:
            tokens.append(Token(token_id, piece, True, None, None))
        else:
            tokens.append(Token(token_id, text[start:stop], False, start, stop))
    return tokens
