"""`mt export --format hf -o DIR`: an mt checkpoint becomes a `transformers` directory that
`AutoModelForSeq2SeqLM.from_pretrained(DIR)` and `AutoTokenizer.from_pretrained(DIR)` load (and
transformers 4.x's `pipeline("translation", model=DIR)`; transformers 5 removed that pipeline, and
tokenizer -> generate -> batch_decode is what it did): a MarianMTModel (config.json, model.safetensors,
generation_config.json), a MarianTokenizer (source.spm, target.spm, vocab.json,
tokenizer_config.json) and a model card (README.md with the Hub's metadata header).

Which models export how (`exportable`):

- post-LN (`model.norm: post`) with one vocabulary (a joint sentencepiece model, or two over a
  shared vocabulary, e.g. an imported OPUS-MT model): MarianMTModel, exactly. Marian's layout is
  mt's post-LN one (`mt.deploy.marian_map`); an interleaved position table is expressed by a
  permutation of the residual dimensions, relu/gelu/swish, tied or untied, any final_logits_bias.
  mt's ids stay the ids: <pad> 0, <unk> 1, the decoder start <s> 2, </s> 3.
- pre-LN (the demo's `norm: pre`): refused. No transformers seq2seq class computes it exactly:
  Marian is post-LN; MBart is pre-LN with final LayerNorms but always applies `layernorm_embedding`
  to the embeddings; M2M100 is pre-LN without it, but its sinusoidal table has other frequencies
  (10000^(-i/(d/2-1))), starts at position padding_idx + 1, and is recomputed on load, and its
  tokenizer adds language-code tokens to every source. (Exporting custom modeling code with
  `trust_remote_code` is the other way; mt does not write code into model directories.)
- separate source and target vocabularies (`tokenizer.joint: false`): refused (MarianTokenizer's
  `separate_vocabs` layout is not mapped).

Multi-pair models keep their target tags: the tag `<2de>` becomes vocab.json's `>>de<<`, the
language-code token MarianTokenizer reads at the start of a source (`">>de<< A sentence."`), as
multi-target OPUS-MT models do. generation_config.json bans what mt's search bans (<pad>, <s>,
and <unk> when `decode.search.forbid_unk`), starts from <s>, and stops as mt's beam search does
(`early_stopping: true`), with the config's length penalty: exactly for "average" and "none";
mt's default "gnmt" has no transformers form and is approximated (`hf_length_penalty`), so beam
search may rank some hypotheses differently from `mt translate` (greedy search is identical); the
README says so.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any

from mt.config import Config
from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer
from mt.deploy.card import eval_scores, model_card, model_card_markdown, parameter_count, run_dir_of
from mt.deploy.marian_map import ACTIVATIONS, mt_to_marian, residual_order
from mt.errors import MTError
from mt.model.checkpoint import Checkpoint, read_checkpoint
from mt.textio import install_dir

_NEEDS_HF = "mt export --format hf: needs the transformers package: pip install -e \".[hf]\""


def exportable(cfg: Config, tokenizer: Tokenizer) -> None:
    """MTError (one line: why) when no transformers class expresses the model exactly."""
    if cfg.model.norm != "post":
        raise MTError("mt export --format hf: pre-LN models (model.norm: pre) have no exact transformers "
                      "class (Marian is post-LN; MBart adds layernorm_embedding; M2M100's positions differ): "
                      "train with --set model.norm=post to export")
    if not tokenizer.joint:
        raise MTError("mt export --format hf: separate source and target vocabularies "
                      "(tokenizer.joint: false) are not mapped onto MarianTokenizer; "
                      "train with tokenizer.joint: true to export")


def vocabulary(tokenizer: Tokenizer) -> list[str]:
    """The model's pieces in id order, target tags `<2de>` written as Marian's `>>de<<`."""
    pieces = [tokenizer.tgt_pieces([i])[0] for i in range(tokenizer.tgt_vocab_size)]
    for lang, i in tokenizer.target_tags().items():
        pieces[i] = f">>{lang}<<"
    if len(set(pieces)) != len(pieces):
        raise MTError("mt export --format hf: the vocabulary has a piece twice; "
                      "vocab.json needs unique pieces")
    return pieces


def marian_config(cfg: Config, vocab_size: int) -> dict[str, Any]:
    """MarianConfig keyword arguments for an mt model config (ids: PAD 0, UNK 1, BOS 2 = decoder start,
    EOS 3)."""
    m = cfg.model
    return dict(vocab_size=vocab_size, decoder_vocab_size=vocab_size, d_model=m.d_model,
                encoder_layers=m.encoder_layers, decoder_layers=m.decoder_layers,
                encoder_attention_heads=m.heads, decoder_attention_heads=m.heads,
                encoder_ffn_dim=m.d_ff, decoder_ffn_dim=m.d_ff,
                activation_function=ACTIVATIONS[m.activation], max_position_embeddings=m.max_positions,
                dropout=m.dropout, attention_dropout=m.attention_dropout, activation_dropout=0.0,
                scale_embedding=m.scale_embedding, share_encoder_decoder_embeddings=True,
                tie_word_embeddings=m.tie_embeddings, pad_token_id=PAD_ID, eos_token_id=EOS_ID,
                decoder_start_token_id=BOS_ID, forced_eos_token_id=EOS_ID, bos_token_id=None)


def hf_length_penalty(kind: str, alpha: float, max_length: int) -> float:
    """transformers' `length_penalty` p (beam scores log P / |y|^p) for mt's penalty: exact for
    `average` (|y|^alpha) and `none` (p = 0). mt's default `gnmt`, ((5 + |y|) / 6)^alpha, has no
    transformers equivalent: p is the least-squares slope of alpha * log(5 + |y|) against log |y|
    over the lengths 2..max_length (a constant factor on the penalty ranks nothing differently), so
    hypotheses of different lengths are weighed nearly as mt weighs them (alpha 0.6, 64 positions:
    p = 0.41), not as |y|^1 would (the old export: long outputs favoured)."""
    if kind == "average":
        return alpha
    if kind == "none" or alpha == 0:
        return 0.0
    xs = [math.log(n) for n in range(2, max(max_length, 3) + 1)]
    ys = [alpha * math.log(5 + n) for n in range(2, max(max_length, 3) + 1)]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return round(slope, 4)


def generation_settings(cfg: Config) -> dict[str, Any]:
    """generation_config.json's search settings: mt's bans, beam, stopping rule, length penalty
    (`hf_length_penalty`: mt's gnmt penalty approximated) and loop guard's n-gram ban (the same rule:
    the n-grams transformers sees start with BOS, which is never emitted again)."""
    d = cfg.decode.search
    banned = [[PAD_ID], [BOS_ID]] + ([[UNK_ID]] if d.forbid_unk else [])
    beam = {} if d.beam == 1 else dict(
        num_beams=d.beam, early_stopping=True,
        length_penalty=hf_length_penalty(d.length_penalty, d.alpha, cfg.model.max_positions))
    if d.no_repeat_ngram_size:
        beam["no_repeat_ngram_size"] = d.no_repeat_ngram_size
    return dict(bad_words_ids=banned, max_length=cfg.model.max_positions, decoder_start_token_id=BOS_ID,
                pad_token_id=PAD_ID, eos_token_id=EOS_ID, forced_eos_token_id=EOS_ID, **beam)


def hub_card(state: dict[str, Any], cfg: Config, path: Path, languages: list[str], parameters: int) -> str:
    """README.md: the Hub's YAML metadata header (languages, an empty license for the user to fill,
    the measured scores as model-index results) and mt's model card."""
    scores = eval_scores(run_dir_of(path))
    # The file's name, not its absolute path: the card is published with the model.
    card = model_card(state, checkpoint=path.name, scores=scores, parameters=parameters)
    header = ["---", "language:", *[f"- {lang}" for lang in languages],
              'license: ""  # left to you: the license of the training data and of this model',
              "library_name: transformers", "pipeline_tag: translation", "tags:", "- translation", "- marian",
              "- mt"]
    results = [(name, metric, s[metric]) for name, s in scores.items() for metric in ("bleu", "chrf")
               if metric in s]
    if results:
        header += ["model-index:", f"- name: {card['name']}", "  results:"]
        for name, metric, value in results:
            header += ["  - task: {type: translation}", f"    dataset: {{name: {name}, type: {name}}}",
                       f"    metrics: [{{type: {metric}, value: {value}}}]"]
    header.append("---")
    tags = state.get("pairs") or []
    # no space after the code: MarianTokenizer keeps it, and mt's `identity` sentencepiece would encode it
    example = f">>{tags[-1]['tgt_lang']}<<A sentence." if tags else "A sentence."
    use = ["## Use", "", "```python", "from transformers import AutoModelForSeq2SeqLM, AutoTokenizer",
           "tok = AutoTokenizer.from_pretrained('<this dir>')",
           "model = AutoModelForSeq2SeqLM.from_pretrained('<this dir>')",
           f"batch = tok([{example!r}], return_tensors='pt', padding=True)",
           "print(tok.batch_decode(model.generate(**batch), skip_special_tokens=True))", "```", "",
           "With transformers 4.x, `pipeline('translation', model='<this dir>')` does the same "
           "(transformers 5 removed that pipeline).", "", *_beam_note(cfg)]
    body = model_card_markdown(card,
                               title=f"{card['name']} — mt model exported to transformers (MarianMTModel)",
                               extra=["- files: config.json, model.safetensors, generation_config.json, "
                                      "source.spm, target.spm, vocab.json, tokenizer_config.json"])
    return "\n".join(header) + "\n\n" + body + "\n" + "\n".join(use)


