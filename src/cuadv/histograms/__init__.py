"""Histograms on the GPU: ``histogram`` and ``bincount`` (drop-ins for cupy/numpy/torch with even bins),
their prepared forms, and the mechanism under them.

What it is: one histogram, five ways, each a plan class over the kernels of histogram.cu:
``global`` (every element a global atomic), ``shared`` (the whole histogram privatised per block in
shared memory), ``dsm`` (the bins sharded over a thread-block cluster's distributed shared memory),
``hot`` (skew-aware: the low bins privatised per block, the rest by global atomics) and ``exchange``
(the bins sharded over a cluster, elements sent to their owner block in 16-byte remote stores).
``variant="auto"`` chooses as the H200 measurements say (docs/histogram.md): shared where one block
holds the bins (32-bit counters, or for int32 input 16-bit ones packed two per word), then the exchange, and
the skew-aware path when a sample of the data shows most values in the low bins. Without clusters (before
compute capability 9.0): shared where the bins fit one block, else hot for skewed data, else global.

    import cuadv
    hist, edges = cuadv.histogram(x, bins=4096, range=(0.0, 1.0))
    counts = cuadv.bincount(labels, minlength=1000)

Layers: ``plans`` (pure: which kernel, how much shared memory), ``launcher`` (the engine: compile, occupancy,
launch; ``count_bins`` the raw uint32 count the lab measures), ``api`` (the drop-ins), ``zeroed`` (the count
buffers one-shot calls leave zeroed, kept per stream), ``occupancy`` (the cluster occupancy table). Test data and
exact references: ``cuadv.testing.histograms``.
"""

from .api import (PreparedBincount, PreparedHistogram, bincount, histogram, prepare_bincount,
                  prepare_histogram)
from .launcher import count_bins
from .plans import (VARIANTS, ClusterPlan, ExchangePlan, GlobalPlan, HistogramPlan, HotPlan, SharedPlan,
                    plan_histogram)

# The public names (docs/histogram.md). The engine (.launcher) and the occupancy table (.occupancy) are internal.
__all__ = ["histogram", "bincount", "prepare_histogram", "prepare_bincount", "PreparedHistogram",
           "PreparedBincount", "count_bins", "plan_histogram", "HistogramPlan", "GlobalPlan", "SharedPlan",
           "ClusterPlan", "HotPlan", "ExchangePlan", "VARIANTS"]
