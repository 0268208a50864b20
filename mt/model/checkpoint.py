"""Self-contained checkpoints: one file with the config, the tokenizer and the weights.

Layout of a checkpoint (a plain dict; only tensors, numbers, strings, bytes, lists and dicts, so
`torch.load(weights_only=True)` reads it and a checkpoint can never run code):

    kind            "mt-checkpoint"
    format_version  FORMAT_VERSION
    config          mt.config.config_to_dict(cfg)
    tokenizer       {"src": bytes, "tgt": bytes}  sentencepiece models ("tgt" absent when joint),
                    and "vocab" (bytes) when the two share one vocabulary (mt.data.vocab)
    src_vocab_size, tgt_vocab_size, joint_vocab
    model           the Transformer's state dict (float tensors, on CPU)
    update, epoch   where training was (0 when unknown)
    training        (training checkpoints only, e.g. last.pt) optimizer, scaler, data position,
                    RNG states, best metric, patience, ... — written and restored by mt/train/state.py
    averaged_from   (averaged checkpoints only) the source file names
    averaged_updates (averaged checkpoints only) the sources' updates; `update` is the newest of them,
                    and `valid` the average's own validation record (written by the trainer), never a source's
    init_from       (fine-tuned runs only) {"path", "sha256", "update"}: the checkpoint the run
                    started from (train.init_from), its sha256 and update count
    decode_fit, confidence_fit  (fitted checkpoints only) how decode.search.alpha and decode.calibration were
                    fitted on val (mt/train/decode_fit.py, mt/train/confidence_fit.py)

Reading: `read_checkpoint(path)` is the one read of a checkpoint file (its one `torch.load`): a
`Checkpoint` holding the checked state, the parsed config, the tokenizer and the file's sha256.
Everything that starts from a checkpoint (inference, fine-tuning, --resume, export, the model
card) takes that value instead of reading the file again; `load_checkpoint` is the raw read
beneath it (averaging uses it as it is).

Writes are atomic: a temp file in the same folder, fsync'd, then `os.replace`d over the target
and the folder fsync'd, so a crash leaves either the old or the new file, never a torn one.

`CheckpointFiles` names the files of a run's checkpoints folder (best.pt, update_<N>.pt,
last.pt, averaged.pt; see mt/train/loop.py for when each is written) and writes them, refusing
weights that are not finite so a diverged model never replaces a good checkpoint.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, BinaryIO

import torch

from mt.config import CalibrationConfig, Config, DecodeConfig
from mt.config_load import config_from_dict, config_to_dict
from mt.data.tokenizer import Tokenizer
from mt.errors import MTError
from mt.model.ensemble import Ensemble, check_compatible
from mt.model.transformer import Transformer
from mt.textio import atomic_write, sha256_file

FORMAT_VERSION = 1
KIND = "mt-checkpoint"
# The average under validation; a run killed meanwhile leaves it behind (the next run removes it).
AVERAGE_CANDIDATE = ".averaged.candidate.pt"
# config sections that must agree for weights to be interchangeable (train/decode may differ)
_MODEL_SECTIONS = ("model", "tokenizer")


class _KeepWriteError:
    """A file wrapper that remembers why a write failed: torch.save turns an OSError (or an
    interrupt) into a RuntimeError about zip positions, and the real cause (e.g. a full disk)
    must reach the user."""

    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        self.error: BaseException | None = None

    def write(self, data: bytes) -> int:
        try:
            return self.f.write(data)
        except BaseException as e:  # OSError, or the KeyboardInterrupt of a second signal
            self.error = e
            raise

    def __getattr__(self, name: str) -> Any:  # flush, seek, tell, ...: the file's own
        return getattr(self.f, name)


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """Write `state` to `path` atomically (temp file + fsync + rename + fsync of the folder).

    A failed write (full disk, ...) is an MTError naming `path`; the previous file there is intact.
    """
    with atomic_write(Path(path)) as f:
        out = _KeepWriteError(f)
        try:
            torch.save(state, out)
        except RuntimeError:
            if out.error is not None:
                raise out.error from None  # atomic_write reports it as one line naming the file
            raise


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read and check an mt checkpoint (on CPU). Anything else is an MTError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise MTError(f"checkpoint '{path}': file not found")
    try:
        with warnings.catch_warnings():  # torch warns about foreign pickle protocols: we refuse those anyway
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    # torch raises UnpicklingError, RuntimeError, EOFError, ... for bad files
    except Exception as e:  # noqa: BLE001
        reason = "refuses to run code from it" if "Unsupported global" in str(e) else "truncated or corrupt"
        raise MTError(f"checkpoint '{path}': not a readable mt checkpoint ({reason})") from None
    if not isinstance(state, dict) or state.get("kind") != KIND:
        raise MTError(f"checkpoint '{path}': not an mt checkpoint")
    version = state.get("format_version")
    if version != FORMAT_VERSION:
        raise MTError(f"checkpoint '{path}': format version {version!r}, this mt reads {FORMAT_VERSION}")
    missing = [k for k in ("config", "tokenizer", "model", "src_vocab_size", "tgt_vocab_size", "joint_vocab")
               if k not in state]
    if missing:
        raise MTError(f"checkpoint '{path}': missing {', '.join(missing)}")
    wrong = _wrong_field(state)
    if wrong:
        raise MTError(f"checkpoint '{path}': not an mt checkpoint ({wrong})")
    return state


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# Every field a reader uses: (key, required, check, what it must be). Keys a checkpoint lacks and
# does not require are skipped; `training` is checked in depth by mt.train.state.restore.
_FIELDS: tuple[tuple[str, bool, Any, str], ...] = (
    ("config", True, lambda v: isinstance(v, dict)
     and all(isinstance(v.get(s, {}), dict) for s in _MODEL_SECTIONS), "a dict of config sections"),
    ("tokenizer", True, lambda v: isinstance(v, dict) and isinstance(v.get("src"), bytes)
     and isinstance(v.get("tgt", b""), bytes) and isinstance(v.get("vocab", b""), bytes)
     and set(v) <= {"src", "tgt", "vocab"}, "{'src': bytes, 'tgt': bytes, 'vocab': bytes}"),
    ("model", True, lambda v: isinstance(v, dict) and all(isinstance(k, str) and isinstance(t, torch.Tensor)
                                                           for k, t in v.items()), "a dict of named tensors"),
    ("src_vocab_size", True, lambda v: _is_int(v) and v > 0, "a positive integer"),
    ("tgt_vocab_size", True, lambda v: _is_int(v) and v > 0, "a positive integer"),
    ("joint_vocab", True, lambda v: isinstance(v, bool), "true or false"),
    ("update", False, lambda v: _is_int(v) and v >= 0, "a non-negative integer"),
    ("epoch", False, lambda v: _is_int(v) and v >= 0, "a non-negative integer"),
    ("training", False, lambda v: isinstance(v, dict), "a dict"),
    ("averaged_from", False, lambda v: isinstance(v, list), "a list"),
    ("averaged_updates", False, lambda v: isinstance(v, list) and all(_is_int(u) for u in v),
     "a list of integers"),
    ("valid", False, lambda v: isinstance(v, dict), "a dict"),
    ("init_from", False, lambda v: isinstance(v, dict) and isinstance(v.get("path"), str)
     and isinstance(v.get("sha256"), str) and _is_int(v.get("update")),
     "{'path': str, 'sha256': str, 'update': int}"),
)


def _wrong_field(state: dict[str, Any]) -> str:
    """'' when every known field of a loaded checkpoint has the type readers expect, else which does not."""
    for key, required, ok, what in _FIELDS:
        if (required or key in state) and not ok(state.get(key)):
            return f"'{key}' is {type(state.get(key)).__name__}, expected {what}"
    return ""


def inference_state(cfg: Config, tokenizer: Tokenizer, model: torch.nn.Module, *, update: int = 0,
                    epoch: int = 0, init_from: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything `load_for_inference` needs: config, tokenizer models, vocab sizes and weights,
    plus `init_from` (where a fine-tuned run started) when given.

    `model` may be DDP-wrapped (its module is saved).
    Weights are copied to CPU so the dict stays valid while training goes on.
    """
    module = getattr(model, "module", model)
    weights = {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()}
    state = {
        "kind": KIND,
        "format_version": FORMAT_VERSION,
        "config": config_to_dict(cfg),
        "tokenizer": dict(tokenizer.model_bytes()),
        "src_vocab_size": int(tokenizer.src_vocab_size),
        "tgt_vocab_size": int(tokenizer.tgt_vocab_size),
        "joint_vocab": bool(tokenizer.joint),
        "model": weights,
        "update": int(update),
        "epoch": int(epoch),
    }
    if cfg.data.target_tags:  # a model with target tags lists its pairs and tags (the config holds them too)
        tags = tokenizer.target_tags()
        state["pairs"] = [{"src_lang": p.src_lang, "tgt_lang": p.tgt_lang, "tag": f"<2{p.tgt_lang}>",
                           "tag_id": int(tags[p.tgt_lang])} for p in cfg.data.pairs]
    if init_from:
        state["init_from"] = dict(init_from)
    return state


