"""How many blocks (Triton programs) and warps an SM holds at once, from what the compiler reports.

A block's warps are placed on one SM together, and a block stays until it ends, so an SM holds
whole blocks, as many as every one of its resources allows:

* **registers**: ptxas's ``Used N registers`` per thread, rounded up to the allocation unit
  (256 registers per warp, so a multiple of 8 per thread); the register file is split over the
  SM's 4 sub-partitions (16,384 registers each) and a warp lives in one, so the warps that fit
  are ``4 * floor(16384 / regs_per_warp)`` (the whole file divided, then rounded down to the
  warp allocation granularity of 4), in whole blocks. A block whose registers exceed the 65,536
  a block may use (counted with its warps rounded up to a multiple of 4) does not launch;
* **shared memory**: the block's bytes (Triton's ``metadata.shared``) plus the 1 KB the driver
  reserves per block (compute capability 8.0 and later), rounded up to 128 bytes, against the
  SM's shared memory (the largest carveout: 228 KB on 9.0, 164 KB on 8.0). A block over the
  per-block limit (227 KB on 9.0, 163 KB on 8.0, not counting the reserve) does not launch;
* **warps**: at most 64 resident warps per SM;
* **blocks**: at most 32 resident blocks per SM.

:func:`occupancy` returns each limit's count of blocks, the smallest (what the SM holds), and
which limits bind. :func:`occupancy_ref` is the slow reference: it places blocks on an SM one at
a time, warp by warp into the sub-partitions, until the next one no longer fits.

The figures per compute capability are those of NVIDIA's CUDA C++ Programming Guide, table
"Technical Specifications per Compute Capability" (registers per SM and per thread, resident
warps and blocks, shared memory per SM and per block); the allocation rules (units, sub-partitions,
the reserve, the launch checks) are those of the CUDA Occupancy Calculator as NVIDIA ships it in
``cuda_occupancy.h`` (the CUDA toolkit, and Triton's NVIDIA backend: the functions
``cudaOccMaxBlocksPerSMRegsLimit`` and ``cudaOccMaxBlocksPerSMSmemLimit``). The shared-memory
carveout is assumed to be the largest one (the driver's choice for a kernel that asks for more
than the default; a kernel can ask for less with a carveout preference).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .validation import int_in_range, nonnegative_int, positive_int

__all__ = [
    "SMSpec",
    "Limit",
    "Occupancy",
    "SM_SPECS",
    "H100",
    "A100",
    "occupancy",
    "occupancy_ref",
    "allocated_registers",
    "allocated_shared",
    "sm_spec",
    "latency_bound_slowdown",
]

KB = 1024


@dataclass(frozen=True)
class SMSpec:
    """The resources of one streaming multiprocessor that decide occupancy (defaults: the values
    shared by compute capabilities 8.0 and 9.0)."""

    name: str
    compute_capability: str
    shared_per_sm: int  # bytes, the largest carveout
    max_shared_per_block: int  # bytes a block may ask for (opt-in), not counting the reserve
    reserved_shared_per_block: int = 1 * KB  # what the driver keeps per block (8.0 and later; 0 before)
    shared_alloc_unit: int = 128  # bytes
    registers_per_sm: int = 65_536
    max_registers_per_block: int = 65_536
    max_registers_per_thread: int = 255
    register_alloc_unit: int = 256  # registers per warp
    sub_partitions: int = 4  # warp allocation granularity
    max_warps_per_sm: int = 64
    max_blocks_per_sm: int = 32
    max_threads_per_block: int = 1024
    warp_size: int = 32

    def __post_init__(self):
        for k in (
            "shared_per_sm",
            "max_shared_per_block",
            "shared_alloc_unit",
            "registers_per_sm",
            "max_registers_per_block",
            "max_registers_per_thread",
            "register_alloc_unit",
            "sub_partitions",
            "max_warps_per_sm",
            "max_blocks_per_sm",
            "max_threads_per_block",
            "warp_size",
        ):
            positive_int(f"SMSpec.{k}", getattr(self, k))
        nonnegative_int("SMSpec.reserved_shared_per_block", self.reserved_shared_per_block)
        if self.register_alloc_unit % self.warp_size:
            raise ValueError("register_alloc_unit must be a multiple of warp_size")

    @property
    def registers_per_sub_partition(self) -> int:
        return self.registers_per_sm // self.sub_partitions

    @property
    def register_granularity_per_thread(self) -> int:
        """Registers per thread are allocated in steps of this many (8 on 8.0 and 9.0)."""
        return self.register_alloc_unit // self.warp_size


#: compute capability 9.0: H100 and H200
H100 = SMSpec("H100/H200 (compute capability 9.0)", "9.0", shared_per_sm=228 * KB, max_shared_per_block=227 * KB)
#: compute capability 8.0: A100
A100 = SMSpec("A100 (compute capability 8.0)", "8.0", shared_per_sm=164 * KB, max_shared_per_block=163 * KB)
#: compile targets (nbhelpers.compile_check's names) -> their SM
SM_SPECS = {"sm_90": H100, "sm_80": A100}


def sm_spec(sm: SMSpec | str) -> SMSpec:
    """An SMSpec, or one of :data:`SM_SPECS` by target name ("sm_90")."""
    if isinstance(sm, SMSpec):
        return sm
    if isinstance(sm, str) and sm in SM_SPECS:
        return SM_SPECS[sm]
    raise ValueError(f"unknown SM {sm!r}: give an SMSpec or one of {sorted(SM_SPECS)}")


class Limit(enum.Enum):
    """The resource that caps the blocks an SM holds."""

    REGISTERS = "registers"
    SHARED_MEMORY = "shared memory"
    WARPS = "warps"
    BLOCKS = "blocks"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Occupancy:
    """What one SM holds of a kernel. blocks_by: each limit's count of blocks on its own (0: the
    block does not launch at all). limits: the limits that bind (all those whose count equals
    ``blocks``), in the order registers, shared memory, warps, blocks; ``limit`` is the first."""

    blocks: int
    warps: int
    max_warps: int
    warps_per_block: int
    blocks_by: dict = field(compare=False)
    limits: tuple
    registers_per_thread: int  # as allocated (rounded up)
    shared_per_block: int  # as allocated (with the reserve, rounded up)

    @property
    def limit(self) -> Limit:
        return self.limits[0]

    @property
    def fraction(self) -> float:
        """Resident warps over the SM's warp slots (what Nsight Compute calls theoretical occupancy)."""
        return self.warps / self.max_warps

    @property
    def launches(self) -> bool:
        return self.blocks > 0


