"""A joint English/French subword tokenizer: BPE from the `tokenizers` library, trained on the
training split only, saved beside the model as `tokenizer.json`.

Metaspace pre-tokenization keeps spaces as part of the pieces, so decoding gives back the
text exactly. Every character of the training text is in the vocabulary; a character never
seen there becomes `<unk>` (and `unknown_chars` says which).
"""

from __future__ import annotations

from pathlib import Path

from edgeseq.errors import DataError, ModelFileError

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIALS = [PAD, BOS, EOS, UNK]
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
VOCAB = 2000


class Tokenizer:
    def __init__(self, tok):
        self.tok = tok
        self.vocab_size = tok.get_vocab_size()
        self._alphabet = {t for t in tok.get_vocab() if len(t) == 1}

    @classmethod
    def train(cls, texts: list, vocab_size: int = VOCAB) -> "Tokenizer":
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers
        tok = HFTokenizer(models.BPE(unk_token=UNK))
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
                                      limit_alphabet=1000)
        tok.train_from_iterator(texts, trainer)
        assert [tok.token_to_id(s) for s in SPECIALS] == [PAD_ID, BOS_ID, EOS_ID, UNK_ID]
        return cls(tok)

    @classmethod
    def load(cls, path) -> "Tokenizer":
        from tokenizers import Tokenizer as HFTokenizer
        path = Path(path)
        if not path.is_file():
            raise ModelFileError(f"'{path}' not found; the model directory needs its tokenizer.json "
                                 "(export it again with `edgeseq translate export`)")
        try:
            return cls(HFTokenizer.from_file(str(path)))
        except Exception as e:                      # the library raises a bare Exception
            raise ModelFileError(f"'{path}' is not a readable tokenizer ({str(e).splitlines()[0][:100]})") from None

    @classmethod
    def from_str(cls, text: str) -> "Tokenizer":
        from tokenizers import Tokenizer as HFTokenizer
        return cls(HFTokenizer.from_str(text))

    def to_str(self, pretty: bool = False) -> str:
        return self.tok.to_str(pretty=pretty)

    def save(self, path):
        """Write the tokenizer as JSON with Python's own file IO: a failed write is an OSError
        (the tokenizers library raises a bare Exception)."""
        Path(path).write_text(self.to_str(pretty=True), encoding="utf-8")

    def encode(self, text: str) -> list:
        """Token ids, no BOS/EOS."""
        return self.tok.encode(text).ids

    def decode(self, ids) -> str:
        ids = [int(i) for i in ids]
        if EOS_ID in ids:
            ids = ids[:ids.index(EOS_ID)]
        return self.tok.decode([i for i in ids if i not in (PAD_ID, BOS_ID)])

    def pieces(self, ids) -> list:
        return [self.tok.id_to_token(int(i)) for i in ids]

    def unknown_chars(self, text: str) -> list:
        """Characters of `text` that the tokenizer never saw in training (they become <unk>)."""
        import unicodedata
        text = unicodedata.normalize("NFC", text)
        return sorted({c for c in text if not c.isspace() and c not in self._alphabet})


def check_text(text: str) -> str:
    if not text or not text.strip():
        raise DataError("nothing to translate: the sentence is empty")
    return " ".join(text.split())
