"""How long a kernel launch takes on a GPU, predicted from what it moves, what it computes and how
its programs wait: the course's napkin math as one model, so that a kernel's speed is argued before
a GPU measures it, and the first measurement calibrates the model.

A launch of ``programs`` programs moves ``bytes_moved`` bytes between HBM and the SMs and does
``flops`` floating-point operations. Each program makes ``steps`` dependent steps: a step issues
loads of ``bytes_per_step`` bytes and waits for them (a reduction the next load depends on, a
loop-carried merge) before the next step's loads, unless its loop is pipelined: with ``stages``
steps' loads in flight at once, a program waits a latency once per ``stages`` steps. Triton's
software pipeliner with ``num_stages = S`` issues the loads of the next ``S - 1`` steps while one
step computes, so a loop it pipelined has ``stages = S - 1`` (:func:`stages_in_flight`). An SM holds
``resident_per_sm`` programs at once (what occupancy allows: :func:`nbhelpers.occupancy.occupancy`,
from the compiler's registers and shared memory). The predicted time is the launch overhead plus the
slowest of five limits (the last only when the launch counts its issue cycles):

* **compute**: ``flops`` at the tensor cores' (or CUDA cores') peak for the dtype;
* **HBM**: ``bytes_moved`` at the HBM rate;
* **bytes in flight** (Little's law): the resident programs keep ``resident x bytes_per_step x
  stages`` bytes in flight; against a load-to-use latency ``L`` that sustains ``in_flight / L``
  bytes per second, and loading ``bytes_loaded`` at that rate takes ``bytes_loaded x L /
  in_flight``. Only loads count: a program waits for what it loads, not for what it stores (a
  store leaves the SM without a reply the program waits on), so a copy that moves ``2 B`` bytes
  needs in flight only what carries its ``B`` bytes of reads;
* **dependent steps**: a program cannot finish before ``steps / stages x L``; programs that do not
  fit at once run in ``waves``, one after another: ``waves x steps / stages x L``;
* **instruction issue** (when the launch states its ``issue_cycles``, the cycles of its scheduler
  each warp of a program needs to issue its instructions, counted from the compiled loops:
  :func:`nbhelpers.compile_check.sass_loops`: one instruction a cycle, and no pipe faster than it
  takes its instructions, integer ALU and IMAD two cycles each, shuffles four, population counts
  eight, :data:`nbhelpers.compile_check.PIPES`): an SM's ``issue_per_sm`` schedulers issue for
  their own warps. The busiest SM runs ``ceil(programs / SMs)`` programs of ``warps`` warps:
  ``ceil(programs / SMs) x warps x issue_cycles / issue_per_sm`` cycles, and no fewer than a
  program's own ``issue_cycles x issue_factor`` per wave (a warp alone on its scheduler also
  waits on its own results, so it takes ``issue_factor`` times its counted cycles: 1, none of
  that wait counted, unless a recorded run has measured it, :mod:`nbhelpers.calibration`).

What it leaves out, on purpose: caches (every byte is counted from HBM; a tile read again from L2
is faster, so GEMMs with reuse should state their bytes as HBM traffic), clocks and power (no
kernel reaches the datasheet's peak: measured dense bf16 GEMMs on an H200 reach about 80 % of
it), the latency of each instruction (issue counts the cycles to issue the instructions, not
the cycles a warp waits on a shuffle's or a barrier's result before its next: a chain of dependent
reductions takes longer than its count, and with one warp per scheduler nothing hides the wait;
``issue_factor`` stands for that wait as one average, measured, not derived),
the work outside the counted loops, bank conflicts, the imbalance of a last partial wave, and the latency's own
spread (one number stands for it; the chapters show the result at both ends of the assumed
range). It predicts the order of magnitude and which limit binds; the recorded GPU runs say by how
much it is off.

The H200's numbers (:data:`H200`) and the H100 SXM's (:data:`H100_SXM`) are NVIDIA's
specifications for the peaks and bandwidth, the clock at which the fp32 peak is computed, and an
assumption for the latency (0.5-1 us under load, chapter 08); each carries its source.
:func:`model_gpu` picks the one for a device PyTorch names. :mod:`nbhelpers.calibration` fits
the sustained fractions of the peaks and ``issue_factor`` to a recorded run, and bounds the latency.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from .validation import positive_int

__all__ = [
    "GPU",
    "H100_SXM",
    "H200",
    "HOPPER_FP32_FLOPS_PER_SM_CYCLE",
    "LATENCY_RANGE_S",
    "Launch",
    "Prediction",
    "little_bytes",
    "model_gpu",
    "prediction_gpu",
    "predict",
    "stages_in_flight",
]

#: the load-to-use latency under load assumed for an H200's HBM (chapter 08, section 6)
LATENCY_RANGE_S: tuple[float, float] = (0.5e-6, 1.0e-6)


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class GPU:
    """A GPU as the model sees it. peak_flops: FLOP/s per dtype name ("bf16", "fp16", "fp8",
    "fp32"); latency_s: the load-to-use latency assumed under load; launch_s: the host's cost of
    one launch; source: where each number comes from; clock_hz: the SM clock of its CUDA-core
    work (None: the model cannot count instruction issue, and a launch that states its issue
    cycles is refused); issue_per_sm: warp instructions an SM issues a cycle (its schedulers);
    issue_factor: how many times its counted issue cycles a warp alone on its scheduler takes,
    because an instruction waits for the result of one before it (1: no wait counted, the
    default; a recorded run measures it: :mod:`nbhelpers.calibration`). launch_s may be 0: a
    timer that does not see the host's launch (``do_bench``'s events)."""

    name: str
    sms: int
    hbm_bytes_per_s: float
    peak_flops: Mapping[str, float]
    latency_s: float
    launch_s: float
    source: str
    clock_hz: float | None = None
    issue_per_sm: int = 4
    issue_factor: float = 1.0

    def __post_init__(self) -> None:
        positive_int("sms", self.sms)
        _positive("hbm_bytes_per_s", self.hbm_bytes_per_s)
        _positive("latency_s", self.latency_s)
        launch = self.launch_s
        if isinstance(launch, bool) or not isinstance(launch, (int, float)) or not math.isfinite(launch) or launch < 0:
            raise ValueError(f"launch_s must be a non-negative finite number, got {launch!r}")
        if self.clock_hz is not None:
            _positive("clock_hz", self.clock_hz)
        positive_int("issue_per_sm", self.issue_per_sm)
        if _positive("issue_factor", self.issue_factor) < 1:
            raise ValueError(f"issue_factor must be at least 1 (the counted cycles), got {self.issue_factor!r}")
        peaks = {str(k): _positive(f"peak_flops[{k!r}]", v) for k, v in dict(self.peak_flops).items()}
        object.__setattr__(self, "peak_flops", MappingProxyType(peaks))


#: fp32 FLOPs one Hopper SM does a cycle: 128 fp32 FMA (NVIDIA's H100 whitepaper: 128 fp32 cores
#: an SM), 2 FLOPs each
HOPPER_FP32_FLOPS_PER_SM_CYCLE = 256
#: H200 SXM: 4.8 TB/s of HBM3e, dense peaks of 990 TFLOP/s in bf16 and fp16, 1,979 in fp8 and 67 in
#: fp32 (NVIDIA H200 specification; the sheet gives the tensor-core peaks with sparsity, twice these);
#: 132 SMs, as the H100 SXM's (the spec sheet does not list them); the clock is the one the fp32
#: peak implies, 67e12 / (132 x 256) = 1.98 GHz (the tensor-core peaks imply 1.83 GHz, the H100
#: SXM's boost clock for tensor-core work in NVIDIA's H100 whitepaper; issuing CUDA-core
#: instructions takes the higher); four warp schedulers an SM (the same whitepaper); an assumed
#: 1 us latency (the upper end of chapter 08's 0.5-1 us) and 5 us per launch
H200 = GPU(
    "H200",
    132,
    4.8e12,
    {"bf16": 990e12, "fp16": 990e12, "fp8": 1979e12, "fp32": 67e12},
    LATENCY_RANGE_S[1],
    5e-6,
    "NVIDIA H200 specification (HBM3e 4.8 TB/s; dense bf16/fp16 990 TFLOP/s, fp8 1,979, fp32 67), "
    "132 SMs (as H100 SXM); the clock the fp32 peak implies (256 FLOPs per SM a cycle, NVIDIA's "
    "H100 whitepaper) and 4 schedulers per SM (the same); latency 1 us and launch 5 us assumed (chapter 08)",
    67e12 / (132 * HOPPER_FP32_FLOPS_PER_SM_CYCLE),
    4,
)


#: H100 SXM5 80 GB (the GPU PyTorch names "NVIDIA H100 80GB HBM3"): 3.35 TB/s of HBM3, dense
#: peaks of 989 TFLOP/s in bf16 and fp16, 1,979 in fp8 and 67 in fp32 (NVIDIA H100 Tensor Core GPU
#: datasheet, SXM column; it gives the tensor-core peaks with sparsity, twice these); 132 SMs and
#: four schedulers an SM (NVIDIA's H100 whitepaper); the same clock, latency and launch cost as
#: :data:`H200` (the same SMs; the H200 differs in its memory)
H100_SXM = GPU(
    "H100 SXM",
    132,
    3.35e12,
    {"bf16": 989e12, "fp16": 989e12, "fp8": 1979e12, "fp32": 67e12},
    LATENCY_RANGE_S[1],
    5e-6,
    "NVIDIA H100 datasheet, SXM (HBM3 3.35 TB/s; dense bf16/fp16 989 TFLOP/s, fp8 1,979, fp32 67), "
    "132 SMs and 4 schedulers per SM (NVIDIA's H100 whitepaper); the clock the fp32 peak implies; "
    "latency 1 us and launch 5 us assumed (chapter 08)",
    67e12 / (132 * HOPPER_FP32_FLOPS_PER_SM_CYCLE),
    4,
)


def model_gpu(device_name: str) -> GPU | None:
    """The model's GPU for a device as PyTorch names it (``torch.cuda.get_device_name()``):
    :data:`H200` for an H200, :data:`H100_SXM` for an H100 SXM ("NVIDIA H100 80GB HBM3"), None
    for any other (an H100 PCIe or NVL has other clocks and memory: the model has no numbers for
    it, and a prediction for another GPU would not be one for this)."""
    if not isinstance(device_name, str):
        raise TypeError(f"device_name must be a str, got {type(device_name).__name__}")
    name = device_name.upper()
    if "H200" in name:
        return H200
    if "H100" in name and ("HBM3" in name or "SXM" in name) and "PCIE" not in name and "NVL" not in name:
        return H100_SXM
    return None


def prediction_gpu(device_name: str) -> GPU:
    """The GPU a benchmark on ``device_name`` records its predictions for: :func:`model_gpu`'s,
    else :data:`H200` (the GPU the chapters' predictions are made for); the results file names it
    (``meta["model_gpu"]``), so a row is never read as a prediction for a GPU it was not made for."""
    return model_gpu(device_name) or H200


def little_bytes(gpu: GPU, read_share: float = 1.0) -> float:
    """Little's law for the whole GPU: the bytes that must be in flight to sustain its HBM rate
    against its latency (rate x latency), for a kernel whose HBM traffic is ``read_share`` reads
    (only loads are waited on: a copy, half reads, needs half of it in flight)."""
    if not (isinstance(read_share, (int, float)) and 0 < read_share <= 1):
        raise ValueError(f"read_share must be in (0, 1], got {read_share!r}")
    return gpu.hbm_bytes_per_s * gpu.latency_s * read_share


def stages_in_flight(num_stages: int) -> int:
    """The steps whose loads a program of a loop Triton pipelined with ``num_stages`` keeps in
    flight while it computes one: ``num_stages - 1`` (the loads of the steps ahead; one stage's
    buffer holds the step being computed), at least 1 (an unpipelined loop waits for each step's
    own loads)."""
    positive_int("num_stages", num_stages)
    return max(num_stages - 1, 1)


@dataclass(frozen=True)
class Launch:
    """How a kernel launch is shaped: ``programs`` in its grid, ``resident_per_sm`` of them held
    by one SM at once (occupancy), ``bytes_per_step`` loaded by one program in one step,
    ``steps``, the dependent steps each program makes, ``stages``, the steps whose loads one
    program keeps in flight at once (1: each step waits for its own loads), ``issue_cycles``, the
    cycles of its scheduler each warp of a program needs to issue its instructions in all (0: not
    counted, no issue limit), and ``warps`` per program."""

    programs: int
    resident_per_sm: int
    bytes_per_step: float
    steps: int = 1
    stages: int = 1
    issue_cycles: float = 0.0
    warps: int = 4

    def __post_init__(self) -> None:
        positive_int("programs", self.programs)
        positive_int("resident_per_sm", self.resident_per_sm)
        _positive("bytes_per_step", self.bytes_per_step)
        positive_int("steps", self.steps)
        positive_int("stages", self.stages)
        if self.issue_cycles:
            _positive("issue_cycles", self.issue_cycles)
        positive_int("warps", self.warps)


@dataclass(frozen=True)
class Prediction:
    """The predicted ``seconds``, the limit that binds (``bound``: "compute", "HBM", "bytes in
    flight", "dependent steps" or "instruction issue"), every limit's time (``terms``, without the launch), and the
    launch overhead added (``launch_s``)."""

    seconds: float
    bound: str
    terms: Mapping[str, float] = field(default_factory=dict)
    launch_s: float = 0.0


def predict(
    gpu: GPU,
    launch: Launch,
    bytes_moved: float,
    flops: float = 0.0,
    dtype: str | None = None,
    bytes_loaded: float | None = None,
) -> Prediction:
    """The model's time for ``launch`` on ``gpu`` (see the module's docstring). ``flops`` needs
    ``dtype``, a key of ``gpu.peak_flops``. ``bytes_loaded``: the part of ``bytes_moved`` that
    the programs load (and wait for); None: all of it (a kernel whose stores are few)."""
    _positive("bytes_moved", bytes_moved)
    if bytes_loaded is None:
        bytes_loaded = bytes_moved
    _positive("bytes_loaded", bytes_loaded)
    if bytes_loaded > bytes_moved:
        raise ValueError(f"bytes_loaded ({bytes_loaded!r}) cannot exceed bytes_moved ({bytes_moved!r})")
    if isinstance(flops, bool) or not isinstance(flops, (int, float)) or not math.isfinite(flops) or flops < 0:
        raise ValueError(f"flops must be a non-negative finite number, got {flops!r}")
    terms: dict[str, float] = {}
    if flops:
        if dtype not in gpu.peak_flops:
            raise ValueError(f"dtype must be one of {sorted(gpu.peak_flops)} when flops are given, got {dtype!r}")
        terms["compute"] = flops / gpu.peak_flops[dtype]
    terms["HBM"] = bytes_moved / gpu.hbm_bytes_per_s
    slots = launch.resident_per_sm * gpu.sms
    stages = min(launch.stages, launch.steps)
    in_flight = min(launch.programs, slots) * launch.bytes_per_step * stages
    terms["bytes in flight"] = bytes_loaded * gpu.latency_s / in_flight
    terms["dependent steps"] = math.ceil(launch.programs / slots) * launch.steps / stages * gpu.latency_s
    if launch.issue_cycles:
        if gpu.clock_hz is None:
            raise ValueError(f"the launch counts its issue cycles, but {gpu.name} has no clock_hz to issue them at")
        busiest = math.ceil(launch.programs / gpu.sms) * launch.warps * launch.issue_cycles / gpu.issue_per_sm
        one_program = math.ceil(launch.programs / slots) * launch.issue_cycles * gpu.issue_factor
        terms["instruction issue"] = max(busiest, one_program) / gpu.clock_hz
    bound = max(terms, key=terms.__getitem__)
    return Prediction(gpu.launch_s + terms[bound], bound, MappingProxyType(terms), gpu.launch_s)
