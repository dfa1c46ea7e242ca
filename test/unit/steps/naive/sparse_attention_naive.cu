// A plain CUDA implementation of dhs sparse_attention with the MLIR memref
// calling convention, used to test the runtime's CUDA backend end to end
// before (and independently of) compiler-generated kernels. Not fast: one
// block per (request, query, head), float accumulation.
//
// Regenerate the PTX beside it (CUDA 13):
//   nvcc -arch=sm_90a -ptx -O3 sparse_attention_naive.cu -o sparse_attention_naive.ptx
//
// Every parameter is a memref descriptor flattened as allocated pointer,
// aligned pointer, offset, sizes[rank], strides[rank]. The pool's tiers are
// byte memrefs [tokens, layers, row bytes] (one layer here).

#include <cuda_bf16.h>
#include <stdint.h>

#define MEMREF1(T, n) T *n##_al, T *n, int64_t n##_off, int64_t n##_d0, int64_t n##_s0
#define MEMREF2(T, n)                                                          \
  T *n##_al, T *n, int64_t n##_off, int64_t n##_d0, int64_t n##_d1,            \
      int64_t n##_s0, int64_t n##_s1
#define MEMREF3(T, n)                                                          \
  T *n##_al, T *n, int64_t n##_off, int64_t n##_d0, int64_t n##_d1,            \
      int64_t n##_d2, int64_t n##_s0, int64_t n##_s1, int64_t n##_s2
#define MEMREF4(T, n)                                                          \
  T *n##_al, T *n, int64_t n##_off, int64_t n##_d0, int64_t n##_d1,            \
      int64_t n##_d2, int64_t n##_d3, int64_t n##_s0, int64_t n##_s1,          \
      int64_t n##_s2, int64_t n##_s3

constexpr int kThreads = 128;
constexpr int kQkDim = 576;
constexpr int kVDim = 512;
// The compiler bakes softmax_scale into its kernels; so does this one (it
// must equal the manifest's softmax_scale).
constexpr float kScale = 0.0416666679f;

extern "C" __global__ void __launch_bounds__(kThreads)
sparse_attention_naive(MEMREF4(const __nv_bfloat16, queries),
                       MEMREF3(const int32_t, rows),
                       MEMREF3(const int32_t, slots),
                       MEMREF1(const int64_t, hstart),
                       MEMREF1(const int32_t, hlen),
                       MEMREF3(const uint8_t, hbm),
                       MEMREF3(const uint8_t, host),
                       MEMREF4(__nv_bfloat16, out),
                       MEMREF1(int32_t, status)) {
  // Scores of the K selections (dynamic shared memory), then weights.
  extern __shared__ float scores[];
  __shared__ float reduce[kThreads / 32];
  __shared__ const __nv_bfloat16 *rowPtr[2048];

  const int64_t B = queries_d0, Q = queries_d1, H = queries_d2, K = rows_d2;
  const int64_t pair = blockIdx.x / H, h = blockIdx.x % H;
  if (pair >= B * Q || K > 2048)
    return;
  const int64_t b = pair / Q, q = pair % Q;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

  // Resolve each selection's row (or nullptr), flagging bad inputs.
  for (int64_t k = threadIdx.x; k < K; k += kThreads) {
    int32_t r = rows[b * rows_s0 + q * rows_s1 + k * rows_s2];
    int32_t s = slots[b * slots_s0 + q * slots_s1 + k * slots_s2];
    const __nv_bfloat16 *p = nullptr;
    if (r != -1) {
      if (r < -1 || r >= hlen[b * hlen_s0]) {
        atomicOr(status, 1);
      } else if (s >= 0) {
        if (s >= hbm_d0)
          atomicOr(status, 2);
        else
          p = reinterpret_cast<const __nv_bfloat16 *>(hbm + s * hbm_s0);
      } else {
        int64_t index = hstart[b * hstart_s0] + r;
        if (index >= host_d0)
          atomicOr(status, 4);
        else
          p = reinterpret_cast<const __nv_bfloat16 *>(host + index * host_s0);
      }
    }
    rowPtr[k] = p;
  }
  __syncthreads();

  // Scores: one warp per selection.
  const __nv_bfloat16 *qrow =
      queries + b * queries_s0 + q * queries_s1 + h * queries_s2;
  for (int64_t k = warp; k < K; k += kThreads / 32) {
    const __nv_bfloat16 *p = rowPtr[k];
    float dot = 0.0f;
    if (p)
      for (int d = lane; d < kQkDim; d += 32)
        dot += __bfloat162float(qrow[d]) * __bfloat162float(p[d]);
    for (int o = 16; o > 0; o /= 2)
      dot += __shfl_xor_sync(0xffffffffu, dot, o);
    if (lane == 0)
      scores[k] = p ? kScale * dot : -INFINITY;
  }
  __syncthreads();

  // Max, then weights and their sum.
  float m = -INFINITY;
  for (int64_t k = threadIdx.x; k < K; k += kThreads)
    m = fmaxf(m, scores[k]);
  for (int o = 16; o > 0; o /= 2)
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (lane == 0)
    reduce[warp] = m;
  __syncthreads();
  m = reduce[0];
  for (int w = 1; w < kThreads / 32; ++w)
    m = fmaxf(m, reduce[w]);
  __syncthreads();
  float sum = 0.0f;
  for (int64_t k = threadIdx.x; k < K; k += kThreads) {
    float w = rowPtr[k] ? expf(scores[k] - m) : 0.0f;
    scores[k] = w;
    sum += w;
  }
  for (int o = 16; o > 0; o /= 2)
    sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0)
    reduce[warp] = sum;
  __syncthreads();
  sum = 0.0f;
  for (int w = 0; w < kThreads / 32; ++w)
    sum += reduce[w];

  // Output: each thread owns kVDim / kThreads value dims.
  __nv_bfloat16 *orow = out + b * out_s0 + q * out_s1 + h * out_s2;
  for (int v = threadIdx.x; v < kVDim; v += kThreads) {
    float acc = 0.0f;
    for (int64_t k = 0; k < K; ++k)
      if (rowPtr[k])
        acc += scores[k] * __bfloat162float(rowPtr[k][v]);
    orow[v * out_s3] = __float2bfloat16_rn(sum > 0.0f ? acc / sum : 0.0f);
  }
}
