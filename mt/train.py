"""The training loop: updates, validation, checkpoints, resume, stopping, DDP.

One update = `train.accumulate` batches on each of `world_size` ranks, so the global batch is
about max_tokens × accumulate × world_size padded tokens; every schedule counts UPDATES. The
gradient is the per-target-token mean over the whole update: each micro-batch's summed loss is
scaled by world_size / (target tokens of the update summed over ranks) before backward, and DDP
averages over ranks, so N ranks equal one process accumulating the same N shards.

Per update the ranks all-reduce one small vector (their token counts, a stop flag, rank 0's clock),
so the LR, the time-budget stop and a signal on any rank are decided identically everywhere.
Rank 0 alone validates, logs and writes checkpoints; the others wait for it.

Checkpoints (run_dir/checkpoints): last.pt (full training state; what --resume reads), best.pt
(best validation BLEU, or lowest val NLL when train.valid_bleu is off), update_<N>.pt (periodic,
weights only, keep_checkpoints newest), averaged.pt (average_last > 0: the mean of the newest
periodic checkpoints, kept only if its validation BLEU is at least best.pt's, so whichever file
`make evaluate` picks was chosen on the validation set). Time budget: training seconds
accumulated over sessions (resume continues the count), validations included; training stops
early enough that the closing validation (and the averaged model's) fit in it too, estimated
by the duration of the latest validation.

Validation (mt/validate.py) runs every valid_every updates, at each epoch end and when training
ends; patience counts validations without a gain in the selection metric (early stopping).
Periodic checkpoints are written every save_every updates, or at each validation when 0. A fresh
`mt train` refuses to overwrite an existing last.pt (use --resume, another name, or delete it).

SIGINT/SIGTERM: the current update finishes, last.pt is written, train() returns (exit code 0);
a second signal aborts at once (exit 130 via the CLI). torchrun forwards SIGTERM to every rank
and kills them 30 s later, so an update plus a last.pt write must fit in that. NaN/inf losses
skip the update (no optimizer step); past max_bad_losses of them training stops with an MTError,
writing nothing, so last.pt keeps the last good state.

Seeds: every rank initialises the model from train.seed (identical weights), then reseeds with
seed + rank so dropout streams differ between ranks.
"""

from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from mt import distributed
from mt.batching import TokenBatchSampler, collate
from mt.checkpoint import inference_state, save_checkpoint
from mt.config import Config, parse_duration, save_config
from mt.distributed import DistInfo
from mt.errors import MTError
from mt.optim import Schedule, build_optimizer, label_smoothed_nll, set_lr, training_progress
from mt.trainlog import PhaseTimer, TrainLog
from mt.trainstate import StopSignal, TrainState, restore, rng_state, seed_everything, training_checkpoint
from mt.validate import Validator, selection_metric


def train(cfg: Config, *, resume: bool = False) -> Path:
    """Train `cfg` (preparing its data if needed) and return the checkpoint to evaluate."""
    info = distributed.env_info()
    device = distributed.resolve_device(cfg.train.device, local_rank=info.local_rank)
    if cfg.train.precision == "fp16" and device.type != "cuda":
        raise MTError("config key 'train.precision': fp16 needs a CUDA device; use bf16 or fp32 on CPU")
    if cfg.train.threads > 0 and device.type == "cpu":
        torch.set_num_threads(cfg.train.threads)
    distributed.init(info, device)
    stop = StopSignal()
    stop.install()
    try:
        return _run(cfg, resume=resume, info=info, device=device, stop=stop)
    finally:
        stop.restore()
        distributed.shutdown(info)


