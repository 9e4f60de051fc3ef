"""The cluster occupancy of the DSM histogram kernel (the lab's report and ``cuadv caps --occupancy``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .launcher import engine
from .plans import CLUSTER_SIZES, HistogramPlan

OCCUPANCY_SHARED_KB = (0, 16, 64, 112, 128, 200, 227)


@dataclass
class OccupancyTable:
    """A titled table (the fields of ``cuadv.report.results.Table``, which the library does not import)."""

    title: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    note: str = ""


def occupancy_table(block: int = 1024) -> OccupancyTable:
    """Active clusters of the DSM histogram kernel for each cluster size and shared-memory size."""
    from ..device import current_device
    from ..kernel import max_active_clusters, max_cluster_size

    caps = current_device().caps
    k = engine().kernel(HistogramPlan("dsm", "int32", 1, counter_bits=32))
    rows = []
    for kb in OCCUPANCY_SHARED_KB:
        smem = min(kb * 1024, caps.shared_mem_per_block_optin)
        portable = max_cluster_size(k, block, smem, non_portable=False)
        nonportable = max_cluster_size(k, block, smem, non_portable=True)
        row: list[Any] = [f"{smem // 1024} KB", portable, nonportable]
        for c in CLUSTER_SIZES:
            row.append(max_active_clusters(k, block, c, smem) if c <= nonportable else 0)
        rows.append(row)
    return OccupancyTable(f"Cluster occupancy of the DSM histogram kernel ({block} threads per block)",
                          ["shared mem / block", "largest cluster (portable)", "largest (non-portable)"]
                          + [f"active clusters c={c}" for c in CLUSTER_SIZES], rows,
                          note="cuOccupancyMaxPotentialClusterSize and cuOccupancyMaxActiveClusters for "
                               "hist_cluster<int>; active clusters x cluster size = blocks resident at once (the "
                               "persistent grid)")
