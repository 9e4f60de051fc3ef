// l2.cu - a hot lookup table read among streamed data (L2 persistence: access-policy windows).
//
// Every float4 of a large array is read once and written once (the streaming traffic) and, for
// it, `lookups` floats are read from a table at pseudo-random positions (the reused data):
//
//   out[j] = in[j] + (table[h(j,0)] + table[h(j,1)] + ...)      (each component of the float4)
//
// The table is what an access-policy window should keep in the persisting part of L2; without
// one, the streamed lines push table lines out. The kernel is the same with and without the
// window: the window is a launch (or stream) attribute, not code. h() is mirrored in l2.py.
struct LookupParams {
  const float4* in;            // streamed input (read once)
  float4* out;                 // streamed output (written once)
  const float* table;          // the hot table
  unsigned long long n_vec;    // float4 elements streamed (< 2^29)
  unsigned int table_len;      // floats in the table (>= 1)
  unsigned int lookups;        // table reads per float4 (1..8)
  unsigned int seed;
  unsigned int pad;
};

// A 32-bit integer mixer (xor-shift-multiply), so table positions look random and spread evenly.
static __device__ __forceinline__ unsigned int mix32(unsigned int x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// Position of lookup k for element j: the mixed key scaled to [0, len) by a multiply-high.
static __device__ __forceinline__ unsigned int table_index(unsigned long long j, unsigned int k, unsigned int seed,
                                                           unsigned int len) {
  const unsigned int h = mix32((static_cast<unsigned int>(j) << 3 | k) ^ seed);
  return static_cast<unsigned int>((static_cast<unsigned long long>(h) * len) >> 32);
}

extern "C" __global__ void l2_lookup_stream(const LookupParams p) {
  constexpr unsigned int kMaxLookups = 8;  // mirrored in l2.py (MAX_LOOKUPS)
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  for (unsigned long long j = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x; j < p.n_vec;
       j += stride) {
    float4 v = p.in[j];
    float looked_up[kMaxLookups];
#pragma unroll
    for (unsigned int k = 0; k < kMaxLookups; ++k) {  // every read issued before any is used
      looked_up[k] = k < p.lookups ? p.table[table_index(j, k, p.seed, p.table_len)] : 0.0f;
    }
    float t = 0.0f;
#pragma unroll
    for (unsigned int k = 0; k < kMaxLookups; ++k) {
      if (k < p.lookups) t += looked_up[k];  // summed in order k = 0, 1, ... (the reference's order)
    }
    v.x += t;
    v.y += t;
    v.z += t;
    v.w += t;
    p.out[j] = v;
  }
}
