"""Export an mt checkpoint as a CTranslate2 model directory (`mt export --format ctranslate2`).

The Transformer maps one to one onto CTranslate2's `TransformerSpec`:

- fused QKV self-attention (`linear[0]`, rows q|k|v as in `SelfAttention.qkv`), query + fused KV
  cross-attention (`linear[0]`, `linear[1]` rows k|v as in `CrossAttention.kv`), output `linear[-1]`;
- `pre_norm` = (model.norm == "pre"). CTranslate2's post-norm layer is LN(x + f(x)) and its pre-norm
  layer x + f(LN(x)) with a final LayerNorm per stack, exactly mt's `_residual` and `enc_norm`/`dec_norm`;
  each sublayer's LayerNorm lives in the sublayer spec (`self_attention`, `attention`, `ffn`);
- embeddings scaled by sqrt(d_model) (`scale_embeddings`); mt's own sinusoidal table
  (PE[k, 2i] = sin, PE[k, 2i+1] = cos) is written as `position_encodings.encodings`, since
  CTranslate2's built-in table concatenates the sin and cos halves instead of interleaving them;
- relu -> Activation.RELU, gelu (exact, erf) -> Activation.GELU, swish -> Activation.SWISH;
  LayerNorm epsilon 1e-5 (torch's); `model.scale_embedding`, `model.positions` (the table is written
  whatever its layout) and a tied `final_logits_bias` (the projection's bias) carry over;
- tied output projection: the target embedding, no bias; untied: the Linear with its bias. Tied
  tensors are stored once (CTranslate2 aliases equal variables).

Vocabulary: the sentencepiece pieces in id order (so CTranslate2 ids equal mt ids: <pad>=0,
<unk>=1, <s>=2, </s>=3), one `shared_vocabulary.json` when joint. The model config sets
`add_source_eos: true`, so CTranslate2 appends `</s>` to every source itself, as mt's batching
does: callers pass plain pieces. The decoder starts from `<s>` (mt's BOS).

Beside `model.bin`, `config.json` and the vocabularies the directory holds the sentencepiece
model(s) (`spm.model`, or `spm.src.model` + `spm.tgt.model`), `mt_export.json` (resolved config,
training update/epoch, evaluation scores found in the run's `eval/`, export settings) and
`MODEL_CARD.md`. The directory is built in a temporary folder beside the target and renamed.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from mt.config import Config
from mt.data.tokenizer import JOINT_MODEL, SHARED_VOCAB, SRC_MODEL, TGT_MODEL
from mt.deploy.card import (
    EXPORT_INFO,
    eval_scores,
    model_card,
    model_card_markdown,
    parameter_count,
    run_dir_of,
)
from mt.errors import MTError
from mt.model.checkpoint import Checkpoint, read_checkpoint
from mt.textio import install_dir

QUANTIZATIONS = ("none", "int8", "int8_float32", "int16")
INT8_RANGES = ("reduced", "full")  # int8 weights in [-63, 63] (no AVX2 saturation) or [-127, 127]
INT8_REDUCED_MAX = 63
WEIGHTS_FILE = "model.bin"  # what CTranslate2's converter writes: the weights, hashed as the model's id
MODEL_CARD = "MODEL_CARD.md"
LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default, which mt uses
_NEEDS_CT2 = "mt export: needs the ctranslate2 package: pip install -e \".[ct2]\""


def import_ctranslate2() -> Any:
    """The ctranslate2 module, or the one-line MTError telling how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise MTError(_NEEDS_CT2) from None
    return ctranslate2


