// Element-wise ops over F32 rows: one thread per element, grid-stride, any strides; src1 (add,
// mul, swiglu, swiglu_oai) repeats along every dimension where it has extent 1.
#include "backends/cuda/kernels.h"
#include "graph/ops.h"

namespace ps::gpu {
namespace {

__device__ inline float silu(float v) { return v / (1.0f + expf(-v)); }
// 0.5 v (1 + tanh(z)) as v / (1 + exp(-2z)), as the CPU backend computes it.
__device__ inline float gelu_tanh(float v) {
  constexpr float kTwoSqrt2OverPi = 2.0f * 0.79788456080286535588f;
  return v / (1.0f + expf(-kTwoSqrt2OverPi * v * (1.0f + 0.044715f * v * v)));
}

__global__ void elementwise_kernel(View a, View b, View d, uint32_t op, float s, float s2,
                                   int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i0 = i % a.ne[0], r = i / a.ne[0];
    const int64_t i1 = r % a.ne[1], i2 = (r / a.ne[1]) % a.ne[2], i3 = r / (a.ne[1] * a.ne[2]);
    const float x = reinterpret_cast<const float*>(row_at(a, i1, i2, i3))[i0];
    float y = 0.0f;
    if (op == PS_EW_ADD || op == PS_EW_MUL || op == PS_EW_SWIGLU || op == PS_EW_SWIGLU_OAI)
      y = reinterpret_cast<const float*>(row_at(b, i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]))[i0];
    float v;
    switch (op) {
      case PS_EW_ADD:
        v = x + y;
        break;
      case PS_EW_MUL:
        v = x * y;
        break;
      case PS_EW_SILU:
        v = silu(x);
        break;
      case PS_EW_GELU:
        v = gelu_tanh(x);
        break;
      case PS_EW_SCALE:
        v = x * s;
        break;
      case PS_EW_SIGMOID:
        v = 1.0f / (1.0f + expf(-x));
        break;
      case PS_EW_SWIGLU_OAI: {  // s: alpha, s2: limit (graph/ops.h)
        const float g = fminf(x, s2), u = fminf(fmaxf(y, -s2), s2);
        v = g / (1.0f + expf(-s * g)) * (u + 1.0f);
        break;
      }
      default:  // PS_EW_SWIGLU
        v = silu(x) * y;
        break;
    }
    reinterpret_cast<float*>(row_at(d, i1, i2, i3))[i0] = v;
  }
}

}  // namespace

void elementwise(const Launch& l, const Tensor& node) {
  const uint32_t op = elementwise_code(node.op);
  const Tensor& a = *node.src[0];
  const View b = view_of(node.src[1] ? *node.src[1] : a);
  const int64_t n = a.n_elements();
  const ElementwiseScalars s = elementwise_scalars(node);
  PS_LAUNCH(elementwise_kernel, blocks_for(n, 256), 256, l.stream, view_of(a), b, view_of(node), op,
            s.s0, s.s1, n);
  check_launch("elementwise");
}

}  // namespace ps::gpu

namespace ps::gpu {

cudaError_t kernel_image_status() {
  cudaFuncAttributes attr{};
  const cudaError_t e = cudaFuncGetAttributes(&attr, elementwise_kernel);
  if (e != cudaSuccess) (void)cudaGetLastError();
  return e;
}

}  // namespace ps::gpu
