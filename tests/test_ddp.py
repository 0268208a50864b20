"""Two CPU processes under torchrun (gloo) train exactly like one process accumulating both shards.

Why they must agree: TokenBatchSampler deals the epoch's shuffled batch list round-robin, so
with world_size=2 update k runs batch 2k on rank 0 and batch 2k+1 on rank 1. One process with
accumulate=2 runs batches 2k and 2k+1 in update k. The trainer scales each rank's summed loss by
world_size / (target tokens of the update over all ranks) and DDP averages the gradients, so both
take the gradient of the same per-token mean. Dropout is off (the two set-ups draw their random
numbers in different streams); everything else — schedule, clipping, Adam — sees equal inputs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_train import copy_run

from mt.config import Config
from mt.config_load import save_config
from mt.model.checkpoint import load_checkpoint
from mt.train.loop import train

REPO = Path(__file__).resolve().parents[1]


def test_two_ranks_equal_one_process_accumulating(tmp_path: Path, tiny_run: Config) -> None:
    opts = {"max_updates": 4, "valid_every": 0, "valid_bleu": False, "keep_checkpoints": 0, "log_every": 1,
            "threads": 1}
    single = copy_run(tiny_run, tmp_path / "single", dropout=0.0, accumulate=2, **opts)
    train(single)

    ddp = copy_run(tiny_run, tmp_path / "ddp", dropout=0.0, accumulate=1, **opts)
    config_file = tmp_path / "ddp.yaml"
    save_config(ddp, config_file)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                          "-m", "mt", "train", str(config_file)],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "2 process(es)" in run.stdout

    a = load_checkpoint(single.run_dir / "checkpoints" / "last.pt")
    b = load_checkpoint(ddp.run_dir / "checkpoints" / "last.pt")
    assert a["update"] == b["update"] == 4
    assert len(b["training"]["rng"]) == 2  # every rank's RNG state, for an exact resume
    for name, value in a["model"].items():
        assert torch.allclose(value, b["model"][name], atol=1e-5, rtol=0), name
    # the same per-update losses (over both shards), and they fall: real updates happened
    losses = [[r["loss"] for r in map(json.loads, (cfg.run_dir / "metrics.jsonl").read_text().splitlines())
               if r["kind"] == "train"] for cfg in (single, ddp)]
    assert len(losses[0]) == 4 and losses[0] == pytest.approx(losses[1], abs=1e-5)
    assert losses[0][-1] < losses[0][0]


def _gather_on_rank(rank: int, store_file: str, out_dir: str) -> None:
    """One rank of `test_gather_objects_returns_every_ranks_object_in_rank_order`."""
    import torch.distributed as dist

    from mt.train import distributed

    info = distributed.DistInfo(rank=rank, world_size=2, local_rank=rank)
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=2)
    try:
        mine = {"rank": rank, "payload": "x" * (10 + 5000 * rank), "tensor": torch.arange(3) + rank}
        got = distributed.gather_objects(mine, info, torch.device("cpu"))
        flag = distributed.broadcast_flag(rank == 0, info, torch.device("cpu"))  # rank 0's True everywhere
        total = distributed.all_reduce_sum(torch.tensor([rank + 1.0]), info)
        torch.save({"got": got, "flag": flag, "total": total}, Path(out_dir) / f"rank{rank}.pt")
    finally:
        distributed.shutdown(info, finished=True)


def test_gather_objects_returns_every_ranks_object_in_rank_order(tmp_path: Path) -> None:
    """Objects of different pickled sizes come back whole, in rank order, on both ranks."""
    import torch.multiprocessing as mp

    mp.start_processes(_gather_on_rank, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=2,
                       start_method="spawn")
    for rank in range(2):
        result = torch.load(tmp_path / f"rank{rank}.pt", weights_only=False)
        assert [o["rank"] for o in result["got"]] == [0, 1]
        assert [len(o["payload"]) for o in result["got"]] == [10, 5010]
        assert torch.equal(result["got"][1]["tensor"], torch.tensor([1, 2, 3]))
        assert result["flag"] is True and result["total"].item() == 3.0