def _pieces(model: bytes) -> list[str]:
    """All pieces of a serialized sentencepiece model, in id order."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(model)
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


def _np(t: Any) -> Any:
    return t.detach().to("cpu").float().contiguous().numpy()


def _set_linear(spec: Any, weights: dict[str, Any], name: str) -> None:
    spec.weight = _np(weights[f"{name}.weight"])
    spec.bias = _np(weights[f"{name}.bias"])


def _set_norm(spec: Any, weights: dict[str, Any], name: str) -> None:
    spec.gamma = _np(weights[f"{name}.weight"])
    spec.beta = _np(weights[f"{name}.bias"])


def build_spec(cfg: Config, state: dict[str, Any]) -> Any:
    """A filled, unvalidated `ctranslate2.specs.TransformerSpec` for a loaded checkpoint `state`."""
    import_ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    from mt.model.transformer import sinusoidal_positions

    m, w = cfg.model, state["model"]
    pre = m.norm == "pre"
    activation = {"gelu": common_spec.Activation.GELU, "relu": common_spec.Activation.RELU,
                  "swish": common_spec.Activation.SWISH}[m.activation]
    encoder = transformer_spec.TransformerEncoderSpec(m.encoder_layers, m.heads, pre_norm=pre,
                                                      activation=activation)
    decoder = transformer_spec.TransformerDecoderSpec(m.decoder_layers, m.heads, pre_norm=pre,
                                                      activation=activation)
    spec = transformer_spec.TransformerSpec(encoder, decoder)

    positions = sinusoidal_positions(m.max_positions, m.d_model, m.positions).numpy()  # (P, D), mt's table
    for stack in (encoder, decoder):
        stack.scale_embeddings = m.scale_embedding
        stack.position_encodings.encodings = positions
    encoder.embeddings[0].weight = _np(w["src_embed.weight"])
    decoder.embeddings.weight = _np(w["tgt_embed.weight"])
    if m.tie_embeddings:
        decoder.projection.weight = _np(w["tgt_embed.weight"])  # no bias unless model.final_logits_bias
        if "final_logits_bias" in w:
            decoder.projection.bias = _np(w["final_logits_bias"])
    else:
        _set_linear(decoder.projection, w, "out_proj")
    if pre:
        _set_norm(encoder.layer_norm, w, "enc_norm")
        _set_norm(decoder.layer_norm, w, "dec_norm")

    for i, layer in enumerate(encoder.layer):
        p = f"encoder.{i}"
        _set_linear(layer.self_attention.linear[0], w, f"{p}.attn.qkv")
        _set_linear(layer.self_attention.linear[1], w, f"{p}.attn.out")
        _set_norm(layer.self_attention.layer_norm, w, f"{p}.norm_attn")
        _set_linear(layer.ffn.linear_0, w, f"{p}.ff.up")
        _set_linear(layer.ffn.linear_1, w, f"{p}.ff.down")
        _set_norm(layer.ffn.layer_norm, w, f"{p}.norm_ff")
    for i, layer in enumerate(decoder.layer):
        p = f"decoder.{i}"
        _set_linear(layer.self_attention.linear[0], w, f"{p}.self_attn.qkv")
        _set_linear(layer.self_attention.linear[1], w, f"{p}.self_attn.out")
        _set_norm(layer.self_attention.layer_norm, w, f"{p}.norm_self")
        _set_linear(layer.attention.linear[0], w, f"{p}.cross_attn.q")
        _set_linear(layer.attention.linear[1], w, f"{p}.cross_attn.kv")
        _set_linear(layer.attention.linear[2], w, f"{p}.cross_attn.out")
        _set_norm(layer.attention.layer_norm, w, f"{p}.norm_cross")
        _set_linear(layer.ffn.linear_0, w, f"{p}.ff.up")
        _set_linear(layer.ffn.linear_1, w, f"{p}.ff.down")
        _set_norm(layer.ffn.layer_norm, w, f"{p}.norm_ff")

    tok = state["tokenizer"]
    # a shared vocabulary's, or spm's
    src_pieces = json.loads(tok["vocab"]) if "vocab" in tok else _pieces(tok["src"])
    spec.register_source_vocabulary(src_pieces)
    spec.register_target_vocabulary(_pieces(tok["tgt"]) if "tgt" in tok and "vocab" not in tok
                                    else src_pieces)
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = "<unk>", "<s>", "</s>"
    spec.config.decoder_start_token = "<s>"
    spec.config.add_source_bos, spec.config.add_source_eos = False, True  # mt ends every source with EOS
    spec.config.layer_norm_epsilon = LAYER_NORM_EPS
    return spec


def export_model_card(info: dict[str, Any]) -> str:
    """MODEL_CARD.md of an export: the shared card (`mt.deploy.card`) plus how to use the directory."""
    card = model_card(info, checkpoint=info["checkpoint"], scores=info["scores"],
                      parameters=info["parameters"])
    extra = [f"- tokenizer files: {', '.join(info['tokenizer_files'])}",
             (f"- weights: {'float32' if info['quantization'] == 'none' else info['quantization']}"
              + {"reduced": " in [-63, 63] (exact on AVX2 CPUs too)",
                 "full": " in [-127, 127] (AVX2 CPUs saturate: for VNNI CPUs only)"}.get(
                  info.get("int8_range", ""), "")
              + f"; CTranslate2 {info['ctranslate2_version']}"),
             "- the model appends `</s>` to each source itself (config `add_source_eos`): pass plain pieces"]
    if info.get("quantization_check"):  # written by mt.deploy.quantcheck after the export
        extra.append(f"- {info['quantization_check']['summary']}")
    if info.get("pairs"):
        extra.insert(0, _languages(info))
    lines = [model_card_markdown(card, title=f"{info['name']} — mt model exported to CTranslate2",
                                 extra=extra),
             "## Use", "", "```python", "import ctranslate2, sentencepiece as spm",
             f"sp = spm.SentencePieceProcessor(model_file='{info['tokenizer_files'][0]}')",
             "tr = ctranslate2.Translator('<this dir>', compute_type='auto')",
             *_tagged_source(info),
             "out = tr.translate_batch([source], beam_size=5, max_input_length=0,",
             "                         suppress_sequences=[['<pad>'], ['<s>']])  # mt never emits PAD/BOS",
             "print(sp.decode(out[0].hypotheses[0]))",
             "```", ""]
    return "\n".join(lines)


def _languages(info: dict[str, Any]) -> str:
    """The model card's languages line; for a multi-pair model its pairs and how to use the tags."""
    pairs = info.get("pairs")
    if not pairs:
        return f"- languages: {info['config']['data']['src_lang']} -> {info['config']['data']['tgt_lang']}"
    listed = ", ".join(f"{p['src_lang']} -> {p['tgt_lang']} (`{p['tag']}`)" for p in pairs)
    return (f"- languages: {listed}; put the target language's tag piece before the source pieces "
            f"(`mt translate --target-lang`)")