def _run(cfg: Config, *, resume: bool, info: DistInfo, device: torch.device, stop: StopSignal) -> Path:
    from mt.model import Transformer
    from mt.prepare import load_split, prepare
    from mt.tokenizer import Tokenizer

    t = cfg.train
    run_dir = cfg.run_dir
    ckpt_dir = run_dir / "checkpoints"
    last_path = ckpt_dir / "last.pt"
    if resume and not last_path.is_file():
        raise MTError(f"train --resume: no checkpoint at '{last_path}'")
    if not resume and last_path.is_file():
        raise MTError(f"train: '{last_path}' exists; continue it with --resume, or train under another "
                      f"name (--set name=...) or delete '{ckpt_dir}'")
    if info.is_main:
        prepare(cfg)
        save_config(cfg, run_dir / "config.yaml")
    distributed.broadcast_flag(True, info, device)  # the others wait until the data is ready
    tokenizer = Tokenizer.from_files(run_dir)
    train_split = load_split(run_dir, cfg.data.train_split)
    valid_split = load_split(run_dir, cfg.data.valid_split)

    seed_everything(t.seed)
    model = Transformer(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size,
                        joint_vocab=tokenizer.joint).to(device)
    optimizer = build_optimizer(model, t)
    scaler = torch.amp.GradScaler("cuda") if t.precision == "fp16" else None
    log = TrainLog(run_dir, enabled=info.is_main, total_updates=t.max_updates, start_update=0)
    state = TrainState(world_size=info.world_size)
    if resume:
        state = restore(last_path, cfg, tokenizer, model, optimizer, scaler, rank=info.rank,
                        world_size=info.world_size, log=log.info)
        if log.bar is not None:
            log.bar.n = state.update
    else:
        seed_everything(t.seed + info.rank)  # same init on every rank (DDP checks), own dropout streams
    log.info(f"model: {model.num_parameters():,} parameters; device {device}, {info.world_size} process(es), "
             f"{torch.get_num_threads()} threads; precision {t.precision}")
    ddp = model
    if info.enabled:
        ddp = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None,
                                      forward_sync_buffers=False, gradient_as_bucket_view=True)

    sampler = TokenBatchSampler(train_split.src.lengths(), train_split.tgt.lengths(), max_tokens=t.max_tokens,
                                max_sentences=t.max_sentences, seed=t.seed, rank=info.rank,
                                world_size=info.world_size)
    loop = _Loop(cfg=cfg, info=info, device=device, model=model, ddp=ddp, optimizer=optimizer, scaler=scaler,
                 tokenizer=tokenizer, train_split=train_split, valid_split=valid_split, sampler=sampler,
                 state=state, log=log, stop=stop)
    try:
        return loop.run()
    finally:
        log.close()