def _inputs(registers_per_thread, num_warps, shared_per_block, sm):
    spec = sm_spec(sm)
    regs = int_in_range("registers_per_thread", registers_per_thread, 1, spec.max_registers_per_thread)
    warps = int_in_range("num_warps", num_warps, 1, spec.max_threads_per_block // spec.warp_size)
    shared = nonnegative_int("shared_per_block", shared_per_block, "bytes")
    return spec, regs, warps, shared


def allocated_registers(registers_per_thread: int, sm: SMSpec | str = "sm_90") -> int:
    """Registers per thread as the SM allocates them: rounded up to the allocation unit
    (a multiple of 8 on 8.0 and 9.0: 131 -> 136)."""
    spec, regs, _, _ = _inputs(registers_per_thread, 1, 0, sm)
    g = spec.register_granularity_per_thread
    return -(-regs // g) * g


def allocated_shared(shared_per_block: int, sm: SMSpec | str = "sm_90") -> int:
    """Shared memory per block as the SM allocates it: the bytes asked for plus the driver's
    reserve, rounded up to the allocation unit."""
    spec, _, _, shared = _inputs(1, 1, shared_per_block, sm)
    unit = spec.shared_alloc_unit
    return -(-(shared + spec.reserved_shared_per_block) // unit) * unit


def occupancy(
    registers_per_thread: int, num_warps: int, shared_per_block: int = 0, sm: SMSpec | str = "sm_90"
) -> Occupancy:
    """Resident blocks and warps per SM of a kernel with ``registers_per_thread`` (ptxas's count,
    1 ... 255), ``num_warps`` warps per block (Triton's ``num_warps``) and ``shared_per_block``
    bytes of shared memory (Triton's ``metadata.shared``; 0 for none) on the SM ``sm`` (an
    :class:`SMSpec` or "sm_90" / "sm_80"). A block that cannot launch (too much shared memory or
    too many registers per block) gives 0 blocks, with the limit that stops it. Raises TypeError
    or ValueError for inputs no compiled kernel can have."""
    spec, regs, warps, shared = _inputs(registers_per_thread, num_warps, shared_per_block, sm)
    regs_alloc = allocated_registers(regs, spec)
    regs_per_warp = regs_alloc * spec.warp_size
    shared_alloc = allocated_shared(shared, spec)

    # registers: warps live in sub-partitions; the launch check rounds the block's warps up to them
    warps_rounded = -(-warps // spec.sub_partitions) * spec.sub_partitions
    if regs_per_warp * warps_rounded > spec.max_registers_per_block:
        by_regs = 0
    else:
        by_regs = (spec.registers_per_sub_partition // regs_per_warp) * spec.sub_partitions // warps
    if shared > spec.max_shared_per_block:
        by_shared = 0
    else:  # nothing allocated (no reserve, no shared memory): shared memory sets no limit
        by_shared = spec.shared_per_sm // shared_alloc if shared_alloc else spec.max_blocks_per_sm
    blocks_by = {
        Limit.REGISTERS: by_regs,
        Limit.SHARED_MEMORY: by_shared,
        Limit.WARPS: spec.max_warps_per_sm // warps,
        Limit.BLOCKS: spec.max_blocks_per_sm,
    }
    blocks = min(blocks_by.values())
    limits = tuple(k for k, v in blocks_by.items() if v == blocks)
    return Occupancy(blocks, blocks * warps, spec.max_warps_per_sm, warps, blocks_by, limits, regs_alloc, shared_alloc)


def occupancy_ref(
    registers_per_thread: int, num_warps: int, shared_per_block: int = 0, sm: SMSpec | str = "sm_90"
) -> tuple[int, frozenset]:
    """(resident blocks, the limits that bind) by placing blocks on an empty SM one at a time:
    each warp into the sub-partition with the most free registers, each block's shared memory
    (plus the reserve, in whole units) from the SM's, until a block does not fit. A limit binds
    if it alone would stop the next block. The slow, obviously-counted version of
    :func:`occupancy`."""
    spec, regs, warps, shared = _inputs(registers_per_thread, num_warps, shared_per_block, sm)
    g, unit = spec.register_granularity_per_thread, spec.shared_alloc_unit
    per_warp = spec.warp_size * g * -(-regs // g)
    smem = unit * -(-(shared + spec.reserved_shared_per_block) // unit)
    whole_block_regs = per_warp * spec.sub_partitions * -(-warps // spec.sub_partitions)
    cannot = {Limit.REGISTERS} if whole_block_regs > spec.max_registers_per_block else set()
    if shared > spec.max_shared_per_block:
        cannot.add(Limit.SHARED_MEMORY)
    if cannot:  # the launch itself fails
        return 0, frozenset(cannot)
    free_regs = [spec.registers_per_sub_partition] * spec.sub_partitions
    free_smem, free_warps, blocks = spec.shared_per_sm, spec.max_warps_per_sm, 0
    while True:
        trial = list(free_regs)
        regs_ok = True
        for _ in range(warps):
            i = max(range(len(trial)), key=lambda j: trial[j])
            if trial[i] < per_warp:
                regs_ok = False
                break
            trial[i] -= per_warp
        stops = set()
        if not regs_ok:
            stops.add(Limit.REGISTERS)
        if free_smem < smem:
            stops.add(Limit.SHARED_MEMORY)
        if free_warps < warps:
            stops.add(Limit.WARPS)
        if blocks >= spec.max_blocks_per_sm:
            stops.add(Limit.BLOCKS)
        if stops:
            return blocks, frozenset(stops)
        free_regs, free_smem, free_warps, blocks = trial, free_smem - smem, free_warps - warps, blocks + 1


def latency_bound_slowdown(programs: int, blocks_before: int, blocks_after: int, sms: int = 132) -> tuple[float, float]:
    """How much longer a latency-bound launch of ``programs`` programs runs when an SM holds
    ``blocks_after`` of them at once instead of ``blocks_before`` (a kernel whose time is set by
    the warps it has in flight, not by its bytes or FLOPs). Two estimates: the warp ratio,
    ``blocks_before / blocks_after``, if the programs flowed through the SMs evenly; and the wave
    ratio, ``ceil(P / (sms x after)) / ceil(P / (sms x before))``, if each wave of programs took
    as long as a full one (a last partial wave as slow as a full one). Neither bounds the other
    in general; the truth of a latency-bound kernel lies near the one its grid makes worse."""
    for name, v in (("programs", programs), ("blocks_before", blocks_before), ("blocks_after", blocks_after)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if isinstance(sms, bool) or not isinstance(sms, int) or sms < 1:
        raise ValueError(f"sms must be a positive int, got {sms!r}")
    waves = [-(-programs // (sms * b)) for b in (blocks_before, blocks_after)]
    return blocks_before / blocks_after, waves[1] / waves[0]
