"""GEMM numerics on a real GPU: relative error against K for torch's and the Triton kernel's GEMMs.

    python benchmarks/gpu_gemm_numerics.py [--M 16] [--N 16] [--seed 0] [--kmin 128] [--kmax 16384]
                                           [--out benchmarks/results/gemm_numerics_<gpu>.json]

Needs an NVIDIA GPU (it refuses to run, exit code 2, without one). For each K (powers of two from
--kmin to --kmax) it draws the same float64 matrices as chapter 03's notebook
(``nbhelpers.experiments.gemm_inputs(M, K, N, seed)``) and measures, against float64 references:

* ``torch.matmul bf16``: torch's CUDA matmul of bf16 tensors (bf16 output);
* ``Triton bf16``: ``nbhelpers.kernels.gemm.matmul`` with bf16 inputs (tensor cores, fp32 tile);
* ``Triton fp32 tf32`` / ``Triton fp32 ieee``: the same kernel with fp32 inputs, ``tl.dot`` in
  TF32 and in IEEE fp32 mode.

For the Triton bf16 result it also records which fraction of the outputs is bit-identical to each
emulation of the chapter (``nbhelpers.gpu_measurements.BF16_MODELS``: the tensor-core model with 23
bits kept and groups of 4, 8 and 16, the A100's and the H100's published settings, and fp32
sequential accumulation). See ``nbhelpers.gpu_measurements.measure_gemm_errors`` for the fields.

The results file ``benchmarks/results/gemm_numerics_<gpu-name>.json`` holds ``meta`` (GPU name from
torch.cuda.get_device_name, UTC date, this script's path, torch/triton/numpy versions, M, N, seed)
and ``series`` (each the family's ``GemmNumericsSeries``, nbhelpers/families/gemm.py, filled
by ``measure_gemm_errors``); the chapter 03 notebook finds it and puts the points on its figure. Run time: well
under a minute (Triton compiles the kernel once per input type and mode; the emulations run on
the CPU).
"""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = "benchmarks/gpu_gemm_numerics.py"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--M", type=int, default=16)
    ap.add_argument("--N", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kmin", type=int, default=128)
    ap.add_argument("--kmax", type=int, default=16384)
    ap.add_argument("--out", help="results file (default: benchmarks/results/gemm_numerics_<gpu>.json)")
    args = ap.parse_args(argv)

    from nbhelpers.device import start_gpu_script

    if not start_gpu_script(
        "gpu_gemm_numerics.py", "It measures real GPU arithmetic; on a CPU the notebook shows the emulations instead."
    ):
        return 2

    import torch

    from nbhelpers.gpu_measurements import gpu_run
    from nbhelpers.results import GEMM_NUMERICS, write_results

    Ks = [k for k in (2**e for e in range(4, 25)) if args.kmin <= k <= args.kmax]
    if not Ks:
        ap.error("no power of two between --kmin and --kmax")
    gpu = torch.cuda.get_device_name(0)
    print(f"{gpu}: M={args.M} N={args.N} seed={args.seed} K={Ks}")
    out = Path(args.out) if args.out else GEMM_NUMERICS.path(gpu, ROOT / "benchmarks" / "results")

    def keep(run):  # after every K: the run so far, so that a run stopped halfway keeps the Ks done
        missing = GEMM_NUMERICS.missing_in_run(run)  # the reader's schema: refuse what it would refuse
        if missing:
            raise ValueError(f"the run lacks {', '.join(missing)}: not written")
        write_results(out, {**run, "meta": {**run["meta"], "complete": False}})

    run = gpu_run(Ks, M=args.M, N=args.N, seed=args.seed, script=SCRIPT, after_K=keep)
    for s in run["series"]:
        print(f"  {s['method']:<20s}", " ".join(f"{e:.2e}" for e in s["rel_error"]))
        for name, fr in s.get("model_agreement", {}).items():
            print(f"    bit-identical to {name}:", " ".join(f"{f:.3f}" for f in fr))
    keep(run)
    write_results(out, {**run, "meta": {**run["meta"], "complete": True}})
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