def checkpoint_config(state: dict[str, Any], path: str | Path) -> Config:
    """The Config stored in a loaded checkpoint (an MTError if it no longer parses)."""
    try:
        return config_from_dict(state["config"])
    except MTError as e:
        raise MTError(f"checkpoint '{path}': stored config is invalid: {e}") from None


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint file, read once (`read_checkpoint`): its checked state (the layout above)
    and the sha256 of its bytes; its config and tokenizer are made from the state when first asked
    for (a stored config that no longer parses is an MTError naming the file then)."""

    path: Path
    sha256: str
    state: dict[str, Any]

    @cached_property
    def config(self) -> Config:
        return checkpoint_config(self.state, self.path)

    @cached_property
    def tokenizer(self) -> Tokenizer:
        tok = self.state["tokenizer"]
        return Tokenizer.from_bytes(tok["src"], tok.get("tgt"), targets=self.config.data.target_langs,
                                    vocab=tok.get("vocab"))

    @property
    def update(self) -> int:
        """The training update it was saved at (0 when unknown)."""
        return int(self.state.get("update", 0))

    @property
    def init_from(self) -> dict[str, Any] | None:
        """Where its run started ({"path", "sha256", "update"}), None when not fine-tuned."""
        record = self.state.get("init_from")
        return dict(record) if record else None

    @property
    def weights(self) -> dict[str, torch.Tensor]:
        """The model's state dict (on CPU)."""
        return self.state["model"]

    @property
    def training(self) -> dict[str, Any] | None:
        """What --resume restores beyond the weights (training checkpoints only; mt/train/state.py)."""
        return self.state.get("training")

    def model(self, device: str | torch.device) -> Transformer:
        """The Transformer it holds, in eval mode on `device`."""
        model = Transformer(self.config.model, self.state["src_vocab_size"], self.state["tgt_vocab_size"],
                            joint_vocab=self.state["joint_vocab"])
        try:
            model.load_state_dict(self.weights)
        except RuntimeError as e:
            first = str(e).strip().splitlines()[0]
            raise MTError(f"checkpoint '{self.path}': weights do not fit its model config "
                          f"({first})") from None
        return model.to(device).eval()

    def drop_tensors(self) -> None:
        """Forget the weights and the training state once they have been copied into a model and
        an optimizer (a long run need not hold them twice); config, tokenizer and records stay."""
        self.state.pop("model", None)
        self.state.pop("training", None)