def _beam_note(cfg: Config) -> list[str]:
    """The README's word on beam search when transformers cannot rank as mt does (gnmt)."""
    d = cfg.decode.search
    if d.length_penalty != "gnmt" or d.alpha == 0:
        return []
    p = hf_length_penalty(d.length_penalty, d.alpha, cfg.model.max_positions)
    return ["## Beam search", "",
            f"mt ranks beam hypotheses by log P / ((5 + |y|) / 6)^{d.alpha:g} (GNMT); transformers can "
            f"only divide by |y|^p, so generation_config.json has `length_penalty: {p}`, the p closest to "
            "it over the lengths the model handles. Beam search may therefore choose another hypothesis "
            "than `mt translate` for some sentences; greedy search (`num_beams=1`) is identical.", ""]


def export_hf(checkpoint: Checkpoint | Path, out_dir: Path, *, force: bool = False) -> Path:
    """Write the transformers directory `out_dir` for an mt checkpoint; returns `out_dir`. An
    existing non-empty `out_dir` is an error unless `force`; built beside it and renamed into place."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise MTError(f"mt export: '{out_dir}' exists and is not a directory")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        raise MTError(f"mt export: '{out_dir}' exists and is not empty (use --force to replace it)")
    try:
        import torch
        from transformers import GenerationConfig, MarianConfig, MarianMTModel, MarianTokenizer
        from transformers.utils import logging as hf_logging
    except ImportError:
        raise MTError(_NEEDS_HF) from None
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    source = checkpoint if isinstance(checkpoint, Checkpoint) else read_checkpoint(checkpoint)
    cfg, tokenizer, state = source.config, source.tokenizer, source.state
    exportable(cfg, tokenizer)
    pieces = vocabulary(tokenizer)
    m = cfg.model
    weights = mt_to_marian(source.weights, layers=(m.encoder_layers, m.decoder_layers),
                           tied=m.tie_embeddings,
                           perm=residual_order(m.d_model) if m.positions == "interleaved" else None)
    model = MarianMTModel(MarianConfig(**marian_config(cfg, len(pieces))))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if unexpected or any("embed_positions" not in k for k in missing):
        raise MTError(f"mt export --format hf: weights do not fit MarianMTModel "
                      f"(missing {missing}, unexpected {unexpected})")
    model.generation_config = GenerationConfig(**generation_settings(cfg))
    languages = list(dict.fromkeys([p.src_lang for p in cfg.data.pairs]
                                   + [p.tgt_lang for p in cfg.data.pairs]))

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=out_dir.parent))
    try:
        with torch.no_grad():
            model.save_pretrained(tmp)
        files = tokenizer.model_bytes()
        (tmp / "source.spm").write_bytes(files["src"])
        (tmp / "target.spm").write_bytes(files.get("tgt", files["src"]))
        (tmp / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(pieces)},
                                                   ensure_ascii=False, indent=1),
                                         encoding="utf-8")
        pair = cfg.data.pairs[0]
        MarianTokenizer(str(tmp / "source.spm"), str(tmp / "target.spm"), str(tmp / "vocab.json"),
                        source_lang=pair.src_lang, target_lang=pair.tgt_lang,
                        model_max_length=m.max_positions,
                        clean_up_tokenization_spaces=False).save_pretrained(tmp)
        (tmp / "README.md").write_text(hub_card(state, cfg, source.path, languages, parameter_count(state)),
                                       encoding="utf-8")
        install_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir
