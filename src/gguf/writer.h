#pragma once
// GGUF writer (version 3): metadata values as the reader returns them, then tensors whose bytes
// are written one at a time in table order, so a model never has to sit in memory twice.
#include <cstdint>
#include <cstdio>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "gguf/gguf.h"

namespace ps::gguf {

class Writer {
 public:
  Writer(std::string path, uint64_t alignment = 32);
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Metadata, written in the order added. Strings and arrays of `v` must stay valid until
  // begin() (values read from a gguf::File: keep the File open).
  void add(const std::string& key, const Value& v);
  void add_u32(const std::string& key, uint32_t v);
  void add_tensor(const std::string& name, const std::vector<int64_t>& dims, DType type);

  // Writes the header, metadata and tensor table.
  void begin();
  // The bytes of the next tensor in table order (exactly its size), then the padding.
  void write_tensor(const void* bytes, size_t n);
  // Checks every tensor was written and closes the file; GgufError on any write failure.
  void finish();

 private:
  struct TensorEntry {
    std::string name;
    std::vector<int64_t> dims;
    DType type;
    uint64_t offset = 0, nbytes = 0;
  };
  void put(const void* p, size_t n);
  template <typename T>
  void put_scalar(T v) {
    put(&v, sizeof(T));
  }
  void put_string(std::string_view s);
  void put_value(const Value& v);
  void pad_to_alignment();

  std::string path_;
  uint64_t alignment_;
  std::FILE* out_ = nullptr;
  uint64_t written_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<TensorEntry> tensors_;
  size_t next_tensor_ = 0;
};

}  // namespace ps::gguf