def read_checkpoint(path: str | Path) -> Checkpoint:
    """The checkpoint at `path`, read and checked once (`load_checkpoint`) and its bytes hashed.
    Anything unreadable is an MTError naming the file."""
    path = Path(path)
    state = load_checkpoint(path)
    return Checkpoint(path, sha256_file(path), state)


def load_for_inference(path: str | Path, device: str | torch.device) -> tuple[Transformer, Tokenizer, Config]:
    """(Transformer in eval mode on `device`, Tokenizer, Config) from any mt checkpoint."""
    ckpt = read_checkpoint(path)
    cfg, tokenizer = ckpt.config, ckpt.tokenizer
    return ckpt.model(device), tokenizer, cfg


def same_model(a: dict[str, Any], b: dict[str, Any]) -> str:
    """'' when two checkpoint states hold interchangeable weights, else what differs."""
    for section in _MODEL_SECTIONS:
        sa, sb = a["config"].get(section, {}), b["config"].get(section, {})
        for key in sorted(set(sa) | set(sb)):
            if sa.get(key) != sb.get(key):
                return f"{section}.{key} ({sa.get(key)!r} vs {sb.get(key)!r})"
    for key in ("src_vocab_size", "tgt_vocab_size", "joint_vocab"):
        if a[key] != b[key]:
            return key
    if a["tokenizer"] != b["tokenizer"]:
        return "tokenizer model"
    return ""


