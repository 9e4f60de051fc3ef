// cuadv/histogram_bins.cuh - numpy.histogram's bin of a value for even bins, as cuadv.histogram computes it:
// in the binning pass of float and wide input (binning.cu) and where the counting kernel bins float input as it
// reads it (histogram.cu). Any target.
#pragma once

namespace cuadv::bins {

// Edge i of numpy.histogram_bin_edges for even bins, without a host array: numpy.linspace computes
// edges[i] = i * step + start in float64 (a product and a sum, each rounded: no FMA here) and sets the last
// edge to stop exactly; E = float: the float64 value rounded once to float (numpy's astype). The host
// chooses when this applies (step > 0 and far above the edges' spacing; else it asks numpy).
template <typename E>
static __device__ __forceinline__ E edge_value(unsigned long long i, unsigned bins, double start, double step,
                                               double stop) {
  const double v = i == bins ? stop : __dadd_rn(__dmul_rn(static_cast<double>(i), step), start);
  return static_cast<E>(v);
}

// The edges a value is compared against: the host's array, or (table == nullptr) even edges computed where
// read (edge_value), which saves a gather from memory per element; they are the values hist_edges writes.
template <typename E>
struct EdgeSource {
  const E* table;
  unsigned bins;
  double start, step, stop;
  __device__ __forceinline__ E operator()(unsigned i) const {
    return table != nullptr ? table[i] : edge_value<E>(i, bins, start, step, stop);
  }
};

// The quick estimate's product rounded on its own (no FMA with the subtraction of its whole part after it), so the
// estimate is the one the host's bound and the CPU model (tests/test_histogram_api_cpu.py) take.
static __device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
static __device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }

// numpy.histogram's rule for even bins: the bin index of v, or -1 outside [edges[0], edges[bins]] and for NaN.
// An estimate from (v - lo) / span * bins, then one step down or up so that edges[i] <= v < edges[i + 1] (the
// last bin closed on the right), exactly as numpy corrects its estimate against the edges it returns.
// Where the host gives a margin below 0.5 (quick_estimate in api.py gives one below 0.25, or none), the estimate
// is (v - lo) * inv, a product instead of a division, and a value whose estimate lies more than `margin` bins from
// both of its bin's edges takes that bin without reading an edge: the host bounds the estimate's error plus the
// edges' own rounding below margin / 2 bins, so such a value lies between those edges, and numpy's estimate, as
// close, is not corrected.
template <typename E>
struct EvenBins {
  EdgeSource<E> edge;
  E first, last;  // edge(0), edge(bins)
  E lo, span;     // numpy's estimate's origin and width, in E as numpy computes them
  E inv, margin;  // the quick estimate's scale (bins / span) and its bound in bins; margin >= 0.5: not used

  __device__ __forceinline__ EvenBins(const E* table, unsigned bins, E lo_, E span_, E inv_, E margin_,
                                      double start, double step, double stop)
      : edge{table, bins, start, step, stop}, lo(lo_), span(span_), inv(inv_), margin(margin_) {
    first = edge(0);
    last = edge(bins);
  }

  __device__ __forceinline__ int index(E v) const {
    if (!(v >= first && v <= last)) return -1;
    const unsigned bins = edge.bins;
    E f;
    if (margin < E(0.5)) {  // the same for every value of a launch: no divergence
      f = mul_rn(v - lo, inv);
      const E whole = floor(f);
      const E frac = f - whole;  // exact where f >= 0 (the only case it decides)
      if (frac > margin && frac < E(1) - margin && whole >= E(0) && whole < static_cast<E>(bins))
        return static_cast<int>(whole);
    } else {
      f = (v - lo) / span * static_cast<E>(bins);
    }
    // One step against the edges, as numpy takes; the quick estimate is within one bin of v's (the host's bound).
    unsigned k = f >= static_cast<E>(bins) ? bins - 1u : (f > E(0) ? static_cast<unsigned>(f) : 0u);
    if (k > 0u && v < edge(k)) {
      --k;
    } else if (k + 1u < bins && v >= edge(k + 1u)) {
      ++k;
    }
    return static_cast<int>(k);
  }
};

}  // namespace cuadv::bins