class _Loop:
    """The state of one training session; `run()` trains until a limit, a signal or early stopping."""

    def __init__(self, *, cfg: Config, info: DistInfo, device: torch.device, model: torch.nn.Module,
                 ddp: torch.nn.Module, optimizer: torch.optim.Optimizer, scaler: Any, tokenizer: Any,
                 train_split: Any, valid_split: Any, sampler: TokenBatchSampler, state: TrainState,
                 log: TrainLog, stop: StopSignal) -> None:
        self.cfg, self.t, self.info, self.device = cfg, cfg.train, info, device
        self.model, self.ddp, self.optimizer, self.scaler = model, ddp, optimizer, scaler
        self.tokenizer, self.train_split, self.valid_split = tokenizer, train_split, valid_split
        self.sampler, self.state, self.log, self.stop = sampler, state, log, stop
        self.ckpt_dir = cfg.run_dir / "checkpoints"
        self.budget = parse_duration(self.t.time_budget)
        self.src_len = train_split.src.lengths() + 1  # + EOS
        self.tgt_len = train_split.tgt.lengths() + 1  # + EOS: the target tokens of the loss
        self.params = [p for p in model.parameters() if p.requires_grad]
        n_batches = len(sampler.epoch_batches(state.epoch))
        self.updates_per_epoch = math.ceil(n_batches / self.t.accumulate)
        horizon = self.t.max_epochs * self.updates_per_epoch
        self.horizon_updates = horizon
        self.schedule = Schedule.from_config(self.t, d_model=cfg.model.d_model,
                                             has_horizon=bool(self.t.max_updates or horizon or self.budget))
        self.timer = PhaseTimer()
        self.flops = _flops_per_token(model)
        self.validator = Validator(cfg, valid_split, tokenizer, device, self._autocast)
        self._window = np.zeros(5)  # loss, nll, tgt tokens, src tokens, updates since the last log line
        self.total_tokens = 0.0
        self.session_start = time.perf_counter()
        self.session_elapsed0 = state.elapsed
        self.session_update0 = state.update

    # ---- the loop -------------------------------------------------------------------------------
    def elapsed(self) -> float:
        return self.session_elapsed0 + time.perf_counter() - self.session_start

    def run(self) -> Path:
        st, t = self.state, self.t
        if self.t.average_last > self.t.keep_checkpoints:
            self.log.info(f"note: average_last={t.average_last} > keep_checkpoints={t.keep_checkpoints}: "
                          f"averaging at most {t.keep_checkpoints}")
        global_batch = t.max_tokens * t.accumulate * self.info.world_size
        self.log.info(f"training: global batch ≤ {t.max_tokens} max_tokens × {t.accumulate} accumulate × "
                      f"{self.info.world_size} rank(s) = {global_batch} padded tokens per update; "
                      f"{self.updates_per_epoch} updates/epoch; schedule {t.schedule} (warmup {t.warmup} updates)")
        reason = self._limit_reached()
        self._window_start = time.perf_counter()
        while not reason:
            batches = self.sampler.epoch_batches(st.epoch)
            tgt_tokens = np.array([self.tgt_len[b].sum() for b in batches], dtype=np.float64)
            src_tokens = np.array([self.src_len[b].sum() for b in batches], dtype=np.float64)
            while st.position < len(batches) and not reason:
                end = min(st.position + t.accumulate, len(batches))
                reason = self._one_update(batches[st.position:end], tgt_tokens[st.position:end].sum(),
                                          src_tokens[st.position:end].sum(), end)
            if st.position >= len(batches):  # the epoch is done (also after a final update in it)
                st.epoch += 1
                st.position = 0
                if st.last_valid_update != st.update:
                    if self._validate_and_save(why="epoch end") and not reason:
                        reason = "early stopping"
                if not reason:
                    reason = self._limit_reached()
        return self._finish(reason)

    def _limit_reached(self) -> str:
        st, t = self.state, self.t
        if t.max_updates and st.update >= t.max_updates:
            return "max_updates"
        if t.max_epochs and st.epoch > t.max_epochs:
            return "max_epochs"
        return ""

    def _one_update(self, chunk: list[np.ndarray], local_tgt: float, local_src: float, end: int) -> str:
        """Agree with the other ranks, run one update (or skip it), report; returns a stop reason or ''."""
        st, t, info = self.state, self.t, self.info
        self.timer.mark()
        # rank 0's clock, plus the time the closing validation(s) will take, so they fit the budget too
        clock = self.elapsed() + st.final_reserve if info.is_main else 0.0
        sync = torch.tensor([local_tgt, local_src, float(self.stop.signum != 0), clock], dtype=torch.float64,
                            device=self.device)
        global_tgt, global_src, any_stop, elapsed = distributed.all_reduce_sum(sync, info).tolist()
        if any_stop:
            return "signal"
        if self.budget and elapsed >= self.budget:
            return "time_budget"
        progress = training_progress(st.update, elapsed, max_updates=t.max_updates, time_budget=self.budget,
                                     horizon_updates=self.horizon_updates)
        lr = self.schedule.lr_at(st.update + 1, progress)
        set_lr(self.optimizer, lr)
        loss, nll, gnorm, ok = self._step(chunk, scale=info.world_size / global_tgt)
        st.position = end
        if not ok:
            st.bad_losses += 1
            if st.bad_losses > t.max_bad_losses:  # no checkpoint now: last.pt keeps the last good state
                raise MTError(f"train: {st.bad_losses} non-finite losses (train.max_bad_losses={t.max_bad_losses}); "
                              f"stopped at update {st.update}, the last good state is in "
                              f"{self.ckpt_dir / 'last.pt'}; try a lower train.lr or fp32")
            self.log.info(f"warning: non-finite loss/gradient at update {st.update + 1} (loss {loss}, grad norm "
                          f"{gnorm}); update skipped ({st.bad_losses}/{t.max_bad_losses})")
            return ""
        st.update += 1
        self.total_tokens += global_tgt
        self._window += (loss, nll, global_tgt, global_src, 1)
        self.log.step(loss=loss / global_tgt, lr=lr, tok_s=self._window[2] / max(1e-9, time.perf_counter()
                      - self._window_start), left_s=(self.budget - elapsed) if self.budget else None)
        if st.update % t.log_every == 0:
            self._log_train(lr, gnorm)
        early = False
        if t.valid_every and st.update % t.valid_every == 0:
            early = self._validate_and_save(why="valid_every")
        elif t.save_every and st.update % t.save_every == 0:
            self._save_periodic()
            self._save_last()
        if early:
            return "early stopping"
        return self._limit_reached()

    def _step(self, chunk: list[np.ndarray], *, scale: float) -> tuple[float, float, float, bool]:
        """Forward/backward over the micro-batches of one update and the optimizer step.

        Returns (summed loss, summed NLL over all ranks, gradient norm, whether the step was taken).
        """
        src_ids, tgt_ids = self.train_split.src, self.train_split.tgt
        loss_acc = torch.zeros((), device=self.device)
        nll_acc = torch.zeros((), device=self.device)
        for i, idx in enumerate(chunk):
            batch = collate([src_ids[j] for j in idx], [tgt_ids[j] for j in idx], idx).to(self.device)
            self.timer.lap("data")
            last = i == len(chunk) - 1
            no_sync = self.ddp.no_sync() if (self.info.enabled and not last) else contextlib.nullcontext()
            with no_sync:
                with self._autocast():
                    logits = self.ddp(batch.src, batch.src_mask, batch.tgt_in)  # (B, T, V)
                loss, nll, _ = label_smoothed_nll(logits, batch.tgt_out, self.t.label_smoothing)
                scaled = loss * scale
                (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
            loss_acc += loss.detach()
            nll_acc += nll
            self.timer.lap("forward_backward")
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        grads = [p.grad for p in self.params if p.grad is not None]
        gnorm = torch.nn.utils.get_total_norm(grads)
        if self.t.clip_norm > 0:
            torch.nn.utils.clip_grads_with_norm_(self.params, self.t.clip_norm, gnorm)
        stats = distributed.all_reduce_sum(torch.stack([loss_acc, nll_acc]), self.info)
        loss_v, nll_v, gnorm_v = torch.cat([stats, gnorm.reshape(1).to(stats.dtype)]).tolist()  # the one sync
        ok = math.isfinite(loss_v) and (math.isfinite(gnorm_v) or self.scaler is not None)
        if ok:
            if self.scaler is not None:
                self.scaler.step(self.optimizer)  # skips the step itself on fp16 overflow
                self.scaler.update()
            else:
                self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.timer.lap("optimizer")
        return loss_v, nll_v, gnorm_v, ok

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.t.precision == "fp32":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.t.precision == "bf16" else torch.float16
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    # ---- reporting ------------------------------------------------------------------------------
    def _log_train(self, lr: float, gnorm: float) -> None:
        st = self.state
        loss, nll, tgt, src, _ = self._window
        seconds = max(1e-9, time.perf_counter() - self._window_start)
        tok_s = tgt / seconds
        gflops = (src * self.flops[0] + tgt * self.flops[1]) / seconds / 1e9
        record = {"kind": "train", "update": st.update, "epoch": st.epoch, "wall": round(self.elapsed(), 2),
                  "loss": loss / tgt, "nll": nll / tgt, "ppl": math.exp(min(nll / tgt, 50.0)), "lr": lr,
                  "grad_norm": gnorm, "tok_s": round(tok_s, 1), "gflop_s": round(gflops, 2)}
        self.log.metrics(record)
        self.log.info(f"update {st.update} | epoch {st.epoch} | loss {record['loss']:.3f} | nll {record['nll']:.3f} "
                      f"| ppl {record['ppl']:.1f} | lr {lr:.2e} | gnorm {gnorm:.2f} | {tok_s:,.0f} tgt tok/s "
                      f"| ~{gflops:.1f} GFLOP/s | {_clock(self.elapsed())}")
        self._window[:] = 0
        self._window_start = time.perf_counter()

    # ---- validation and checkpoints -------------------------------------------------------------
    def _validate_and_save(self, *, why: str) -> bool:
        """Validate on rank 0, write best/periodic/last checkpoints; True when patience ran out."""
        st, t = self.state, self.t
        self.timer.mark()
        early = False
        if self.info.is_main:
            record = self.validator(self.model)
            record.update(update=st.update, epoch=st.epoch, wall=round(self.elapsed(), 2), kind="valid")
            metric = selection_metric(record)
            improved = metric > st.best_metric
            if improved:
                st.best_metric, st.best_update, st.bad_validations = metric, st.update, 0
                save_checkpoint(self.ckpt_dir / "best.pt", self._inference_state(extra={"valid": record}))
            else:
                st.bad_validations += 1
            early = bool(t.patience) and st.bad_validations >= t.patience
            st.history.append(record)
            self.log.metrics(record)
            scores = f" | BLEU {record['bleu']:.2f} | chrF {record['chrf']:.2f}" if "bleu" in record else ""
            self.log.info(f"valid ({why}) update {st.update} | loss {record['loss']:.3f} | nll {record['nll']:.3f} | "
                          f"ppl {record['ppl']:.2f}{scores}{' | new best' if improved else ''}"
                          f"{' | early stopping' if early else ''}")
            # the end of training validates once more (twice with averaging): keep that time in the budget
            seconds = time.perf_counter() - self.timer.last_mark
            st.final_reserve = seconds * (2 if t.average_last > 0 else 1)
        self._window_start += time.perf_counter() - self.timer.last_mark  # tok/s counts training time only
        st.last_valid_update = st.update
        early = distributed.broadcast_flag(early, self.info, self.device)
        if t.save_every == 0:
            self._save_periodic()
        self._save_last()
        self.timer.lap("validation")
        return early

    def _metric_name(self) -> str:
        return "val BLEU" if self.t.valid_bleu else "val NLL"

    def _inference_state(self, *, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        bad = [n for n, p in self.model.named_parameters() if not torch.isfinite(p).all()]
        if bad:  # never replace a good checkpoint with a broken model
            raise MTError(f"train: non-finite weights ({bad[0]}, ...) at update {self.state.update}; "
                          f"checkpoints left as they were")
        state = inference_state(self.cfg, self.tokenizer, self.model, update=self.state.update,
                                epoch=self.state.epoch)
        state.update(extra or {})
        return state

    def _save_periodic(self) -> None:
        if not self.info.is_main or self.t.keep_checkpoints <= 0:
            return
        save_checkpoint(self.ckpt_dir / f"update_{self.state.update}.pt", self._inference_state())
        for old in periodic_checkpoints(self.ckpt_dir)[:-self.t.keep_checkpoints]:
            old.unlink(missing_ok=True)

    def _save_last(self) -> None:
        """Full training state in last.pt (every rank's RNG gathered to rank 0)."""
        rngs = distributed.gather_objects(rng_state(), self.info)
        if not self.info.is_main:
            return
        self.state.elapsed = self.elapsed()
        save_checkpoint(self.ckpt_dir / "last.pt",
                        training_checkpoint(self._inference_state(), self.state, self.optimizer, self.scaler, rngs))

    def _finish(self, reason: str) -> Path:
        st = self.state
        best = self.ckpt_dir / "best.pt"
        if reason == "signal":
            self._save_last()
            self.log.info(f"stopped by signal at update {st.update}: {self.ckpt_dir / 'last.pt'} saved; "
                          f"continue with `mt train ... --resume`")
            if not best.is_file():  # stopped before the first validation
                best = self.ckpt_dir / "last.pt"
        elif st.update == self.session_update0 and best.is_file():
            # A resumed run whose limits were already reached: nothing changed, so nothing is redone.
            averaged = self.ckpt_dir / "averaged.pt"
            best = averaged if averaged.is_file() else best
            self.log.info(f"training already finished ({reason}) at update {st.update}; nothing to do: {best}")
            return best
        else:
            if st.last_valid_update != st.update:  # else last.pt was written at that validation
                self._validate_and_save(why="end")
            self.log.info(f"training finished ({reason}) at update {st.update}, epoch {st.epoch}; best "
                          f"{self._metric_name()} {abs(st.best_metric):.2f} at update {st.best_update}")
            if self.t.average_last > 0 and self.info.is_main:
                best = self._average(best)
        seconds = self.elapsed() - self.session_elapsed0
        busy = max(seconds - self.timer.seconds.get("validation", 0.0), 1e-9)
        self.log.info(f"session: {seconds:.0f}s, {self.total_tokens / busy:,.0f} target tokens/s while training "
                      f"({self.total_tokens / max(seconds, 1e-9):,.0f} overall); time per phase: {self.timer.summary()}")
        return best

    def _average(self, best: Path) -> Path:
        """averaged.pt from the newest periodic checkpoints, kept only if it validates at least as well."""
        from mt.checkpoint import average_checkpoints, load_for_inference

        sources = periodic_checkpoints(self.ckpt_dir)[-self.t.average_last:]
        out = self.ckpt_dir / "averaged.pt"
        if len(sources) < 2:
            self.log.info(f"averaging skipped: {len(sources)} periodic checkpoint(s)")
            return best
        tmp = self.ckpt_dir / ".averaged.candidate.pt"
        average_checkpoints(sources, tmp)
        model, _, _ = load_for_inference(tmp, self.device)
        record = self.validator(model)
        metric = selection_metric(record)
        record.update(kind="averaged", update=self.state.update, epoch=self.state.epoch,
                      wall=round(self.elapsed(), 2), sources=[p.name for p in sources])
        self.log.metrics(record)
        if metric >= self.state.best_metric:
            tmp.replace(out)
            self.log.info(f"averaged {len(sources)} checkpoints -> {out} ({self._metric_name()} "
                          f"{abs(metric):.2f}, best.pt {abs(self.state.best_metric):.2f})")
            return out
        tmp.unlink(missing_ok=True)
        out.unlink(missing_ok=True)  # a stale one from an earlier session would be picked by `make evaluate`
        self.log.info(f"averaged checkpoints validate worse ({self._metric_name()} {abs(metric):.2f}, best.pt "
                      f"{abs(self.state.best_metric):.2f}): not written; use best.pt")
        return best


def periodic_checkpoints(ckpt_dir: Path) -> list[Path]:
    """update_<N>.pt files, oldest first."""
    found = []
    for p in ckpt_dir.glob("update_*.pt"):
        number = p.stem.split("_", 1)[1]
        if number.isdigit():
            found.append((int(number), p))
    return [p for _, p in sorted(found)]


def _flops_per_token(model: torch.nn.Module) -> tuple[float, float]:
    """≈ 6 × matrix parameters a token passes through: (FLOPs per source token, per target token).

    Source tokens pass the encoder; target tokens the decoder and the output projection.
    Attention-score FLOPs (short sentences) and embedding lookups are left out.
    """
    def count(prefix: str) -> int:
        return sum(p.numel() for n, p in model.named_parameters() if n.startswith(prefix) and p.dim() >= 2)

    out = model.tgt_embed.weight.numel()  # the output projection (tied or not, the same size)
    return 6.0 * count("encoder"), 6.0 * (count("decoder") + out)


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
