#pragma once
// GGUF reader: memory-maps a file and validates every count, size and offset against the file
// size before it is used. Versions 2 and 3 are read; anything else is a GgufError.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace ps::gguf {

enum class ValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};
std::string_view value_type_name(ValueType t);
// Bytes of one value of a numeric or BOOL type; 0 for STRING and ARRAY.
size_t value_type_size(ValueType t);

struct Array;

// One metadata value. Strings point into the mapping, which outlives every Value.
struct Value {
  ValueType type = ValueType::U8;
  uint64_t u = 0;  // U8..U64 and BOOL
  int64_t i = 0;   // I8..I64
  double f = 0;    // F32, F64
  std::string_view str;
  std::shared_ptr<const Array> arr;

  bool is_integer() const;
  bool is_float() const { return type == ValueType::F32 || type == ValueType::F64; }
  // Numeric value as int64 / double (any numeric type; BOOL counts as 0/1).
  int64_t as_int() const;
  double as_double() const;
};

// An array value. Numeric elements stay in the mapping (read with memcpy: GGUF does not align
// them); strings are views into the mapping; nested arrays are parsed.
struct Array {
  ValueType elem_type = ValueType::U8;
  uint64_t count = 0;
  const uint8_t* raw = nullptr;           // numeric and BOOL elements
  std::vector<std::string_view> strings;  // STRING elements
  std::vector<Value> arrays;              // ARRAY elements (each with type ARRAY)

  int64_t int_at(uint64_t idx) const;
  double double_at(uint64_t idx) const;
  std::string_view string_at(uint64_t idx) const { return strings.at(idx); }
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // dims[0] is the innermost (row length)
  DType type = DType::F32;
  uint64_t offset = 0;  // relative to the data section
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;
  int64_t n_elements() const;
};

class File {
 public:
  // Opens, maps and validates `path`. Throws GgufError naming the file and the bad field.
  static std::unique_ptr<File> open(const std::string& path);
  // Parses an in-memory image (used by tests); the bytes must outlive the File.
  static std::unique_ptr<File> parse(const std::string& name, const uint8_t* bytes, size_t size);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t file_size() const { return size_; }
  uint64_t data_offset() const { return data_offset_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed getters: a missing key returns the default; a key of the wrong type is a GgufError.
  std::string get_string(std::string_view key, std::string_view def = {}) const;
  int64_t get_int(std::string_view key, int64_t def) const;
  double get_float(std::string_view key, double def) const;
  bool get_bool(std::string_view key, bool def) const;
  // Missing key or wrong type: GgufError.
  std::string require_string(std::string_view key) const;
  int64_t require_int(std::string_view key) const;
  const Array& require_array(std::string_view key) const;
  const Array* find_array(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;

 private:
  File() = default;
  void parse_all();

  std::string path_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  void* map_ = nullptr;  // non-null when we own an mmap
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace ps::gguf