def _tagged_source(info: dict[str, Any]) -> list[str]:
    """The model card's lines building `source`: the pieces, after the target tag for a multi-pair model."""
    pairs = info.get("pairs")
    if not pairs:
        return ["source = sp.encode('A sentence.', out_type=str)"]
    return [f"source = ['{pairs[-1]['tag']}'] + sp.encode('A sentence.', out_type=str)  "
            f"# the tag picks the target language"]


def _quantize_int8_reduced(spec: Any) -> None:
    """int8 weights in [-63, 63] with a float32 scale per output row, in place of CTranslate2's
    [-127, 127]. Without VNNI (AVX2 CPUs) int8 products go through vpmaddubsw, which adds two
    u8 x s8 products into a saturating int16: activations up to 255 (CTranslate2 shifts them to
    u8) times weights up to 127 overflow, weights up to 63 cannot (2 * 255 * 63 < 32767), the
    range PyTorch's fbgemm reduces to for the same reason. Measured on the demo model's val
    references (README "Deploy with CTranslate2"): the 8-bit range's log-prob error grows 6x on
    the AVX2 path, the 7-bit range's is the same on every path."""
    from ctranslate2.specs import model_spec

    def quantize(layer: Any, name: str, value: Any) -> None:
        key = name.split("/")[-1]
        if isinstance(value, str) or not hasattr(layer, f"{key}_scale") or not hasattr(value, "numpy"):
            return  # an alias of another variable, a layer without a scale, or not an array
        weights = value.to("float32").numpy()
        if weights.ndim != 2:
            return
        amax = np.maximum(np.abs(weights).max(axis=1), np.float32(1e-30))
        scale = (np.float32(INT8_REDUCED_MAX) / amax).astype(np.float32)
        setattr(layer, key, model_spec.NumpyVariable(np.rint(weights * scale[:, None]).astype(np.int8)))
        setattr(layer, f"{key}_scale", model_spec.NumpyVariable(scale))

    model_spec.visit_spec(spec, quantize)


def check_export(out_dir: Path, *, quantization: str = "none", force: bool = False,
                 int8_range: str = "reduced") -> Any:
    """The ctranslate2 module, once the export's options and `out_dir` are checked (before any
    checkpoint is read; an MTError names what is wrong)."""
    out_dir = Path(out_dir)
    if quantization not in QUANTIZATIONS:
        raise MTError(f"mt export: unknown quantization {quantization!r}; "
                      f"expected one of {', '.join(QUANTIZATIONS)}")
    if int8_range not in INT8_RANGES:
        raise MTError(f"mt export: unknown --int8-range {int8_range!r}; "
                      f"expected one of {', '.join(INT8_RANGES)}")
    ct2 = import_ctranslate2()
    if out_dir.exists() and not out_dir.is_dir():
        raise MTError(f"mt export: '{out_dir}' exists and is not a directory")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        raise MTError(f"mt export: '{out_dir}' exists and is not empty (use --force to replace it)")
    return ct2


