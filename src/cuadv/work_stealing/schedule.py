"""The scheduler's kernel parameter (``cuadv::ws::Schedule``) and what a steal launch reports back
about its time slices (``SliceReport``), with the rule that sizes the next launch from it."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

import numpy as np

from ..dims import Dim3, is_int
from ..errors import LaunchConfigError
from ..params import StructArgument, c_struct
from ..state_pool import STATE_BYTES
from .policies import MAX_U32, MAX_U64, check_cluster, check_tiles

COUNT_EXITS = 1  # Schedule flags: kCountExits in work_stealing.cuh
PHASE1 = 2  # Schedule flags: kPhase1 (a stream launch given the second StealState of its slot's pair)
STEAL_STATE_BYTES = 16  # sizeof(cuadv::ws::StealState); a StatePool slot holds a pair
assert STATE_BYTES == 2 * STEAL_STATE_BYTES, "a StatePool slot must hold the pair of StealStates a stream alternates"

# Field for field cuadv::ws::Schedule (work_stealing.cuh, static_assert(sizeof(Schedule) == 80)).
SCHEDULE_DTYPE = c_struct("cuadv::ws::Schedule", [
    ("tiles", "<u4", (3,)), ("cluster", "<u4", (3,)), ("quantum_ns", "<u8"), ("prologue_factor", "<u4"),
    ("flags", "<u4"), ("state", "<u8"), ("trace_ptr", "<u8"), ("order_ptr", "<u8"), ("min_units", "<u4"),
    ("reserved", "<u4"), ("report_ptr", "<u8")], size=80)
# The integer fields of Schedule and their largest values (the widths above; phase selects one of a pair).
_INT_FIELDS = (("quantum_ns", MAX_U64), ("prologue_factor", MAX_U32), ("state_ptr", MAX_U64), ("trace_ptr", MAX_U64),
               ("order_ptr", MAX_U64), ("phase", 1), ("min_units", MAX_U32), ("report_ptr", MAX_U64))


@dataclass(frozen=True)
class Schedule(StructArgument):
    """The scheduler's kernel parameter (cuadv::ws::Schedule). ``tiles`` and ``cluster``: an int or 1 to 3 ints
    (x, y, z; missing ones 1), as every cuadv shape; at least one tile per axis (a launch with no tiles must not
    be made), within the grid limits, the cluster 1 to 16 blocks dividing the tile grid. Every field is checked
    here, so a bad one raises naming it rather than when the launch packs it. A kernel of your own that runs
    ``Scheduler<Steal>`` takes at most ``MAX_STEAL_UNITS`` (2^31 - 1) units (its 32-bit tickets), which a Schedule,
    knowing no policy, does not check: ``TileKernel`` does (``check_steal_units``)."""

    LAYOUT: ClassVar[np.dtype] = SCHEDULE_DTYPE

    tiles: Dim3
    cluster: Dim3
    quantum_ns: int = 0
    prologue_factor: int = 0
    state_ptr: int = 0
    trace_ptr: int = 0
    order_ptr: int = 0
    count_exits: bool = False  # steal: reset the counter by counting exits (graph captures; kCountExits)
    phase: int = 0  # steal, stream launches: which state of the pair at state_ptr this launch counts in (kPhase1)
    min_units: int = 1  # steal: units a block runs before its slice may end
    report_ptr: int = 0  # steal: where a block's slice and pace are reported (SliceReport), 0: nowhere

    def __post_init__(self):
        self._check()

    @classmethod
    def of_launch(cls, **values) -> "Schedule":
        """The Schedule TileKernel makes at every launch, from values its own checks passed ((x, y, z) shapes, ints
        in range): built without ``__post_init__``, whose checks (about 10 us) are for Schedules made by hand."""
        schedule = object.__new__(cls)
        for name, default in _DEFAULTS.items():
            object.__setattr__(schedule, name, values[name] if name in values else default)
        return schedule

    def _check(self) -> None:
        cluster = check_cluster(self.cluster)
        tiles = check_tiles(self.tiles, cluster)
        if 0 in tiles:
            raise LaunchConfigError(f"a Schedule takes at least one tile along each axis, got tiles {tiles}: a launch "
                                    "with no tiles must not be made (it would clear nothing)")
        object.__setattr__(self, "tiles", tiles)  # frozen: the (x, y, z) the layout packs
        object.__setattr__(self, "cluster", cluster)
        for name, limit in _INT_FIELDS:
            value = getattr(self, name)
            if not is_int(value):
                raise TypeError(f"Schedule {name} must be an int, got {value!r} ({type(value).__name__})")
            if not 0 <= value <= limit:
                raise LaunchConfigError(f"Schedule {name} = {value} is outside [0, {limit}]")
        if not isinstance(self.count_exits, (bool, np.bool_)):
            raise TypeError(f"Schedule count_exits must be True or False, got {self.count_exits!r}")
        if self.phase and self.state_ptr > 2**64 - 1 - STEAL_STATE_BYTES:  # the second state of the pair (state)
            raise LaunchConfigError(f"Schedule state_ptr = {self.state_ptr:#x} with phase 1 puts the second state past "
                                    "the 64-bit address space")

    @property
    def state(self) -> int:
        """The device's state pointer: the pair's first StealState, or with phase 1 its second."""
        return self.state_ptr + STEAL_STATE_BYTES if self.phase and self.state_ptr else self.state_ptr

    @property
    def flags(self) -> int:
        """The device's flag word (packed by StructArgument under the layout's name)."""
        return (COUNT_EXITS if self.count_exits else 0) | (PHASE1 if self.phase else 0)


_DEFAULTS = {f.name: f.default for f in fields(Schedule)}  # of_launch: tiles and cluster are always given


@dataclass(frozen=True)
class SliceReport:
    """What the first block of a steal launch to spend its time slice saw (report_slice in work_stealing.cuh).
    It ran while the whole grid competed for the GPU, so its pace is the launch's, not the lighter tail's.
    A block that found the work gone may report too (the first sampled block to leave, for either reason,
    writes the launch's report); where no slice ended that is the only report, with units_per_slice what its
    slice would have held at its pace, which includes the launch's lighter tail."""

    units_per_slice: int  # slice / time per unit, rounded up: units a block runs in one slice at that pace
    ns_per_unit: int  # its time per unit, its prologue spread over them

    @classmethod
    def from_word(cls, word: int) -> SliceReport | None:
        return cls(word >> 32, word & 0xFFFFFFFF) if word else None


def steal_grid_units(units: int, min_units: int, resident: int) -> int:
    """Blocks (clusters) of a steal launch with a quantum: one per unit when ``min_units`` <= 1; the
    ``resident`` that fit at once (at most ``units``) when those take every unit by running min_units each;
    else the ceil(units / min_units) that take every unit when each takes min_units, plus one spare wave of
    the ``resident``. Blocks yield after about one slice, so without the spare wave the last replacements are
    too few to refill every SM: with 8 tiles per slot and 5 per slice, 1,690 blocks for 1,056 slots left 422
    SMs' slots idle through the second half of the launch. Spare blocks that find the work gone read the
    counter once and exit."""
    if min_units <= 1:
        return units
    needed = -(-units // min_units)
    return min(units, resident if needed <= resident else needed + resident)


def learned_min_units(report: SliceReport | None, units: int, resident: int) -> int:
    """min_tiles=None: every block runs what one slice held in the latest report before it may yield, so the
    grid needs one block per that many units, about as many as will find work, and a spare wave
    (steal_grid_units), at most units / resident, so the grid still fills the GPU. Where each slot's share,
    ceil(units / resident), is at most two slices, ``units`` instead: only the blocks that fit at once are
    launched, and none yields before the work is gone (no block runs every unit) nor is relaunched, so a
    higher-priority kernel still waits at most about two quanta for a slot, and the launch pays nothing for
    slices it would hardly use (each relaunch costs a block launch and a claim that no tile hides). Until
    2026-12-04 that was the share itself, so a block yielded once it had run its share: where tiles differ, the
    blocks that drew light ones left while work remained, and no block replaced them (R-MAT, 23,548 tiles on 792
    slots: 0.908x cuSPARSE against 0.975x learned). 1 (the full tile grid) before any report."""
    if report is None:
        return 1
    share = -(-units // max(resident, 1))
    if share <= 2 * report.units_per_slice:
        return max(units, 1)
    return max(1, min(report.units_per_slice, units // max(resident, 1)))
