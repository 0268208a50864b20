"""A sentencepiece model whose pieces are numbered by a shared vocabulary (OPUS-MT / Marian's layout).

mt's own tokenizers number pieces as sentencepiece does (`mt.data.tokenizer`). A Marian model has
two sentencepiece models (`source.spm`, `target.spm`) and ONE vocabulary (`vocab.json`) over both
sides: text is split into pieces by its side's sentencepiece model, and each piece gets its id from
the shared vocabulary (<unk> when it has none), as `MarianTokenizer` does. `VocabView` is that
numbering: it answers the calls `Tokenizer` makes of a `SentencePieceProcessor` (encode, decode,
get_piece_size, id_to_piece, is_control), so a `Tokenizer` over two views is an ordinary mt
tokenizer with source and target models over one vocabulary. A model mt trains may use it too.

The vocabulary is a list of pieces in id order and must start with mt's four specials
(`SPECIALS`: <pad>, <unk>, <s>, </s> at ids 0..3). Pieces `<2lang>` are target tags (control
pieces: never produced by encoding text, dropped by decoding), as in mt's own source models;
`TARGET_TAG` is the one pattern that recognises them, here and in `mt.data.tokenizer`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import sentencepiece as spm

from mt.errors import MTError

SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")  # ids 0..3: PAD, UNK, BOS, EOS (mt.data.tokenizer)
_UNK = 1
# a target tag piece, its language the group (mt.data.tokenizer.target_tag writes it)
TARGET_TAG = re.compile(r"<2(.+)>")


def vocab_bytes(pieces: Sequence[str]) -> bytes:
    """The serialized form of a vocabulary (a JSON list of pieces in id order), as checkpoints keep it."""
    return json.dumps(list(pieces), ensure_ascii=False).encode("utf-8")


def read_vocab(data: bytes, what: str = "shared vocabulary") -> list[str]:
    """Pieces in id order from `vocab_bytes` output; MTError naming `what` when it is not one."""
    try:
        pieces = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise MTError(f"{what}: not a JSON list of pieces ({e})") from None
    if not isinstance(pieces, list) or not all(isinstance(p, str) for p in pieces):
        raise MTError(f"{what}: not a JSON list of pieces")
    if tuple(pieces[:4]) != SPECIALS:
        raise MTError(f"{what}: ids 0..3 must be {', '.join(SPECIALS)}, got {pieces[:4]}")
    return pieces


class VocabView:
    """Sentencepiece segmentation with ids from a shared vocabulary (the subset of
    `SentencePieceProcessor` that `mt.data.tokenizer.Tokenizer` calls)."""

    def __init__(self, sp: spm.SentencePieceProcessor, pieces: Sequence[str]) -> None:
        self.sp, self.pieces = sp, list(pieces)
        self.index: dict[str, int] = {}
        for i, piece in enumerate(self.pieces):
            self.index.setdefault(piece, i)
        self.control = {i for i, p in enumerate(self.pieces) if i < len(SPECIALS) or TARGET_TAG.fullmatch(p)}

    def get_piece_size(self) -> int:
        return len(self.pieces)

    def id_to_piece(self, i: int) -> str:
        return self.pieces[i]

    def is_control(self, i: int) -> bool:
        return i in self.control

    def encode(self, lines: list[str] | str, out_type: type = int, **options: Any) -> Any:
        """Lines -> pieces (out_type=str) or shared-vocabulary ids, <unk> (1) for a piece the
        vocabulary lacks. `options` go to sentencepiece (num_threads, sampling)."""
        pieces = self.sp.encode(lines, out_type=str, **options)
        if out_type is str:
            return pieces
        get = self.index.get
        if isinstance(lines, str):
            return [get(p, _UNK) for p in pieces]
        return [[get(p, _UNK) for p in seq] for seq in pieces]

    def decode(self, ids: list[list[int]]) -> list[str]:
        """Id sequences -> text, control pieces (specials, tags) dropped. A piece this side's model
        does not know (the other side's, in a shared vocabulary) comes out of sentencepiece as
        written, so its word-boundary marks become spaces afterwards, as MarianTokenizer does."""
        pieces, control, out = self.pieces, self.control, []
        for seq in ids:
            text = self.sp.decode_pieces([pieces[i] for i in seq if i not in control])
            out.append(text.removeprefix("\u2581").replace("\u2581", " "))  # the first mark is no space
        return out