def export_ctranslate2(checkpoint: Checkpoint | Path, out_dir: Path, *, quantization: str = "none",
                       force: bool = False, int8_range: str = "reduced") -> Path:
    """Write the CTranslate2 model directory `out_dir` for an mt checkpoint (read here from its
    path, or already read: a `Checkpoint`); returns `out_dir`.

    `quantization`: none (float32) | int8 | int8_float32 | int16. `int8_range`: reduced (weights
    in [-63, 63], exact on every CPU; see `_quantize_int8_reduced`) | full (CTranslate2's
    [-127, 127]: a little finer where the CPU has VNNI, saturating on AVX2). An existing non-empty
    `out_dir` is an error unless `force`. The directory is built beside `out_dir` and renamed into place.
    """
    out_dir = Path(out_dir)
    ct2 = check_export(out_dir, quantization=quantization, force=force, int8_range=int8_range)
    source = checkpoint if isinstance(checkpoint, Checkpoint) else read_checkpoint(checkpoint)
    path, state, cfg = source.path, source.state, source.config
    if cfg.model.d_model % cfg.model.heads:
        raise MTError(f"mt export: d_model {cfg.model.d_model} is not a multiple of heads {cfg.model.heads}")

    spec = build_spec(cfg, state)
    try:
        spec.validate()
    except ValueError as e:
        raise MTError(f"mt export: '{path}' does not fit a CTranslate2 Transformer "
                      f"({str(e).splitlines()[0]})") from None
    if quantization.startswith("int8") and int8_range == "reduced":
        spec.optimize(quantization=None)  # aliases tied weights; quantised below
        _quantize_int8_reduced(spec)
    else:
        spec.optimize(quantization=None if quantization == "none" else quantization)

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=out_dir.parent))
    try:
        spec.save(str(tmp))
        tok = state["tokenizer"]
        files = {SRC_MODEL: tok["src"], TGT_MODEL: tok["tgt"]} if "tgt" in tok else {JOINT_MODEL: tok["src"]}
        if "vocab" in tok:
            files[SHARED_VOCAB] = tok["vocab"]
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        info = {
            "format": "ctranslate2",
            "name": cfg.name,
            "checkpoint": str(path.resolve()),
            "update": int(state.get("update", 0)),
            **({"averaged_updates": state["averaged_updates"]} if "averaged_updates" in state else {}),
            "epoch": int(state.get("epoch", 0)),
            "quantization": quantization,
            **({"int8_range": int8_range} if quantization.startswith("int8") else {}),
            "ctranslate2_version": getattr(ct2, "__version__", "unknown"),
            "src_vocab_size": int(state["src_vocab_size"]),
            "tgt_vocab_size": int(state["tgt_vocab_size"]),
            "joint_vocab": bool(state["joint_vocab"]),
            "tokenizer_files": list(files),
            "add_source_eos": True,
            "config": state["config"],
            **({"pairs": state["pairs"]} if "pairs" in state else {}),  # a multi-pair model's pairs and tags
            "parameters": parameter_count(state),
            "valid": state.get("valid", {}),
            "scores": eval_scores(run_dir_of(path)),
        }
        (tmp / EXPORT_INFO).write_text(json.dumps(info, indent=2, ensure_ascii=False) + "\n",
                                       encoding="utf-8")
        (tmp / MODEL_CARD).write_text(export_model_card(info), encoding="utf-8")
        install_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def read_export_info(model_dir: Path) -> dict[str, Any]:
    """The `mt_export.json` of an exported directory (MTError when it is not an mt export)."""
    path = Path(model_dir) / EXPORT_INFO
    if not path.is_file():
        raise MTError(f"'{model_dir}': not an mt CTranslate2 export (no {EXPORT_INFO})")
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise MTError(f"'{path}': unreadable ({e})") from None
    if not isinstance(info, dict) or info.get("format") != "ctranslate2":
        raise MTError(f"'{path}': not an mt CTranslate2 export")
    return info


def is_export_dir(path: Path) -> bool:
    """True when `path` is a directory written by `export_ctranslate2` (for `-c DIR` dispatch)."""
    return Path(path).is_dir() and (Path(path) / EXPORT_INFO).is_file()

