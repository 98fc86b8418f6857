#include "model/model.h"

#include <fmt/format.h>

#include "core/error.h"
#include "gguf/gguf.h"

namespace ps {

std::unique_ptr<Model> Model::load(const gguf::File& file) {
  const std::string arch = file.get_string("general.architecture");
  if (arch.empty())
    throw ModelError(fmt::format("{}: metadata 'general.architecture' is missing", file.path()));
  if (arch == "llama") return make_llama_model(file);
  throw ModelError(
      fmt::format("{}: architecture '{}' is not supported (supported: llama)", file.path(), arch));
}

Tensor* Model::weight(const gguf::File& f, const std::string& name, std::array<int64_t, 4> ne,
                      bool optional) {
  const gguf::TensorInfo* ti = f.find_tensor(name);
  if (!ti) {
    if (optional) return nullptr;
    throw ModelError(fmt::format("{}: tensor '{}' is missing", f.path(), name));
  }
  std::array<int64_t, 4> have{1, 1, 1, 1};
  for (size_t d = 0; d < ti->dims.size(); ++d) have[d] = ti->dims[d];
  if (have != ne)
    throw ModelError(fmt::format("{}: tensor '{}' has shape [{}], expected [{}]", f.path(), name,
                                 fmt::join(have, ", "), fmt::join(ne, ", ")));
  const auto& info = dtype_info(ti->type);
  if (!info.computable)
    throw ModelError(fmt::format("{}: tensor '{}' has type {}, which polystack cannot compute yet",
                                 f.path(), name, info.name));
  Tensor& t = weights_.emplace_back();
  t.name = name;
  t.type = ti->type;
  t.ne = ne;
  t.set_contiguous_strides();
  t.data = const_cast<uint8_t*>(ti->data);  // read-only mapping; kernels never write weights
  t.constant = true;
  params_.n_params += uint64_t(ti->n_elements());
  params_.weight_bytes += ti->nbytes;
  return &t;
}

}  // namespace ps
