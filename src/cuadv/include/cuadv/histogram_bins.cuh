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

// Where the edges a value is compared against come from: the host's array (table), even edges computed where
// read (edge_value, which saves a gather from memory per element; the values hist_edges writes), or either, as
// the table pointer says at run time. A template argument, so that a kernel compiled for one carries no
// instruction of the other's.
enum class Edges { computed, table, either };

template <typename E, Edges From>
struct EdgeSource {
  const E* table;  // null where computed
  unsigned bins;
  double start, step, stop;  // where computed
  __device__ __forceinline__ E operator()(unsigned i) const {
    if constexpr (From == Edges::table) {
      return table[i];
    } else if constexpr (From == Edges::computed) {
      return edge_value<E>(i, bins, start, step, stop);
    } else {
      return table != nullptr ? table[i] : edge_value<E>(i, bins, start, step, stop);
    }
  }
};

// The quick estimate's product rounded on its own (never contracted into an FMA), so the estimate is the one the
// host's bound and the CPU model (tests/test_histogram_api_cpu.py) take.
static __device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
static __device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
// The nearest integer (ties to even; either neighbour serves the rule below).
static __device__ __forceinline__ int round_to_int(float f) { return __float2int_rn(f); }
static __device__ __forceinline__ int round_to_int(double f) { return __double2int_rn(f); }

// The quick estimate's margin (in bins) below which it bins: f then lies within half a bin of v's bin.
constexpr double kQuickMarginLimit = 1.0;

// numpy.histogram's rule for even bins: the bin index of v, or -1 outside [edges[0], edges[bins]] and for NaN.
// An estimate from (v - lo) / span * bins, then one step down or up so that edges[i] <= v < edges[i + 1] (the
// last bin closed on the right), exactly as numpy corrects its estimate against the edges it returns.
// Where the host gives a margin below kQuickMarginLimit = 1 (quick_estimate in api.py; else it gives 1), the
// estimate is f = (v - lo) * inv, a product instead of a division, and one edge decides every value: the host
// bounds the estimate's error plus the edges' own rounding below margin / 2 < 0.5 bins, so where v lies in bin b
// (edges[b] <= v < edges[b + 1]) f lies in (b - 0.5, b + 1.5), and the edge nearest f, n = round(f), is b or
// b + 1: v's bin is n where v >= edges[n], else n - 1 (and bins - 1 for v == edges[bins]). One edge and no branch
// per value where the edges are computed; from a table, only values within `margin` of edge n read it. An
// earlier form took the bin without an edge where f lay more than `margin` from both of its bin's edges, and
// stepped against the edges otherwise, which at 4,096 bins sent 40% of a warp's reads down the step's branch
// with a few of its lanes (an H100 profile, 2026-12-06: 19.6 active threads per warp, issue slots 88% busy, 52
// instructions per element).
template <typename E, Edges From>
struct EvenBins {
  EdgeSource<E, From> edge;
  E first, last;  // edge(0), edge(bins)
  E lo, span;     // numpy's estimate's origin and width, in E as numpy computes them
  E inv, margin;  // the quick estimate's scale (bins / span) and its bound in bins; margin >= 1: not used

  __device__ __forceinline__ EvenBins(const E* table, unsigned bins, E lo_, E span_, E inv_, E margin_,
                                      double start, double step, double stop)
      : edge{table, bins, start, step, stop}, lo(lo_), span(span_), inv(inv_), margin(margin_) {
    first = edge(0);
    last = edge(bins);
  }

  __device__ __forceinline__ int index(E v) const {
    return margin < E(kQuickMarginLimit) ? quick_index(v) : numpy_index(v);
  }

  // The quick estimate (the host gave a margin below kQuickMarginLimit) and one edge.
  __device__ __forceinline__ int quick_index(E v) const {
    if (!(v >= first && v <= last)) return -1;
    const int bins = static_cast<int>(edge.bins);
    // f > -0.5 and f < bins + 0.5 (v is within the edges), so 0 <= n <= bins
    const E f = mul_rn(v - lo, inv);
    const int n = round_to_int(f);
    bool above;
    if constexpr (From == Edges::table) {
      // f lies within margin / 2 of v's bin [b, b + 1], so v is above edge n where f - n > margin (else n would
      // be b + 1 and f beyond it) and below it where f - n < -margin (else n = b and f below it); only values
      // between gather the edge, which comes from L2 where the table outgrows L1 (256 KB at 64K bins). f - n is
      // exact: n = 0 below f = 0.5, and above it n lies within [f / 2, 2 f] (Sterbenz).
      const E d = f - static_cast<E>(n);
      above = d > E(0);
      if (!(d > margin || d < -margin)) above = v >= edge(static_cast<unsigned>(n));
    } else {
      above = v >= edge(static_cast<unsigned>(n));  // a few registers' arithmetic: cheaper than a branch
    }
    return min(above ? n : n - 1, bins - 1);
  }

  // numpy's estimate and one step against the edges, as numpy takes: its estimate is within one bin of v's.
  __device__ __forceinline__ int numpy_index(E v) const {
    if (!(v >= first && v <= last)) return -1;
    const unsigned bins = edge.bins;
    const E f = (v - lo) / span * static_cast<E>(bins);
    unsigned k = f >= static_cast<E>(bins) ? bins - 1u : (f > E(0) ? static_cast<unsigned>(f) : 0u);
    if (k > 0u && v < edge(k)) {
      --k;
    } else if (k + 1u < bins && v >= edge(k + 1u)) {
      ++k;
    }
    return static_cast<int>(k);
  }
};

// f(rule) with the rule for `table` (nullptr: edges computed from (start, step, stop)), each compiled apart.
template <typename E, class F>
static __device__ __forceinline__ void edges_dispatch(const E* table, unsigned bins, E lo, E span, E inv, E margin,
                                                      double start, double step, double stop, F&& f) {
  if (table != nullptr) {
    f(EvenBins<E, Edges::table>(table, bins, lo, span, inv, margin, start, step, stop));
  } else {
    f(EvenBins<E, Edges::computed>(table, bins, lo, span, inv, margin, start, step, stop));
  }
}

}  // namespace cuadv::bins
