"""The training loop: updates, validation, checkpoints, resume, stopping, DDP.

One update = `train.accumulate` batches on each of `world_size` ranks, so the global batch is
about max_tokens × accumulate × world_size padded tokens; every schedule counts UPDATES. The
gradient is the per-target-token mean over the whole update: each micro-batch's summed loss is
scaled by world_size / (target tokens of the update summed over ranks) before backward, and DDP
averages over ranks, so N ranks equal one process accumulating the same N shards.

Per update the ranks all-reduce one small vector (their token counts, a stop flag, rank 0's clock),
so the LR, the time-budget stop and a signal on any rank are decided identically everywhere.
Rank 0 alone validates, logs and writes checkpoints; the others wait for it.

Checkpoints (run_dir/checkpoints): last.pt (full training state; what --resume reads), best.pt (best
validation BLEU, or lowest val NLL when train.valid_bleu is off), update_<N>.pt (periodic, weights
only, keep_checkpoints newest), averaged.pt (average_last > 0: the mean of the newest periodic
checkpoints, kept only if its validation BLEU is at least best.pt's: with train.fit_alpha, beam BLEU
on the fit's val lines, so whichever file `make evaluate` picks was chosen on val). Time budget:
training seconds accumulated over sessions (resume continues the count), validations included;
training stops early enough that the closing validation (and the averaged model's) fit in it too,
estimated by the duration of the latest validation. warmup, valid_every and save_every may be shares
of the run ("5%"), resolved into updates by mt/train/horizon.py. Validation (mt/train/validate.py)
runs every valid_every updates, at each epoch end and when training ends; patience counts
validations without a gain in the selection metric (early stopping). With train.ema_decay > 0
(mt/train/ema.py) an exponential moving average of the weights is what is validated and written to
best.pt and the periodic checkpoints; last.pt holds the raw weights and the average. Periodic
checkpoints are written every save_every updates, or at each validation when 0. A fresh `mt train`
refuses to overwrite an existing last.pt (use --resume, another name, or delete it).

SIGINT/SIGTERM: the current update finishes, last.pt is written, train() returns (exit code 0);
a second signal aborts at once without saving (`mt.errors.Interrupted`; the CLI exits 128 + the
signal number: 130 for SIGINT, 143 for SIGTERM, as a shell reports a signal). kill -9 or a power
cut at any moment loses nothing saved: every write is atomic, the next start removes the temp
files of cut writes and a torn last line of metrics.jsonl, and --resume continues from last.pt.
torchrun forwards SIGTERM to every rank and kills them 30 s later, so an update plus a last.pt
write must fit in that.

No host sync inside an update (mt/train/step.py): loss, NLL, gradient norm and the non-finite
check stay on the device, summed there, and the host reads them once per log line, validation
and checkpoint (`_Loop._read`); token counts and the ranks' agreement are host numbers. An update
with a NaN/inf loss or gradient is skipped on the device (the fused optimizer's found_inf: no
step, moments and step count untouched) but still counts as an update; the next read reports it,
and past max_bad_losses of them training stops with an MTError, writing nothing, so last.pt keeps
the last state saved.

Seeds: every rank initialises the model from train.seed (identical weights), then reseeds with
seed + rank so dropout streams differ between ranks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel

from mt.config import Config
from mt.config_checks import parse_duration
from mt.config_load import save_config
from mt.data.batching import Batch
from mt.data.prepare import prepare
from mt.data.splits import load_split
from mt.data.tokenizer import Tokenizer
from mt.device import resolve_device
from mt.errors import MTError
from mt.model.checkpoint import AVERAGE_CANDIDATE, CheckpointFiles
from mt.model.transformer import Transformer
from mt.textio import remove_stale_temp_files
from mt.train import distributed
from mt.train.closing import close_run, finish_fits
from mt.train.compiled import StepPlan, compile_forward, plan_step
from mt.train.distributed import DistInfo
from mt.train.ema import WeightEMA
from mt.train.epochs import TrainingData
from mt.train.feed import epoch_feed
from mt.train.horizon import RunHorizon, plan_lines
from mt.train.init_from import RunStart, load_init_weights, run_sources
from mt.train.log import PhaseTimer, TrainLog, Window
from mt.train.optim import Schedule, build_optimizer, set_lr, training_progress
from mt.train.precision import PrecisionChoice, run_precision
from mt.train.state import (
    StopReason,
    StopSignal,
    TrainState,
    count_bad_updates,
    limit_reached,
    restore,
    rng_state,
    seed_everything,
    training_state,
)
from mt.train.step import UpdateStep, autocast
from mt.train.validate import Validator, metric_name, selection_metric

CLOCK = time.perf_counter  # the training clock (a test replaces it with a fake one)


def train(cfg: Config, *, resume: bool = False, start: RunStart | None = None) -> Path:
    """Train `cfg` (preparing its data if needed) and return the checkpoint to evaluate. `start`: the
    checkpoints `start_run` read (the init checkpoint, last.pt on --resume), not read again."""
    info = distributed.env_info()
    device = resolve_device(cfg.train.device, local_rank=info.local_rank)
    if cfg.train.precision == "fp16" and device.type != "cuda":  # auto never picks fp16
        raise MTError("config key 'train.precision': fp16 needs a CUDA device; use bf16 or fp32 on CPU")
    if cfg.train.threads > 0 and device.type == "cpu":
        torch.set_num_threads(cfg.train.threads)
    distributed.init(info, device)
    cfg, choice = run_precision(cfg, info, device)
    stop = StopSignal()
    stop.install()
    finished = False
    try:
        best = _run(cfg, resume=resume, info=info, device=device, stop=stop, precision=choice, start=start)
        finished = True
        return best
    finally:
        stop.restore()
        distributed.shutdown(info, finished=finished)


def _run(cfg: Config, *, resume: bool, info: DistInfo, device: torch.device, stop: StopSignal,
         precision: PrecisionChoice, start: RunStart | None) -> Path:
    """The training run; `precision` is train.precision resolved for this device (auto -> fp32 or bf16)."""
    t = cfg.train
    run_dir = cfg.run_dir
    ckpt_dir = run_dir / "checkpoints"
    last_path = ckpt_dir / "last.pt"
    if resume and not last_path.is_file():
        raise MTError(f"train --resume: no checkpoint at '{last_path}'")
    if not resume and last_path.is_file():
        raise MTError(f"train: '{last_path}' exists; continue it with --resume, or train under another "
                      f"name (--set name=...) or delete '{ckpt_dir}'")
    stale: list[Path] = []
    if info.is_main:  # temp files of writes a kill -9 cut short (atomic_write's own pattern only)
        stale = remove_stale_temp_files(ckpt_dir) + remove_stale_temp_files(run_dir)
        if (ckpt_dir / AVERAGE_CANDIDATE).is_file():  # a kill while the average was validated
            (ckpt_dir / AVERAGE_CANDIDATE).unlink()
            stale.append(ckpt_dir / AVERAGE_CANDIDATE)
    start = run_sources(cfg, resume=resume, start=start)  # last.pt on --resume, each checkpoint read once
    source = start.source  # fine-tuning: the init checkpoint (or last.pt on --resume)
    if info.is_main:
        prepare(cfg, tokenizer=start.tokenizer)  # the init checkpoint's, told this run's target language
        save_config(cfg, run_dir / "config.yaml")
    distributed.broadcast_flag(True, info, device)  # the others wait until the data is ready
    tokenizer = Tokenizer.from_files(run_dir)
    train_split = load_split(run_dir, cfg.data.train_split)

    seed_everything(t.seed)
    model = Transformer(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size,
                        joint_vocab=tokenizer.joint).to(device)
    if source is not None and not resume:
        load_init_weights(model, source)  # a new run from trained weights; optimizer, schedule, state fresh
        source.checkpoint.drop_tensors()  # now in the model: not held twice for the whole run
    plan = plan_step(t, cfg.model, device, info.world_size)
    model.attention_kernel = "flex" if plan.flex else "sdpa"
    optimizer = build_optimizer(model, t, capturable=plan.cuda_graphs)
    scaler = torch.amp.GradScaler("cuda") if precision.precision == "fp16" else None
    ema = WeightEMA(model, t.ema_decay) if t.ema_decay > 0 else None
    log = TrainLog(run_dir, enabled=info.is_main, total_updates=t.max_updates)
    if stale:
        log.info(f"removed {len(stale)} temporary file(s) of interrupted writes: "
                 f"{', '.join(p.name for p in stale)}")
    state = TrainState(world_size=info.world_size)
    if resume:
        state = restore(start.last, cfg, tokenizer, model, optimizer, scaler, ema, rank=info.rank,
                        world_size=info.world_size, log=log.info)
        start.last.drop_tensors()  # now in the model and optimizer: not held twice for the whole run
        log.resume_at(state.update)
    else:
        seed_everything(t.seed + info.rank)  # same init on every rank (DDP checks), own dropout streams
    log.info(f"model: {model.num_parameters():,} parameters; device {device}, {info.world_size} process(es), "
             f"{torch.get_num_threads()} threads; precision {precision.precision} ({precision.reason})")
    ddp: torch.nn.Module = model
    if info.enabled:
        ddp = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None,
                                      forward_sync_buffers=False, gradient_as_bucket_view=True)

    log.info(plan.describe())
    data = TrainingData(cfg, run_dir, train_split, tokenizer, info, log.info, max_shapes=plan.max_shapes)
    files = CheckpointFiles(ckpt_dir, cfg, tokenizer, keep=t.keep_checkpoints,
                            init_from=source.record if source is not None else None)
    step = UpdateStep(model=model, ddp=ddp, optimizer=optimizer, scaler=scaler, t=t, info=info, device=device,
                      timer=PhaseTimer(), precision=precision.precision, forward=compile_forward(ddp, plan))
    validator = Validator(cfg, run_dir, tokenizer, device, lambda: autocast(precision.precision, device))
    loop = _Loop(cfg=cfg, info=info, device=device, model=model, step=step, validator=validator,
                 data=data, state=state, files=files, log=log, stop=stop, ema=ema, plan=plan)
    try:
        return loop.run()
    finally:
        log.close()


class _Loop:
    """The state of one training session; `run()` trains until a limit, a signal or early stopping."""

    def __init__(self, *, cfg: Config, info: DistInfo, device: torch.device, model: Transformer,
                 step: UpdateStep, validator: Validator, data: TrainingData, state: TrainState,
                 files: CheckpointFiles, log: TrainLog, stop: StopSignal, ema: WeightEMA | None,
                 plan: StepPlan) -> None:
        self.t, self.info, self.device, self.model, self.step, self.validator = \
            cfg.train, info, device, model, step, validator
        self.cfg_decode = cfg.decode
        self.ema, self.plan = ema, plan
        self.data, self.state, self.files, self.log, self.stop = data, state, files, log, stop
        self.optimizer, self.scaler, self.timer = step.optimizer, step.scaler, step.timer
        self.budget = parse_duration(self.t.time_budget)
        # with subword sampling: this epoch's, ~ every epoch's
        n_batches = len(data.epoch(state.epoch).batches)
        self.updates_per_epoch = math.ceil(n_batches / self.t.accumulate)
        self.horizon_updates = self.t.max_epochs * self.updates_per_epoch
        self.horizon = RunHorizon(self.t, budget=self.budget, epoch_updates=self.horizon_updates,
                                  saved=state.horizon)
        self.schedule = Schedule.from_config(self.t, d_model=cfg.model.d_model, has_horizon=bool(
            self.t.max_updates or self.horizon_updates or self.budget),
            warmup=self.horizon.warmup(state.update, state.elapsed))
        self.flops = model.flops_per_token()
        # on the device, read at log lines and checkpoints: the window's summed loss and NLL,
        # non-finite updates
        self.sums = torch.tensor([0.0, 0.0, float(state.bad_losses)], device=device)
        self.gnorm = torch.zeros((), device=device)
        self.shown_loss: float | None = None  # the last logged loss, on the progress bar
        self.window = Window()
        self.total_tokens = 0.0
        self.session_start = CLOCK()
        self.session_elapsed0 = state.elapsed
        self.session_update0 = state.update
        self.valid_seconds = self.valid_share = 0.0  # validating in this session (rank 0's clock), its share
        self.skipped_validations = 0

    def elapsed(self) -> float:
        """Training seconds over all sessions."""
        return self.session_elapsed0 + CLOCK() - self.session_start

    def run(self) -> Path:
        """Train until a limit, a signal or early stopping; returns the checkpoint to evaluate.

        One update (`_one_update`, `UpdateStep`):
          1. agree with the other ranks on the update's token counts, a stop signal and rank 0's clock
          2. set the learning rate from the schedule
          3. forward/backward per micro-batch (gradients synced across ranks on the last one)
          4. clip the gradient norm, optimizer step (skipped on a non-finite loss)
          5. log: progress bar every update, a train line every log_every
          6. validate (best.pt, periodic, last.pt) every valid_every, or save every save_every
        At each epoch end (valid_epoch_end): validate and save unless that update just did. At the end:
        `_finish`.
        """
        st, t = self.state, self.t
        for line in plan_lines(t, self.info.world_size, self.updates_per_epoch, self.horizon):
            self.log.info(line)
        reason = limit_reached(st, t)
        self.window = Window()
        while not reason:
            epoch = self.data.epoch(st.epoch)
            batches = epoch.batches
            feed = epoch_feed(epoch.split, batches, epoch.sampler, st.position, multiple=t.pad_multiple,
                              workers=self.plan.workers, pin=self.device.type == "cuda")
            while st.position < len(batches) and not reason:
                end = min(st.position + t.accumulate, len(batches))
                chunk = [next(feed) for _ in range(st.position, end)]
                reason = self._one_update(chunk, epoch.global_tgt[st.position:end].sum(),
                                          epoch.global_src[st.position:end].sum(), end)
            feed.close()  # (workers stop)
            if st.position >= len(batches):  # the epoch is done (also after a final update in it)
                st.epoch += 1
                st.position = 0
                validated = (t.valid_epoch_end and st.last_valid_update != st.update
                             and self._validation_fits() and self._validate_and_save(why="epoch end"))
                if validated and not reason:  # validated and patience ran out
                    reason = StopReason.EARLY_STOPPING
                if not reason:
                    reason = limit_reached(self.state, self.t)
        return self._finish(reason)

    def _one_update(self, chunk: list[Batch], global_tgt: float, global_src: float,
                    end: int) -> StopReason | None:
        """Agree with the other ranks, run one update (skipped on the device when not finite), report;
        returns a stop reason or None. Reads nothing back from the device except at a log line."""
        st, t, info = self.state, self.t, self.info
        self.timer.mark()
        # 1. rank 0's clock, plus the time the closing validation(s) will take, so they fit the budget too
        now = self.elapsed() if info.is_main else 0.0  # (other ranks add 0: rank 0's clock is the one)
        any_stop, elapsed, now, valid_s = distributed.host_sum(
            [float(self.stop.signum != 0), now + st.final_reserve * info.is_main, now,
             self.valid_seconds * info.is_main], info)
        self.valid_share = valid_s / max(now - self.session_elapsed0, 1e-9)  # the same on every rank
        if any_stop:
            return StopReason.SIGNAL
        if self.budget and elapsed >= self.budget:
            return StopReason.TIME_BUDGET
        # 2. learning rate (warmup resolved from the measured speed when it is a share of a time budget)
        for line in self.horizon.observe(st.update, st.update - self.session_update0, now):
            self.log.info(line)
        st.horizon = self.horizon.saved()
        self.schedule = dataclasses.replace(self.schedule, warmup=self.horizon.warmup(st.update, now))
        progress = training_progress(st.update, elapsed, max_updates=t.max_updates, time_budget=self.budget,
                                     horizon_updates=self.horizon_updates)
        lr = self.schedule.lr_at(st.update + 1, progress)
        set_lr(self.optimizer, lr)
        # 3-4. forward/backward, clip, step
        result = self.step(chunk, scale=info.world_size / global_tgt)
        st.position = end
        st.update += 1  # a non-finite update counts too: skipped on the device, reported at the next read
        self.sums += torch.stack([result.loss, result.nll, result.bad.to(self.sums.dtype)])
        self.gnorm = result.gnorm
        if self.ema is not None:
            self.ema.update(st.update)
        # 5. log
        self.total_tokens += global_tgt
        self.window.add(tgt_tokens=global_tgt, src_tokens=global_src)
        self.log.step(loss=self.shown_loss, lr=lr, tok_s=self.window.tgt_tokens / self.window.seconds(),
                      left_s=(self.budget - elapsed) if self.budget else None)
        if st.update % t.log_every == 0:
            self.window.loss, self.window.nll, gnorm = self._read()
            self.shown_loss = self.window.loss / max(self.window.tgt_tokens, 1.0)
            self.log.train(self.window, update=st.update, epoch=st.epoch, wall=self.elapsed(), lr=lr,
                           gnorm=gnorm, flops=self.flops)
            self.sums[:2].zero_()
            self.window = Window()
        # 6. validate and/or save
        early = False
        valid_every, save_every = self.horizon.every("valid_every"), self.horizon.every("save_every")
        if valid_every and st.update % valid_every == 0 and self._validation_fits():
            early = self._validate_and_save(why="valid_every")
        elif save_every and st.update % save_every == 0:
            self._save_periodic()
            self._save_last()
        if early:
            return StopReason.EARLY_STOPPING
        return limit_reached(self.state, self.t)

    def _read(self) -> tuple[float, float, float]:
        """The host's one read of the device's figures, at log lines, validations and checkpoints:
        (the window's summed loss, summed NLL, the last update's gradient norm). Non-finite updates
        are counted from it: too many stop training before anything more is written."""
        loss, nll, bad, gnorm = torch.cat([self.sums, self.gnorm.reshape(1).to(self.sums.dtype)]).tolist()
        count_bad_updates(self.state, self.t, self.log, self.files.last, int(bad))
        return loss, nll, gnorm

    def _validation_fits(self) -> bool:
        """False while validations have taken train.valid_max_share of this session (the share as of
        the last update, agreed by every rank): that validation is skipped, and said once."""
        if not self.t.valid_max_share or self.valid_share < self.t.valid_max_share:
            return True
        if not self.skipped_validations:
            self.log.info(f"validation skipped from update {self.state.update}: validations took "
                          f"{self.valid_share:.1%} of this session "
                          f"(train.valid_max_share {self.t.valid_max_share:.1%})")
        self.skipped_validations += 1
        return False

    def _validate_and_save(self, *, why: str) -> bool:
        """Validate on rank 0, write best/periodic/last checkpoints; True when patience ran out."""
        st, t = self.state, self.t
        self._read()
        self.timer.mark()
        started = CLOCK()
        early = False
        if self.info.is_main:
            with self.smoothed():
                record = self.validator(self.model)
            record.update(update=st.update, epoch=st.epoch, wall=round(self.elapsed(), 2), kind="valid")
            metric = selection_metric(record)
            improved = metric > st.best_metric
            if improved:
                st.best_metric, st.best_update, st.bad_validations = metric, st.update, 0
                with self.smoothed():
                    self.files.save_best(self.model, update=st.update, epoch=st.epoch, valid=record)
            else:
                st.bad_validations += 1
            early = bool(t.patience) and st.bad_validations >= t.patience
            st.history.append(record)
            self.log.validation(record, why=why, improved=improved, early=early)
            # the end of training validates once more (twice with averaging): keep that time in the budget
            st.final_reserve = self.timer.since_mark() * (2 if t.average_last > 0 else 1)
        self.window.exclude(self.timer.since_mark())  # tok/s counts training time only
        st.last_valid_update = st.update
        early = distributed.broadcast_flag(early, self.info, self.device)
        save_every = self.horizon.every("save_every")
        if save_every == 0 or st.update % save_every == 0:  # validating must not skip a periodic one
            self._save_periodic()
        self._save_last()
        self.timer.lap("validation")
        self.valid_seconds += CLOCK() - started
        return early

    def smoothed(self) -> contextlib.AbstractContextManager:
        """The weights that are validated and saved for use: the EMA's with train.ema_decay, else the
        model's."""
        return self.ema.applied() if self.ema is not None else contextlib.nullcontext()

    def _save_periodic(self) -> None:
        self._read()
        if self.info.is_main:
            with self.smoothed():
                self.files.save_periodic(self.model, update=self.state.update, epoch=self.state.epoch)

    def _save_last(self) -> None:
        """Full training state in last.pt (every rank's RNG gathered to rank 0)."""
        self._read()
        rngs = distributed.gather_objects(rng_state(), self.info, self.device)
        if not self.info.is_main:
            return
        st = self.state
        st.elapsed = self.elapsed()
        self.files.save_last(self.model, update=st.update, epoch=st.epoch,
                             training=training_state(st, self.optimizer, self.scaler, rngs, self.ema))

    def _finish(self, reason: StopReason) -> Path:
        st, files = self.state, self.files
        best = files.best
        if reason is StopReason.SIGNAL:
            self._save_last()
            self.log.info(f"stopped by signal at update {st.update}: {files.last} saved; "
                          f"continue with `mt train ... --resume`")
            if not best.is_file():  # stopped before the first validation
                best = files.last
        elif st.update == self.session_update0 and best.is_file():
            # A resumed run whose limits were already reached: nothing changed, so nothing is redone.
            best = files.averaged if files.averaged.is_file() else best
            if self.info.is_main:
                finish_fits(best, validator=self.validator, t=self.t, decode=self.cfg_decode,
                            device=self.device, report=self.log.info)
            self.log.info(f"training already finished ({reason.value}) at update {st.update}; "
                          f"nothing to do: {best}")
            return best
        else:
            if st.last_valid_update != st.update:  # else last.pt was written at that validation
                self._validate_and_save(why="end")
            self.log.info(f"training finished ({reason.value}) at update {st.update}, epoch {st.epoch}; "
                          f"best {metric_name(self.t.valid_bleu)} {abs(st.best_metric):.2f} "
                          f"at update {st.best_update}")
            if self.budget and self.horizon.estimate:
                off = (st.update - self.horizon.estimate) / self.horizon.estimate * 100
                self.log.info(f"plan: ~{self.horizon.estimate:,} updates, made {st.update:,} ({off:+.1f}%)")
            if self.info.is_main:
                best = close_run(best, files=files, validator=self.validator, t=self.t,
                                 decode=self.cfg_decode, device=self.device, log=self.log,
                                 best_metric=st.best_metric,
                                 where=lambda: {"update": st.update, "epoch": st.epoch,
                                                "wall": round(self.elapsed(), 2)})
        self.log.session(self.elapsed() - self.session_elapsed0, tokens=self.total_tokens, timer=self.timer,
                         skipped=self.skipped_validations, max_share=self.t.valid_max_share)
        return best
