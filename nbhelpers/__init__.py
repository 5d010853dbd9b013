"""Helpers for the course "Low-precision numerics for AI accelerators".

The package is cut by role, one concept per module. A module imports only from its own layer
and the layers listed above it, and nothing imports in a circle (import-linter's contracts in
pyproject.toml hold the package to that; tests/test_import_graph.py holds this map to those
layers). A new chapter adds modules rather than sections to old ones.

Specs: formats, recipes, settings, and the argument checks and timers of every layer; no imports from other layers.
  - :mod:`~nbhelpers.formats`       FloatFormat: bit layouts, derived limits, decode, the torch dtype
  - :mod:`~nbhelpers.validation`    argument checks: enum strings, positive sizes, generators
  - :mod:`~nbhelpers.timing`        the interleaved-median CPU timer of the benchmarks and chapters 08 and 10, and the
    one GPU timer: ``gpu_median_ms`` for the GPU benchmarks, ``tuning_ms`` for the kernels' tuners
  - :mod:`~nbhelpers.training_memory`  bytes per parameter of a training recipe (chapter 04)
  - :mod:`~nbhelpers.recipes`       Recipe: block granularity, element and scale formats, current/delayed amax
    (chapters 06, 07)
  - :mod:`~nbhelpers.call_watch`    CallWatch: the profile hook that notes an exercise answer's calls of the
    course's functions its statement forbids (standard library only: the grader's kernel runs its source)
  - :mod:`~nbhelpers.top_level`     the notebook's top-level names whose values came from modules outside an
    exercise's tools, read from its code (standard library only)

Engines: the arithmetic, each routine with a slow ``_ref`` or an outside oracle in the tests.
  - :mod:`~nbhelpers.rounding`      round_to, encode, stochastic rounding, absorption thresholds
  - :mod:`~nbhelpers.accumulation`  the rounding adder: sums, dots, GEMMs in a chosen accumulator
    (SumMethod)
  - :mod:`~nbhelpers.tensor_cores`  fused groups, alignment, truncation, promotion to fp32 (chapters 03, 07)
  - :mod:`~nbhelpers.training`      regimes, update rules, the teacher-student model and its training loop
  - :mod:`~nbhelpers.loss_scaling`  static and dynamic loss scalers (GradScaler's rule)
  - :mod:`~nbhelpers.scaling`       quantize / dequantize by a Recipe, delayed scaling, bytes per parameter
    (chapters 06, 07); chapter 07's promotion model is ``tensor_cores.tensor_core_matmul(promote_every=...)``,
    extended there
  - :mod:`~nbhelpers.scaled_gemm`   reference scaled GEMMs: int8/fp8 epilogue, per-K-block scales, the fp8 accumulator
    with promotion
  - :mod:`~nbhelpers.outlier_remedies` SmoothQuant smoothing, LLM.int8()'s decomposition, asymmetric int8 with a zero
    point and its GEMM correction (chapter 06)
  - :mod:`~nbhelpers.rotations`     Hadamard and random-Hadamard rotations applied blockwise along K (chapter 07)
  - :mod:`~nbhelpers.moe`           a routed MoE layer: routing, permutation, offsets, tile schedule, loop / padded /
    grouped expert GEMMs (chapter 10)
  - :mod:`~nbhelpers.topk`          order-preserving keys of floats, the top-k reference and its tie rule, radix
    select, top-k costs in bytes, the top-p threshold without a sort (chapter 11)
  - :mod:`~nbhelpers.gemm_bounds`   elementwise error bounds of fp32-accumulated GEMMs (TF32 inputs, tensor-core
    truncation, a narrow output) that every Triton GEMM is checked against (chapters 03, 09, 10)
  - :mod:`~nbhelpers.occupancy`     blocks and warps an SM holds at once, from the registers and shared memory the
    compiler reports (chapters 09, 11)
  - :mod:`~nbhelpers.perf_model`    a launch's time on a GPU: compute, HBM, bytes in flight (Little's law) and
    dependent steps, the slowest of them (chapters 08-11)
  - :mod:`~nbhelpers.weight_quant`  weight-only int4/int8: round-to-nearest, GPTQ and AWQ, and the layer output
    error they are compared by (chapter 12)
  - :mod:`~nbhelpers.tiny_lm`       the course's own small language model: its corpus (a locked package's source),
    the model (RMSNorm, rotary, GQA, SwiGLU), training, the checkpoint, bits per byte (chapter 12)
  - :mod:`~nbhelpers.inference_math`  napkin math of inference: a model's shape (Llama 3 8B), storage formats and
    schemes, a decode step's and a prefill's bytes, FLOPs, time and bound, KV capacity per GPU (chapter 12)
  - :mod:`~nbhelpers.quantized_lm`  the tiny model quantized: weight-only int4/int8 (RTN, GPTQ, AWQ), MXFP4/NVFP4
    weights, W8A8 fp8/int8 and SmoothQuant, a quantized KV cache, injected outliers, bits per byte and top-1
    agreement on held-out text (chapter 12)

Kernels: Triton kernels and their launchers only; import after :func:`~nbhelpers.device.setup_device`.
  - :mod:`~nbhelpers.device`        CPU/GPU selection and the Triton interpreter switch
  - :mod:`~nbhelpers.kernels`       ``kernels.gemm`` (the tiled GEMM, chapters 03 and 09), ``kernels.scaled_gemm``
    (fp8 GEMMs with epilogue and block scales), ``kernels.copy`` (chapter 08's copies); chapter 10's
    grouped GEMM goes in ``kernels.grouped_gemm``, chapter 11's top-k kernels in ``kernels.topk``
  - :mod:`~nbhelpers.families`      one manifest per kernel family (``families.<family>``): its reference, dtypes and
    recipes, compile cases, GPU launches by chapter, benchmarks and results rows; ``families()`` finds them (the
    compile check, the GPU table, the prepared GPU run and the results readers read nothing else); importing one
    loads no kernel

Measurements: what the chapters measure, built on the engines and kernels.
  - :mod:`~nbhelpers.metrics`       relative errors, exact sums, range fractions
  - :mod:`~nbhelpers.experiments`   seeded inputs and sweeps: GEMM error vs K, sum errors vs length
  - :mod:`~nbhelpers.gpu_measurements`  GPU runs of the kernels, labelled for a results file
  - :mod:`~nbhelpers.results`       results files in ``benchmarks/results/``: their schema, writing and reading
  - :mod:`~nbhelpers.memory_access`  32-byte sectors, 64-byte cache lines, strided reads on the CPU, the addresses a
    Triton kernel loads (chapter 08)
  - :mod:`~nbhelpers.load_audit`   watches a Triton kernel's loads for reads of NaN padding (the ex09 checks)
  - :mod:`~nbhelpers.moe_timing`  the per-call overhead and the expert GEMMs (loop, batch, grouped) timed on the CPU
    (chapter 10)
  - :mod:`~nbhelpers.gemm_runs`     the GEMM kernel and torch's GEMM on data rounded to a format, numpy in and out
    (chapter 03's sweeps and the GPU measurements); import after setup_device()
  - :mod:`~nbhelpers.compile_check`  what a GPU's compiler says about the kernels (registers, spills, shared memory),
    asked without a GPU (chapters 09, 10)
  - :mod:`~nbhelpers.l2_model`      a model of the L2 cache: the DRAM bytes a GEMM launch reads for a program order
    (chapters 09-11)
  - :mod:`~nbhelpers.calibration`   the performance model fitted to a recorded GPU run, and the run's rows predicted
    again with it (chapters 08, 09, 11)
  - :mod:`~nbhelpers.launch_timing`  one GPU launch timed with the host's clock, CUDA events and do_bench; the race
    of a non-blocking copy (chapter 08, ``benchmarks/gpu_launch_timing.py``)

Presentation: figures and text, never numerics of their own.
  - :mod:`~nbhelpers.plots`         one module per figure family, one colour per format
  - :mod:`~nbhelpers.tables`        plain-text tables
  - :mod:`~nbhelpers.listing`       source code (a kernel's) shown as highlighted code
  - :mod:`~nbhelpers.calibration_report`  the model fitted to the recorded runs, as the text chapter 11 prints
  - :mod:`~nbhelpers.topk_report`   chapter 11's compile, model and recorded-run tables of the top-k kernels
  - :mod:`~nbhelpers.coalescing_report`  chapter 08's tables and figure: launch timings, the race, the CPU's strided
    copies, the copy kernels' bandwidths (measured now or recorded)
  - :mod:`~nbhelpers.gemm_report`  chapter 09's recorded GEMM run against the model, kind by kind (bf16, fp8
    promoted or with fast accumulation, block-scaled)
  - :mod:`~nbhelpers.grouped_report`  chapter 10's recorded grouped-GEMM run: its table and verdict (ours against
    each of the others by what bounds ours), the padded batch's copies, the model of its GPU against ours and the
    loop, the loop's host cost, and ours against cuBLAS where the loop is compute-bound GEMMs

Course tooling: exercises, checks and grading.
  - :mod:`~nbhelpers.report_text`   short, safe text of a student's values and exceptions (one line, bounded, never
    raising)
  - :mod:`~nbhelpers.comparators`   same_value, same_value_up_to_zero_sign, close_to: a result against the reference's
  - :mod:`~nbhelpers.exercise_types`  Exercise, Case, CheckerError: what an exercise is
  - :mod:`~nbhelpers.answer_keys`  the registry (get_exercise, exercises_of) and ``chNN``: one chapter's references,
    cases and EXERCISES list (the answer key of ``exercises/exNN_*.ipynb``)
  - :mod:`~nbhelpers.checks`        CheckResult/CheckStatus, score, run_check, and check()/summary() for notebooks
    (it re-exports the types, the comparators and the registry: a notebook's one import)
  - :mod:`~nbhelpers.grading`       the instructor's grader, a package (its docstring says which module does what)
  - :mod:`~nbhelpers.grade`         the grader's command, ``python -m nbhelpers.grade``
  - :mod:`~nbhelpers.tooling`       repository tooling, imported by no other module: ``tooling.compile_cases`` (every
    compile case, ``make gpu-compile``), ``tooling.gpu_targets`` (which GPU runs which chapter, docs/gpu.md),
    ``tooling.make_exercises`` (exercises/ from solutions/)

Import what you need from the module; importing the package does nothing else.
"""

__version__ = "0.1.0"
