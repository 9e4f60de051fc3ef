"""The model against a GPU: a TileKernel that runs the simulator's workload (tiles spinning on
%globaltimer), so a measured block trace can be compared with a prediction
(``tests/test_simulate_gpu.py``)."""

from __future__ import annotations

SPIN_PARAMS = "const unsigned long long* duration_ns, unsigned long long prologue_ns"
SPIN_PROLOGUE = r"""
    if (threadIdx.x == 0) {  // the prologue: a known number of nanoseconds, whatever the SM clock
      const unsigned long long t0 = cuadv::ptx::globaltimer_ns();
      while (cuadv::ptx::globaltimer_ns() - t0 < prologue_ns) {}
    }
    __syncthreads();  // the whole block waits for the prologue, as it would for a shared-memory setup
"""
SPIN_BODY = r"""
      if (threadIdx.x == 0) {  // the tile: spin for its duration on %globaltimer
        const unsigned long long t0 = cuadv::ptx::globaltimer_ns();
        const unsigned long long d = duration_ns[tile.index];
        while (cuadv::ptx::globaltimer_ns() - t0 < d) {}
      }
      __syncthreads();  // the tile ends when the whole block is done with it
"""


def spin_kernel(policy: str, quantum_us: float | None = None, block: int = 256):
    """A TileKernel whose tiles spin for per-tile durations read from an array (ns) after a spin
    prologue: the workload the simulator models, to run on a GPU and compare (``trace=True``).
    Steal keeps the full tile grid (min_tiles 1), as the model does."""
    from ..work_stealing import TileKernel

    return TileKernel(SPIN_PARAMS, SPIN_BODY, SPIN_PROLOGUE, policy=policy, block=block,
                      quantum_us=quantum_us if policy in ("steal", "auto") else None, name=f"sim_spin_{policy}",
                      min_tiles=1)
