"""A model of the L2 cache between a GEMM kernel's programs and DRAM (chapter 10): how many bytes a
launch reads from DRAM for a given program order, against the ideal of every operand read once.

The model, and what it leaves out:

* **Programs run in waves.** A GPU runs ``wave = SMs x programs per SM`` programs at a time, in
  program order. All programs of a grouped GEMM run the same K loop, so they finish at about the
  same time and the next ``wave`` programs start together: wave i is programs
  ``i * wave .. (i + 1) * wave - 1``.
* **A wave steps through K in lockstep.** Each program reads its x panel (its BLOCK_M rows of x,
  all K columns) and its w panel (all K rows of its BLOCK_N columns), front to back along K. The
  model cuts every panel into ``k_chunks`` pieces along K and lets the wave read piece 0 of all
  its panels, then piece 1, and so on. A piece that several programs of the wave need at the same
  step is fetched from DRAM once: the first request misses, the others hit (or wait for the same
  fill).
* **L2 is one LRU cache of L2Spec.l2_bytes**, fully associative, holding pieces. A piece that is
  still in it when it is needed again is a hit; everything else is a miss, and DRAM bytes are the
  bytes of the misses. Real L2s are set-associative with hashed sets and not exactly LRU, move
  128-byte lines (32-byte sectors), and on H100-class parts are split in two halves; the output
  writes (the same for every order) and prefetching are not modelled.

Because the pieces of one step come before the next step's, a panel that must wait a whole wave
for its next use is evicted piece by piece ahead of that use whenever a wave reads more than the
L2 holds: LRU's worst case, which is what a real L2 does to a working set streamed in a loop larger
than itself. The model's answer is thus mostly decided by which programs share a panel within one
wave, and the cache size matters only when a wave's panels nearly fit.

:class:`LRUCache` is the cache, :func:`wave_traffic` runs any list of programs through it,
:func:`grouped_gemm_panels` lists the panels of a grouped GEMM's programs (from the program order
of :func:`nbhelpers.kernels.grouped_gemm.program_tiles`, or :func:`column_sweep_order`, the order
of a 2-D launch grid with the tile index fastest) and :func:`grouped_gemm_traffic` does both.
:func:`recorded_l2_bytes` reads the L2 size a recorded GPU report measured.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .moe import check_offsets, tile_schedule
from .results import find_results_dir
from .validation import nonnegative_int, positive_int

__all__ = [
    "L2Spec",
    "H100_SXM",
    "H200",
    "LRUCache",
    "Traffic",
    "wave_traffic",
    "wave_traffic_ref",
    "column_sweep_order",
    "grouped_gemm_panels",
    "grouped_gemm_traffic",
    "recorded_l2_bytes",
]


@dataclass(frozen=True)
class L2Spec:
    """A GPU as the model sees it: ``l2_bytes`` of L2 and ``sms`` streaming multiprocessors, with
    the ``source`` of both numbers."""

    name: str
    l2_bytes: int
    sms: int
    source: str

    def __post_init__(self):
        positive_int("l2_bytes", self.l2_bytes)
        positive_int("sms", self.sms)


MB = 2**20  # NVIDIA's "MB" of cache sizes, and PyTorch's L2_cache_size, count binary megabytes

#: H100 SXM5: 50 MB of L2, 132 SMs
H100_SXM = L2Spec(
    "H100 SXM", 50 * MB, 132, "NVIDIA H100 Tensor Core GPU Architecture whitepaper: 50 MB L2 cache, 132 SMs (H100 SXM5)"
)
#: H200: an assumed 60 MB of L2 and 132 SMs: NVIDIA's H200 datasheet gives no L2 size; 60 MB is the
#: full GH100 die's L2 (the H100 whitepaper), of which the H100 SXM enables 50; an assumption until
#: a recorded run of benchmarks/gpu_report.py on an H200 (whose summary holds both) reads it
H200 = L2Spec(
    "H200",
    60 * MB,
    132,
    "assumed: 60 MB, the full GH100 die's L2 (H100 whitepaper; the H100 SXM enables 50 MB); "
    "NVIDIA's H200 datasheet gives no L2 size and no run of this course on an H200 has read it",
)


def recorded_l2_bytes(results_dir=None) -> list[tuple[str, int, str, str]]:
    """The L2 size each recorded GPU report measured (``benchmarks/results/gpu_report_*.json``,
    written by ``benchmarks/gpu_report.py`` from ``torch.cuda.get_device_properties``): (GPU name,
    ``l2_cache_bytes``, date, file name) per report that has it, oldest first; [] when there are
    none."""
    folder = find_results_dir(results_dir)
    out = []
    for path in sorted(Path(folder).glob("gpu_report_*.json")) if folder is not None else []:
        report = json.loads(path.read_text())
        if isinstance(report.get("l2_cache_bytes"), int) and report["l2_cache_bytes"] > 0:
            out.append((str(report.get("gpu")), report["l2_cache_bytes"], str(report.get("date")), path.name))
    return sorted(out, key=lambda r: r[2])


class LRUCache:
    """A fully associative cache of ``capacity_bytes``, least recently used first out. Items are
    any hashable keys with a size in bytes. ``access(key, nbytes)`` returns True on a hit; on a
    miss the item is inserted and the least recently used items are evicted until the contents fit
    (an item larger than the cache is evicted at once: it streams through)."""

    def __init__(self, capacity_bytes: int):
        self.capacity = nonnegative_int("capacity_bytes", capacity_bytes)
        self._items: OrderedDict[Hashable, int] = OrderedDict()
        self.used = 0

    def __contains__(self, key) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def access(self, key: Hashable, nbytes: int) -> bool:
        items = self._items
        if key in items:
            items.move_to_end(key)
            return True
        items[key] = nbytes
        self.used += nbytes
        while self.used > self.capacity:
            _, size = items.popitem(last=False)
            self.used -= size
        return False


@dataclass(frozen=True)
class Traffic:
    """What a launch reads, per operand tag ("x", "w"): ``dram`` bytes (the misses) and ``ideal``
    bytes (every distinct panel once)."""

    dram: dict
    ideal: dict

    @property
    def dram_bytes(self) -> int:
        return sum(self.dram.values())

    @property
    def ideal_bytes(self) -> int:
        return sum(self.ideal.values())

    @property
    def ratio(self) -> float:
        """DRAM bytes over the ideal: 1.0 when every operand is read once."""
        return self.dram_bytes / self.ideal_bytes if self.ideal_bytes else float("nan")


def _waves(programs, wave: int):
    """Per wave, its distinct panels in program order as (tag, panel_id, nbytes)."""
    for start in range(0, len(programs), wave):
        panels: dict[tuple, int] = {}
        for prog in programs[start : start + wave]:
            for tag, pid, nbytes in prog:
                panels.setdefault((tag, pid), int(nbytes))
        yield [(tag, pid, nb) for (tag, pid), nb in panels.items()]


def _pieces(nbytes: int, k_chunks: int) -> list[int]:
    return [nbytes * (c + 1) // k_chunks - nbytes * c // k_chunks for c in range(k_chunks)]


def _ideal(programs) -> dict:
    ideal: dict[str, int] = {}
    seen = set()
    for prog in programs:
        for tag, pid, nbytes in prog:
            if (tag, pid) not in seen:
                seen.add((tag, pid))
                ideal[tag] = ideal.get(tag, 0) + int(nbytes)
    return ideal


def wave_traffic_ref(
    programs: Sequence[Sequence[tuple[str, Hashable, int]]], wave: int, l2_bytes: int, k_chunks: int = 8
) -> Traffic:
    """:func:`wave_traffic` written plainly, on :class:`LRUCache` (slow; the tests compare the two)."""
    wave, k_chunks = positive_int("wave", wave), positive_int("k_chunks", k_chunks)
    cache = LRUCache(l2_bytes)
    ideal = _ideal(programs)
    dram = dict.fromkeys(ideal, 0)
    for panels in _waves(programs, wave):
        for c in range(k_chunks):
            for tag, pid, nbytes in panels:
                piece = _pieces(nbytes, k_chunks)[c]
                if not cache.access((tag, pid, c), piece):
                    dram[tag] += piece
    return Traffic(dram, ideal)


def wave_traffic(
    programs: Sequence[Sequence[tuple[str, Hashable, int]]], wave: int, l2_bytes: int, k_chunks: int = 8
) -> Traffic:
    """Run ``programs`` through the model (module docstring): ``programs[p]`` lists the panels
    program p reads, each ``(tag, panel_id, nbytes)``; programs run in waves of ``wave``, each wave
    in ``k_chunks`` lockstep steps through an :class:`LRUCache` of ``l2_bytes``. A panel's piece c
    has ``nbytes * (c + 1) // k_chunks - nbytes * c // k_chunks`` bytes (the pieces add up). The
    same numbers as :func:`wave_traffic_ref`, faster: each piece is keyed by one int and the cache's
    two operations are inlined (a notebook cell runs it for DeepSeek-V3-sized layers)."""
    wave, k_chunks = positive_int("wave", wave), positive_int("k_chunks", k_chunks)
    capacity = LRUCache(l2_bytes).capacity  # validated as LRUCache validates it
    ideal = _ideal(programs)
    tags = sorted(ideal)
    dram = [0] * len(tags)
    index: dict[tuple, int] = {}  # panel -> its number; piece c of panel i is key i * k_chunks + c
    items: OrderedDict[int, int] = OrderedDict()
    move, pop = items.move_to_end, items.popitem
    used = 0
    for panels in _waves(programs, wave):
        rows = []
        for tag, pid, nbytes in panels:
            i = index.setdefault((tag, pid), len(index))
            rows.append((i * k_chunks, tags.index(tag), _pieces(nbytes, k_chunks)))
        for c in range(k_chunks):
            for base, t, pieces in rows:
                key = base + c
                if key in items:
                    move(key)
                    continue
                piece = pieces[c]
                dram[t] += piece
                items[key] = piece
                used += piece
                while used > capacity:
                    used -= pop(last=False)[1]
    return Traffic(dict(zip(tags, dram)), ideal)


def column_sweep_order(offsets, N: int, block_m: int, block_n: int) -> np.ndarray:
    """The programs of a grouped GEMM launched on a 2-D grid (M-tile, column block) with the tile
    index fastest: all the M-tiles of all experts (:func:`nbhelpers.moe.tile_schedule`, expert by
    expert) at column block 0, then all at column block 1, and so on. Same format as
    :func:`nbhelpers.kernels.grouped_gemm.program_tiles`: int64 (programs, 4) of (expert,
    row_start, row_end, pid_n)."""
    arr = np.asarray(offsets)
    off = check_offsets(arr, int(arr[-1]) if arr.ndim == 1 and arr.size else 0)
    s = tile_schedule(off, positive_int("block_m", block_m))
    n_col = -(-positive_int("N", N) // positive_int("block_n", block_n))
    tiles = np.stack([s.expert, s.row_start, s.row_end], axis=1).astype(np.int64)
    cols = np.repeat(np.arange(n_col, dtype=np.int64), len(tiles))
    return np.concatenate([np.tile(tiles, (n_col, 1)), cols[:, None]], axis=1)


def grouped_gemm_panels(
    order: np.ndarray, K: int, N: int, block_m: int, block_n: int, itemsize: int = 2
) -> list[tuple[tuple[str, int, int], tuple[str, tuple, int]]]:
    """The panels each program of a grouped GEMM reads, in ``order`` ((programs, 4) of (expert,
    row_start, row_end, pid_n)): its x panel ("x", row_start), the rows of its tile that are its
    expert's (the masked ones are not read) times K; its w panel ("w", (expert, pid_n)), K times
    the columns of its block that exist; ``itemsize`` bytes per element."""
    K, N = positive_int("K", K), positive_int("N", N)
    bm, bn, b = (positive_int(n, v) for n, v in (("block_m", block_m), ("block_n", block_n), ("itemsize", itemsize)))
    order = np.asarray(order, dtype=np.int64).reshape(-1, 4)
    rows = np.minimum(order[:, 2], order[:, 1] + bm) - order[:, 1]
    cols = np.minimum(N - order[:, 3] * bn, bn)
    return [
        (("x", int(r0), int(nr) * K * b), ("w", (int(e), int(j)), K * int(nc) * b))
        for (e, r0, _, j), nr, nc in zip(order.tolist(), rows.tolist(), cols.tolist())
    ]


def grouped_gemm_traffic(
    order: np.ndarray,
    K: int,
    N: int,
    block_m: int,
    block_n: int,
    gpu: L2Spec,
    programs_per_sm: int = 1,
    itemsize: int = 2,
    k_chunks: int = 8,
) -> Traffic:
    """DRAM traffic of a grouped GEMM whose programs run in ``order`` on ``gpu``:
    :func:`grouped_gemm_panels` through :func:`wave_traffic` with waves of ``gpu.sms *
    programs_per_sm`` programs and ``gpu.l2_bytes`` of L2."""
    if not isinstance(gpu, L2Spec):
        raise TypeError(f"gpu must be an L2Spec (e.g. nbhelpers.l2_model.H100_SXM), got {type(gpu).__name__}")
    wave = gpu.sms * positive_int("programs_per_sm", programs_per_sm)
    return wave_traffic(grouped_gemm_panels(order, K, N, block_m, block_n, itemsize), wave, gpu.l2_bytes, k_chunks)