def average_checkpoints(paths: list[str | Path] | list[Path], out: str | Path) -> dict[str, Any]:
    """Write the mean of the weights of `paths` to `out`, an inference checkpoint; return what was
    written (so a caller can use it without reading the file again).

    Refuses (MTError) checkpoints whose model/tokenizer config or tokenizer differ. Floating
    tensors are averaged in float64 and cast back; integer buffers must be equal. The average says
    which updates it holds (`averaged_updates`; `update` is the newest) and carries no `valid`
    record: a source's validation does not describe the mean.
    """
    paths = [Path(p) for p in paths]
    if not paths:
        raise MTError("average: no checkpoints given")
    first = load_checkpoint(paths[0])
    updates = [int(first.get("update", 0))]
    sums = {k: v.to(torch.float64) if v.is_floating_point() else v for k, v in first["model"].items()}
    for p in paths[1:]:
        state = load_checkpoint(p)
        updates.append(int(state.get("update", 0)))
        diff = same_model(first, state)
        if diff:
            raise MTError(f"average: '{p}' and '{paths[0]}' are different models: {diff}")
        if state["model"].keys() != sums.keys():
            raise MTError(f"average: '{p}' and '{paths[0]}' hold different weight names")
        for k, v in state["model"].items():
            if v.is_floating_point():
                sums[k] += v.to(torch.float64)
            elif not torch.equal(v, sums[k]):
                raise MTError(f"average: '{p}' differs from '{paths[0]}' in non-float tensor {k}")
        del state
    dtypes = {k: v.dtype for k, v in first["model"].items()}
    averaged = {k: (v / len(paths)).to(dtypes[k]) if v.is_floating_point() else v for k, v in sums.items()}
    out_state = {k: v for k, v in first.items() if k not in ("training", "valid")}
    out_state["model"] = averaged
    out_state["averaged_from"] = [p.name for p in paths]
    out_state["averaged_updates"] = updates
    out_state["update"] = max(updates)
    save_checkpoint(out, out_state)
    return out_state


