#pragma once
// Builds GGUF images in memory for tests: valid ones, and broken ones by editing the bytes.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace ps::test {

class GgufBuilder {
 public:
  explicit GgufBuilder(uint32_t version = 3, uint64_t alignment = 32)
      : version_(version), alignment_(alignment) {}

  // Metadata writers; each appends one key/value record.
  void kv_u32(const std::string& k, uint32_t v) {
    key(k, 4);
    put(v);
  }
  void kv_i32(const std::string& k, int32_t v) {
    key(k, 5);
    put(v);
  }
  void kv_f32(const std::string& k, float v) {
    key(k, 6);
    put(v);
  }
  void kv_bool(const std::string& k, bool v) {
    key(k, 7);
    put(uint8_t(v));
  }
  void kv_str(const std::string& k, const std::string& v) {
    key(k, 8);
    str(v);
  }
  void kv_u64(const std::string& k, uint64_t v) {
    key(k, 10);
    put(v);
  }
  void kv_i64(const std::string& k, int64_t v) {
    key(k, 11);
    put(v);
  }
  void kv_f64(const std::string& k, double v) {
    key(k, 12);
    put(v);
  }
  void kv_u8(const std::string& k, uint8_t v) {
    key(k, 0);
    put(v);
  }
  void kv_i8(const std::string& k, int8_t v) {
    key(k, 1);
    put(v);
  }
  void kv_u16(const std::string& k, uint16_t v) {
    key(k, 2);
    put(v);
  }
  void kv_i16(const std::string& k, int16_t v) {
    key(k, 3);
    put(v);
  }
  void kv_str_array(const std::string& k, const std::vector<std::string>& v) {
    key(k, 9);
    put(uint32_t(8));
    put(uint64_t(v.size()));
    for (const auto& s : v) str(s);
  }
  template <typename T>
  void kv_array(const std::string& k, uint32_t elem_type, const std::vector<T>& v) {
    key(k, 9);
    put(elem_type);
    put(uint64_t(v.size()));
    for (const T& x : v) put(x);
  }
  // Raw record bytes after the key (for nested arrays and hostile values).
  void kv_raw(const std::string& k, uint32_t type, const std::vector<uint8_t>& bytes) {
    key(k, type);
    kv_.insert(kv_.end(), bytes.begin(), bytes.end());
  }

  // A tensor with the given dims and type id; data is appended aligned.
  void tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type,
              const std::vector<uint8_t>& data) {
    Tensor t{name, std::move(dims), type, data};
    tensors_.push_back(std::move(t));
  }

  std::vector<uint8_t> build() const {
    std::vector<uint8_t> out;
    auto app = [&](const void* p, size_t n) {
      const auto* b = static_cast<const uint8_t*>(p);
      out.insert(out.end(), b, b + n);
    };
    app("GGUF", 4);
    app(&version_, 4);
    const uint64_t nt = tensors_.size(), nkv = n_kv_;
    app(&nt, 8);
    app(&nkv, 8);
    out.insert(out.end(), kv_.begin(), kv_.end());
    uint64_t offset = 0;
    std::vector<uint64_t> offsets;
    for (const auto& t : tensors_) {
      const uint64_t len = t.name.size();
      app(&len, 8);
      app(t.name.data(), len);
      const uint32_t nd = uint32_t(t.dims.size());
      app(&nd, 4);
      for (uint64_t d : t.dims) app(&d, 8);
      app(&t.type, 4);
      app(&offset, 8);
      offsets.push_back(offset);
      offset += (t.data.size() + alignment_ - 1) / alignment_ * alignment_;
    }
    while (out.size() % alignment_) out.push_back(0);
    for (const auto& t : tensors_) {
      out.insert(out.end(), t.data.begin(), t.data.end());
      while (out.size() % alignment_) out.push_back(0);
    }
    return out;
  }

 private:
  struct Tensor {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t type;
    std::vector<uint8_t> data;
  };
  template <typename T>
  void put(T v) {
    const auto* b = reinterpret_cast<const uint8_t*>(&v);
    kv_.insert(kv_.end(), b, b + sizeof(T));
  }
  void str(const std::string& s) {
    put(uint64_t(s.size()));
    kv_.insert(kv_.end(), s.begin(), s.end());
  }
  void key(const std::string& k, uint32_t type) {
    str(k);
    put(type);
    ++n_kv_;
  }

  uint32_t version_;
  uint64_t alignment_;
  uint64_t n_kv_ = 0;
  std::vector<uint8_t> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace ps::test
