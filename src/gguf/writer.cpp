#include "gguf/writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace ps::gguf {

Writer::Writer(std::string path, uint64_t alignment)
    : path_(std::move(path)), alignment_(alignment) {
  if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0)
    throw GgufError(fmt::format("{}: alignment {} is not a power of two", path_, alignment_));
}

Writer::~Writer() {
  if (out_) std::fclose(out_);
}

void Writer::add(const std::string& key, const Value& v) { kv_.emplace_back(key, v); }

void Writer::add_u32(const std::string& key, uint32_t v) {
  Value val;
  val.type = ValueType::U32;
  val.u = v;
  add(key, val);
}

void Writer::add_tensor(const std::string& name, const std::vector<int64_t>& dims, DType type) {
  TensorEntry t{name, dims, type};
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  if (dims.empty() || dims[0] % block_size(type) != 0)
    throw GgufError(fmt::format("{}: tensor {}: rows of {} do not fit {} blocks", path_, name,
                                dims.empty() ? 0 : dims[0], dtype_name(type)));
  t.nbytes = uint64_t(n / dims[0]) * row_bytes(type, dims[0]);
  uint64_t offset = 0;
  if (!tensors_.empty()) {
    const TensorEntry& last = tensors_.back();
    offset = (last.offset + last.nbytes + alignment_ - 1) / alignment_ * alignment_;
  }
  t.offset = offset;
  tensors_.push_back(std::move(t));
}

void Writer::put(const void* p, size_t n) {
  if (n && std::fwrite(p, 1, n, out_) != n)
    throw GgufError(fmt::format("{}: write failed: {}", path_, std::strerror(errno)));
  written_ += n;
}

void Writer::put_string(std::string_view s) {
  put_scalar<uint64_t>(s.size());
  put(s.data(), s.size());
}

void Writer::put_value(const Value& v) {
  switch (v.type) {
    case ValueType::STRING:
      put_string(v.str);
      return;
    case ValueType::ARRAY: {
      const Array& a = *v.arr;
      put_scalar<uint32_t>(uint32_t(a.elem_type));
      put_scalar<uint64_t>(a.count);
      if (a.elem_type == ValueType::STRING) {
        for (std::string_view s : a.strings) put_string(s);
      } else {
        put(a.raw, size_t(a.count) * value_type_size(a.elem_type));
      }
      return;
    }
    case ValueType::F32:
      put_scalar<float>(float(v.f));
      return;
    case ValueType::F64:
      put_scalar<double>(v.f);
      return;
    case ValueType::I8:
    case ValueType::I16:
    case ValueType::I32:
    case ValueType::I64: {
      const int64_t i = v.i;
      put(&i, value_type_size(v.type));  // little-endian: the low bytes first
      return;
    }
    default: {
      const uint64_t u = v.u;
      put(&u, value_type_size(v.type));
      return;
    }
  }
}

void Writer::pad_to_alignment() {
  static const char zeros[256] = {};
  while (written_ % alignment_ != 0)
    put(zeros, std::min<size_t>(sizeof(zeros), size_t(alignment_ - written_ % alignment_)));
}

void Writer::begin() {
  out_ = std::fopen(path_.c_str(), "wb");
  if (!out_) throw GgufError(fmt::format("{}: cannot create: {}", path_, std::strerror(errno)));
  put("GGUF", 4);
  put_scalar<uint32_t>(3);
  put_scalar<uint64_t>(tensors_.size());
  put_scalar<uint64_t>(kv_.size());
  for (const auto& [key, v] : kv_) {
    put_string(key);
    put_scalar<uint32_t>(uint32_t(v.type));
    put_value(v);
  }
  for (const TensorEntry& t : tensors_) {
    put_string(t.name);
    put_scalar<uint32_t>(uint32_t(t.dims.size()));
    for (int64_t d : t.dims) put_scalar<uint64_t>(uint64_t(d));
    put_scalar<uint32_t>(uint32_t(t.type));
    put_scalar<uint64_t>(t.offset);
  }
  pad_to_alignment();
  kv_.clear();  // the values may point into memory the caller frees after begin()
}

void Writer::write_tensor(const void* bytes, size_t n) {
  if (next_tensor_ >= tensors_.size())
    throw GgufError(fmt::format("{}: more tensor data than tensors", path_));
  const TensorEntry& t = tensors_[next_tensor_++];
  if (n != t.nbytes)
    throw GgufError(fmt::format("{}: tensor {} has {} bytes, not {}", path_, t.name, t.nbytes, n));
  put(bytes, n);
  pad_to_alignment();
}

void Writer::finish() {
  if (next_tensor_ != tensors_.size())
    throw GgufError(
        fmt::format("{}: {} of {} tensors written", path_, next_tensor_, tensors_.size()));
  const int r = std::fclose(out_);
  out_ = nullptr;
  if (r != 0) throw GgufError(fmt::format("{}: close failed: {}", path_, std::strerror(errno)));
}

}  // namespace ps::gguf
