"""Few batch shapes, each compiled once (issue 63): the shape grid of `TokenBatchSampler`
(`train.max_shapes`), empty rows out of the loss, and the compiled step (aot_eager on the CPU:
no C++ build) recording one graph per shape, no recompile afterwards, eager's losses."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

from mt.config import Config, ModelConfig, TrainConfig
from mt.data.batching import TokenBatchSampler, collate
from mt.data.splits import load_split
from mt.model.transformer import Transformer
from mt.train.compiled import StepPlan, compile_forward, plan_step
from mt.train.distributed import DistInfo
from mt.train.log import PhaseTimer
from mt.train.optim import build_optimizer
from mt.train.step import UpdateStep, batch_loss

V = 40


def shapes_of(sampler: TokenBatchSampler, batches: list[np.ndarray], src: np.ndarray, tgt: np.ndarray) -> set:
    shapes = set()
    for b in batches:
        rows, s, t = sampler.shape_of(b)
        assert len(b) <= rows and src[b].max() + 1 <= s and tgt[b].max() + 1 <= t
        assert rows * (s + t) <= max(sampler.max_tokens, s + t)  # the token budget still holds
        shapes.add((rows, s, t))
    return shapes


@pytest.mark.parametrize("k", [8, 32])
def test_an_epoch_of_multi30k_has_at_most_k_shapes(tiny_run: Config, k: int) -> None:
    """The prepared Multi30k training split, one process and each of two ranks: <= K shapes."""
    split = load_split(tiny_run.run_dir, "train")
    src, tgt = split.src.lengths(), split.tgt.lengths()
    plain = TokenBatchSampler(src, tgt, max_tokens=2000, max_sentences=512, seed=1)
    assert plain.shape_of(plain.epoch_batches(1)[0]) is None
    for rank, world in ((0, 1), (0, 2), (1, 2)):
        sampler = TokenBatchSampler(src, tgt, max_tokens=2000, max_sentences=512, seed=1, max_shapes=k,
                                    rank=rank, world_size=world)
        batches = sampler.epoch_batches(1)
        assert len(np.concatenate(batches)) >= len(src) // world - 2000  # (DDP drops the last batches)
        assert 1 < len(shapes_of(sampler, batches, src, tgt)) <= k


def tiny_model(seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    cfg = ModelConfig(d_model=16, heads=2, encoder_layers=1, decoder_layers=1, d_ff=32, dropout=0.0,
                      attention_dropout=0.0, max_positions=64)
    return Transformer(cfg, V, V, joint_vocab=True).train()


def synthetic(n: int = 160, seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return ([rng.integers(4, V, rng.integers(1, 14)) for _ in range(n)],
            [rng.integers(4, V, rng.integers(1, 14)) for _ in range(n)])


def test_empty_rows_are_out_of_the_loss() -> None:
    """A batch padded to a larger grid shape (3 empty rows, wider source and target): the same
    summed loss, NLL, token count and gradients as the batch as packed."""
    srcs, tgts = synthetic(6)
    plain = collate(srcs, tgts, np.arange(6))
    shaped = collate(srcs, tgts, np.arange(6), shape=(9, plain.src.size(1) + 3, plain.tgt_in.size(1) + 5))
    assert shaped.indices.tolist()[6:] == [-1, -1, -1] and shaped.num_tgt_tokens == plain.num_tgt_tokens
    out = []
    for b in (plain, shaped):
        net = tiny_model()
        loss, nll, n = batch_loss(net, net, b, 0.1)
        loss.backward()
        out.append((loss.detach(), nll, n, [p.grad for p in net.parameters()]))
    torch.testing.assert_close(out[1][:3], out[0][:3], atol=1e-5, rtol=1e-6)
    for g, g2 in zip(out[0][3], out[1][3]):
        torch.testing.assert_close(g2, g, atol=1e-6, rtol=1e-5)


def run_updates(step: UpdateStep, srcs: list, tgts: list, sampler: TokenBatchSampler, epoch: int) -> list[float]:
    losses = []
    for b in sampler.epoch_batches(epoch):
        batch = collate([srcs[i] for i in b], [tgts[i] for i in b], b, shape=sampler.shape_of(b))
        result = step([batch], scale=1.0 / batch.num_tgt_tokens)
        losses.append(result.loss.item() / batch.num_tgt_tokens)
    return losses


def test_compiled_step_one_graph_per_shape_no_recompiles_eager_losses() -> None:
    """Epoch 1 compiles one graph per grid shape (<= K = 4); epoch 2 runs under
    fail_on_recompile; the 20-odd updates' losses equal an eager twin's."""
    srcs, tgts = synthetic()
    lengths = np.array([len(s) for s in srcs]), np.array([len(t) for t in tgts])
    sampler = TokenBatchSampler(*lengths, max_tokens=400, max_sentences=64, seed=1, max_shapes=4)
    t = TrainConfig(compile="on", max_shapes=4, clip_norm=1.0, lr=1e-3)
    plan = plan_step(t, tiny_model().cfg, torch.device("cpu"), 1)
    assert plan.compile and plan.max_shapes == 4 and not plan.flex  # flex only on CUDA
    counter = CompileCounterWithBackend("aot_eager")
    losses = {}
    for compiled in (True, False):
        net = tiny_model()
        step = UpdateStep(model=net, ddp=net, optimizer=build_optimizer(net, t), scaler=None, t=t, info=DistInfo(),
                          device=torch.device("cpu"), timer=PhaseTimer(), precision="fp32",
                          forward=compile_forward(net, plan, backend=counter) if compiled else None)
        torch._dynamo.reset()
        first = run_updates(step, srcs, tgts, sampler, 1)
        if compiled:
            shapes = {sampler.shape_of(b) for b in sampler.epoch_batches(1)}
            assert counter.frame_count == len(shapes) and 2 <= len(shapes) <= 4
            with torch.compiler.set_stance("fail_on_recompile"):
                second = run_updates(step, srcs, tgts, sampler, 2)
            assert counter.frame_count == len(shapes)
        else:
            second = run_updates(step, srcs, tgts, sampler, 2)
        losses[compiled] = first + second
    assert len(losses[True]) >= 20
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-4)


def test_cuda_graphs_are_refused_where_they_cannot_hold() -> None:
    t = dataclasses.replace(TrainConfig(), cuda_graphs=True)
    with pytest.raises(Exception, match=r"train.cuda_graphs': needs a CUDA device, train.compile on"):
        plan_step(t, ModelConfig(), torch.device("cpu"), 2)
    assert plan_step(TrainConfig(), ModelConfig(), torch.device("cpu"), 1) == StepPlan(False, 0, 0, False, False)


def test_trainer_feeds_grid_batches_from_a_worker_as_from_the_loop(tmp_path: Path, tiny_run: Config) -> None:
    """`mt train` with a shape grid, batches collated by a DataLoader worker or in the loop: the
    same weights, bit for bit (the worker draws nothing from torch's RNG)."""
    from test_train import copy_run

    from mt.model.checkpoint import load_checkpoint
    from mt.train.loop import train

    weights = []
    for workers in (1, 0):
        cfg = copy_run(tiny_run, tmp_path / f"w{workers}", max_updates=5, valid_every=0, valid_bleu=False,
                       keep_checkpoints=0, log_every=1000, threads=1, max_shapes=8, data_workers=workers,
                       precision="fp32")
        train(cfg)
        assert "at most 8 batch shapes per epoch" in (cfg.run_dir / "train.log").read_text()
        weights.append(load_checkpoint(cfg.run_dir / "checkpoints" / "last.pt")["model"])
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_sigterm_to_the_process_group_with_a_data_worker_still_saves(tmp_path: Path, tiny_run: Config) -> None:
    """SIGTERM to the whole process group (a job scheduler's stop; a Ctrl-C is SIGINT's twin) reaches
    the DataLoader worker too: it ignores it, so the trainer finishes its update, writes last.pt and
    exits 0 (a worker killed by it made the loader raise in the middle of the update)."""
    import os
    import signal
    import subprocess
    import sys

    from test_train import copy_run

    from mt.config_load import save_config
    from mt.model.checkpoint import load_checkpoint

    cfg = copy_run(tiny_run, tmp_path, max_updates=10_000, valid_bleu=False, log_every=1, valid_every=0, threads=1,
                   data_workers=1, precision="fp32")
    save_config(cfg, tmp_path / "tiny.yaml")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen([sys.executable, "-m", "mt", "train", str(tmp_path / "tiny.yaml")], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path, start_new_session=True)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:  # the first update's log line: the worker is running
        lines.append(line)
        if line.split(" ", 2)[-1].startswith("update "):
            break
    os.killpg(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, "".join(lines) + out
    assert "stopped by signal" in out
    assert load_checkpoint(cfg.run_dir / "checkpoints" / "last.pt")["update"] >= 1
