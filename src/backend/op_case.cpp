#include "backend/op_case.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

namespace ps {

Tensor* OpCase::random_leaf(const std::string& leaf_name, DType type, std::array<int64_t, 4> ne,
                            std::mt19937& rng, float scale) {
  const int64_t n = ne[0] * ne[1] * ne[2] * ne[3];
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> f(static_cast<size_t>(n));
  for (float& x : f) x = d(rng);
  std::vector<uint8_t>& bytes =
      leaf_bytes.emplace_back(row_bytes(type, ne[0]) * size_t(ne[1] * ne[2] * ne[3]));
  if (type == DType::F32)
    std::memcpy(bytes.data(), f.data(), bytes.size());
  else
    for (int64_t r = 0; r < n / ne[0]; ++r)
      quantize_row(type, f.data() + r * ne[0], bytes.data() + size_t(r) * row_bytes(type, ne[0]),
                   ne[0]);
  return graph.leaf(leaf_name, type, ne, bytes.data());
}

Tensor* OpCase::int_leaf(const std::string& leaf_name, const std::vector<int32_t>& values) {
  std::vector<uint8_t>& bytes = leaf_bytes.emplace_back(values.size() * sizeof(int32_t));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return graph.leaf(leaf_name, DType::I32, {int64_t(values.size()), 1, 1, 1}, bytes.data());
}

double OpCase::matmul_tolerance(DType t) {
  if (block_size(t) > 1) return 2e-2;
  return t == DType::F32 ? 1e-5 : 1e-3;
}

PreparedCase::PreparedCase(Device& dev, OpCase& c) : dev_(dev), case_(c) {
  for (Tensor* t : c.graph.all()) {
    if (t->op != OpKind::None) continue;
    host_.emplace_back(t, t->data);
    auto& b = buffers_.emplace_back(dev.alloc(t->n_bytes()));
    b->write(0, t->data, t->n_bytes());
    t->data = b->address();
  }
  for (Tensor* n : c.graph.nodes()) {
    if (n->op == OpKind::View)
      n->data = static_cast<char*>(n->src[0]->data) + n->view_offset;
    else if (n->op == OpKind::Copy)
      n->data = n->src[1]->data;
    else
      n->data = buffers_.emplace_back(dev.alloc(n->n_bytes()))->address();
  }
}

PreparedCase::~PreparedCase() {
  for (auto& [t, p] : host_) t->data = p;
}

void PreparedCase::run() {
  dev_.execute(case_.graph.nodes());
  dev_.synchronize();
}

std::vector<float> PreparedCase::output() const {
  const Tensor& out = *case_.out;
  // The output's bytes: in the buffer whose address range holds the output's address.
  std::vector<uint8_t> raw(out.n_bytes());
  bool found = false;
  for (const auto& b : buffers_) {
    const char* base = static_cast<const char*>(b->address());
    const char* at = static_cast<const char*>(out.data);
    if (at >= base && at + raw.size() <= base + b->size()) {
      b->read(size_t(at - base), raw.data(), raw.size());
      found = true;
    }
  }
  if (!found) throw BackendError(fmt::format("{}: the output is in no buffer", case_.name));
  const size_t n_out = size_t(out.n_elements());
  std::vector<float> v(n_out);
  if (case_.out_type == DType::F32) {
    std::memcpy(v.data(), raw.data(), n_out * sizeof(float));
  } else if (case_.out_type == DType::I32) {  // indices (top_k), compared exactly
    for (size_t i = 0; i < n_out; ++i) {
      int32_t x;
      std::memcpy(&x, raw.data() + i * sizeof x, sizeof x);
      v[i] = float(x);
    }
  } else
    dequantize_row(case_.out_type, raw.data(), v.data(), int64_t(n_out));
  return v;
}

std::vector<float> run_case(Device& dev, OpCase& c) {
  PreparedCase p(dev, c);
  p.run();
  return p.output();
}

double relative_error(const std::vector<float>& want, const std::vector<float>& got) {
  if (want.size() != got.size()) return 1;
  double scale = 0, worst = 0;
  for (float v : want) scale = std::max(scale, std::fabs(double(v)));
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = std::fabs(double(got[i]) - double(want[i]));
    if (!(d <= worst)) worst = std::isnan(d) ? INFINITY : d;
  }
  return worst / std::max(scale, 1e-6);  // inf for a NaN
}

std::vector<std::string> mismatches(const OpCase& c, const std::vector<float>& want,
                                    const std::vector<float>& got) {
  double scale = 0;
  for (float v : want) scale = std::max(scale, std::fabs(double(v)));
  std::vector<std::string> out;
  for (size_t i = 0; i < want.size() && out.size() < 5; ++i)
    if (i >= got.size() ||
        !(std::fabs(double(got[i]) - want[i]) <= c.tolerance * std::max(scale, 1e-6)))
      out.push_back(fmt::format("element {}: {} where the CPU has {}", i,
                                i < got.size() ? got[i] : NAN, want[i]));
  return out;
}

}  // namespace ps
