"""Train chapter 12's tiny language model on the CPU and record how (nbhelpers/tiny_lm.py).

    python scripts/train_tiny_lm.py    # 7 minutes of training, 2 of scoring, on one core of a 2-core machine

Writes benchmarks/results/tiny_lm.pt (the config and the weights as bfloat16) and
benchmarks/results/tiny_lm.json: the command, the date, the versions, the corpus (package, version,
sha256), the hyper-parameters, the loss of the first 20 steps and of every 100th, the final bits
per byte on the training and held-out bytes, and the checkpoint's sha256. After a new run, copy
that sha256 into ``nbhelpers.tiny_lm.CHECKPOINT_SHA256``; tests/test_tiny_lm.py checks they agree,
reproduces the held-out bits per byte from the checkpoint and retrains the first steps.

torch runs on one thread (--threads): the model is small, one thread is nearly as fast as two on
a shared 2-core machine, and the tests retrain on one thread too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch

from nbhelpers import tiny_lm
from nbhelpers.tiny_lm import TinyLMConfig, TrainSettings

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

#: Bytes of the training set scored for the final training bits per byte (the first ones).
TRAIN_EVAL_BYTES = 1 << 18
#: The held-out slice tests/test_tiny_lm.py scores again from the checkpoint (the first bytes).
HELDOUT_SLICE_BYTES = 1 << 14


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=TrainSettings.steps)
    ap.add_argument("--seed", type=int, default=TrainSettings.seed)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--out", type=Path, default=RESULTS / "tiny_lm.pt", help="checkpoint; the record beside it")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    corpus = tiny_lm.load_corpus()
    cfg = TinyLMConfig()
    settings = TrainSettings(steps=args.steps, seed=args.seed)
    print(
        f"corpus: {corpus.package} {corpus.version}, {len(corpus.train):,} training and {len(corpus.heldout):,} "
        f"held-out bytes; model: {cfg.n_params:,} parameters; {settings.steps} steps of "
        f"{settings.batch} x {settings.seq_len} bytes",
        flush=True,
    )

    t0 = time.perf_counter()

    def report(step: int, loss: float) -> None:
        if step < 20 or step % 100 == 0 or step == settings.steps - 1:
            print(f"step {step:5d}  loss {loss:.4f} nats  {time.perf_counter() - t0:7.1f} s", flush=True)

    model, losses = tiny_lm.train(corpus.train, settings, cfg, on_step=report)
    train_s = time.perf_counter() - t0
    model.eval()

    args.out.parent.mkdir(parents=True, exist_ok=True)
    sha = tiny_lm.save_checkpoint(model, args.out)
    ckpt = tiny_lm.load_checkpoint(args.out, sha256=sha)
    train_slice, heldout_slice = corpus.train[:TRAIN_EVAL_BYTES], corpus.heldout[:HELDOUT_SLICE_BYTES]
    bpb = {
        "train_first_bytes": TRAIN_EVAL_BYTES,
        "heldout_slice_bytes": HELDOUT_SLICE_BYTES,
        "seq_len": settings.seq_len,
        "bf16_checkpoint": {
            "train": tiny_lm.bits_per_byte(ckpt, train_slice, settings.seq_len),
            "heldout": tiny_lm.bits_per_byte(ckpt, corpus.heldout, settings.seq_len),
            "heldout_slice": tiny_lm.bits_per_byte(ckpt, heldout_slice, settings.seq_len),
        },
        "fp32_trained": {
            "train": tiny_lm.bits_per_byte(model, train_slice, settings.seq_len),
            "heldout": tiny_lm.bits_per_byte(model, corpus.heldout, settings.seq_len),
        },
    }
    record = {
        "script": "scripts/train_tiny_lm.py",
        "command": shlex.join(["python", "scripts/train_tiny_lm.py", *sys.argv[1:]]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": args.threads,
        "train_seconds": round(train_s, 1),
        "corpus": {
            "package": corpus.package,
            "version": corpus.version,
            "sha256": corpus.sha256,
            "files": len(corpus.train_files) + len(corpus.heldout_files),
            "train_bytes": len(corpus.train),
            "heldout_bytes": len(corpus.heldout),
            "heldout_files": list(corpus.heldout_files),
        },
        "config": asdict(cfg),
        "n_params": cfg.n_params,
        "settings": asdict(settings),
        "optimizer": "torch.optim.AdamW, float32, foreach=False; weight decay on the linear layers' weights only",
        "checkpoint_dtype": "bfloat16",
        "losses_first_20": losses[:20],
        "losses_every_100": {str(i): losses[i] for i in range(0, len(losses), 100)},
        "loss_last": losses[-1],
        "loss_unit": "mean cross-entropy of the step's batch, nats per byte, before the step's update",
        "bits_per_byte": bpb,
        "checkpoint": args.out.name,
        "checkpoint_sha256": sha,
    }
    out_json = args.out.with_suffix(".json")
    out_json.write_text(json.dumps(record, indent=2) + "\n")
    print(f"trained in {train_s:.0f} s; held-out bits per byte {bpb['bf16_checkpoint']['heldout']:.4f} (bf16)")
    print(f"wrote {args.out} (sha256 {sha}) and {out_json}")
    if sha != tiny_lm.CHECKPOINT_SHA256:
        print("a new checkpoint: set nbhelpers.tiny_lm.CHECKPOINT_SHA256 to its sha256")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