class CheckpointFiles:
    """The checkpoint files of one run, in `ckpt_dir`; only rank 0 writes them.

    best.pt, last.pt, averaged.pt and update_<N>.pt, of which the newest `keep` are kept (none
    are written when `keep` <= 0). Every write first checks that the weights are finite.
    """

    def __init__(self, ckpt_dir: Path, cfg: Config, tokenizer: Tokenizer, *, keep: int,
                 init_from: dict[str, Any] | None = None) -> None:
        self.dir, self.cfg, self.tokenizer, self.keep = ckpt_dir, cfg, tokenizer, keep
        self.init_from = init_from  # recorded in every file written (fine-tuned runs)
        self.best = ckpt_dir / "best.pt"
        self.last = ckpt_dir / "last.pt"
        self.averaged = ckpt_dir / "averaged.pt"

    def state(self, model: torch.nn.Module, *, update: int, epoch: int) -> dict[str, Any]:
        """`inference_state` of `model`; an MTError (and nothing written) when a weight is not finite."""
        bad = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
        if bad:  # never replace a good checkpoint with a broken model
            raise MTError(f"train: non-finite weights ({bad[0]}, ...) at update {update}; "
                          f"checkpoints left as they were")
        return inference_state(self.cfg, self.tokenizer, model, update=update, epoch=epoch,
                               init_from=self.init_from)

    def save_best(self, model: torch.nn.Module, *, update: int, epoch: int, valid: dict[str, Any]) -> None:
        """best.pt, with the validation record that made it the best under "valid"."""
        state = self.state(model, update=update, epoch=epoch)
        state["valid"] = valid
        save_checkpoint(self.best, state)

    def save_periodic(self, model: torch.nn.Module, *, update: int, epoch: int) -> None:
        """update_<update>.pt; then only the newest `keep` periodic files are left."""
        if self.keep <= 0:
            return
        save_checkpoint(self.dir / f"update_{update}.pt", self.state(model, update=update, epoch=epoch))
        for old in self.periodic()[:-self.keep]:
            old.unlink(missing_ok=True)

    def save_last(self, model: torch.nn.Module, *, update: int, epoch: int, training: dict[str, Any]) -> None:
        """last.pt: the weights plus `training`, what --resume needs (see mt/train/state.py)."""
        state = self.state(model, update=update, epoch=epoch)
        state["training"] = training
        save_checkpoint(self.last, state)

    def periodic(self) -> list[Path]:
        """The update_<N>.pt files, oldest first."""
        found = []
        for p in self.dir.glob("update_*.pt"):
            number = p.stem.split("_", 1)[1]
            if number.isdigit():
                found.append((int(number), p))
        return [p for _, p in sorted(found)]

    def average_candidate(self, sources: list[Path]) -> tuple[Path, dict[str, Any]]:
        """The mean of `sources` in a candidate file, to validate before `keep_averaged`, and its state."""
        candidate = self.dir / AVERAGE_CANDIDATE
        return candidate, average_checkpoints(sources, candidate)

    def keep_averaged(self, candidate: Path, state: dict[str, Any], valid: dict[str, Any] | None) -> None:
        """Write the candidate's `state` as averaged.pt with its own validation record `valid`; or,
        with `valid` None, drop it and any averaged.pt of an earlier session. The candidate goes."""
        if valid is not None:
            save_checkpoint(self.averaged, {**state, "valid": valid})
            candidate.unlink(missing_ok=True)
            return
        candidate.unlink(missing_ok=True)
        self.averaged.unlink(missing_ok=True)  # a stale one would be picked by `make evaluate`


def store_decode_fit(path: Path, alpha: float, record: dict[str, Any]) -> None:
    """Rewrite the checkpoint at `path` (atomically) with decode.search.alpha = `alpha` in its config
    and `record` (how it was chosen) under "decode_fit": what translate, evaluate and serve then use."""
    state = load_checkpoint(path)
    cfg = config_from_dict(state["config"])
    fitted = dataclasses.replace(cfg.decode.search, alpha=float(alpha))
    _store_decode(state, cfg, dataclasses.replace(cfg.decode, search=fitted))
    state["decode_fit"] = record
    save_checkpoint(path, state)


def store_confidence_fit(path: Path, weights: Sequence[float], record: dict[str, Any]) -> None:
    """Rewrite the checkpoint at `path` (atomically) with decode.calibration = `weights` and the
    record's bounds (its shortest source and least share of distinct words) in its config, and
    `record` (how they were fitted) under "confidence_fit" (mt/train/confidence_fit.py)."""
    state = load_checkpoint(path)
    calibration = CalibrationConfig(weights=tuple(float(w) for w in weights),
                                    min_pieces=int(record.get("min_source_pieces", 0)),
                                    min_distinct=float(record.get("min_distinct_share", 0.0)))
    cfg = config_from_dict(state["config"])
    _store_decode(state, cfg, dataclasses.replace(cfg.decode, calibration=calibration))
    state["confidence_fit"] = record
    save_checkpoint(path, state)


def _store_decode(state: dict[str, Any], cfg: Config, decode: DecodeConfig) -> None:
    """`state`'s config (`cfg`, read from it) with its decode section replaced by `decode` (written in
    sections: an older checkpoint's flat keys go)."""
    state["config"] = config_to_dict(dataclasses.replace(cfg, decode=decode))


def ensemble_of(paths: Sequence[Path], models: Sequence[Transformer], tokenizers: Sequence[Tokenizer],
                configs: Sequence[Config]) -> Transformer | Ensemble:
    """One model as it is; several as an `Ensemble` (in eval mode), refused when their tokenizers
    or their language pairs differ."""
    if len(models) == 1:
        return models[0]
    check_compatible(list(paths), list(tokenizers),
                     [[(p.src_lang, p.tgt_lang) for p in c.data.pairs] for c in configs])
    return Ensemble(list(models)).eval()
