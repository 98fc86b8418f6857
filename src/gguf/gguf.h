#pragma once
// GGUF reader: memory-maps a file and validates every count, size and offset against the file
// size before it is used. Versions 2 and 3 are read; anything else is a GgufError.
//
// Memory while parsing is bounded whatever the file says: numeric arrays stay in the mapping,
// a string costs one view (16 bytes) for at least 8 bytes of file, a key or tensor name is
// copied once, and at most kMaxMetadata entries and kMaxTensors tensor infos are accepted, so
// the parser holds at most about three times the file size plus a few tens of MiB. Arrays of arrays
// are refused, as ggml's reader refuses them.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace ps::gguf {

constexpr uint64_t kMaxMetadata = 65536;  // metadata entries per file (real files: ~50)
constexpr uint64_t kMaxTensors = 65536;   // tensor infos per file (real files: up to ~2,000)

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
  // Numeric value as int64 / double (any numeric type; BOOL counts as 0/1). A float that is
  // not a whole number within int64's range, or a U64 above it, is a GgufError from as_int.
  int64_t as_int() const;
  double as_double() const;
};

// An array value. Numeric elements stay in the mapping (read with memcpy: GGUF does not align
// them); strings are views into the mapping. Elements are never arrays.
struct Array {
  ValueType elem_type = ValueType::U8;
  uint64_t count = 0;
  const uint8_t* raw = nullptr;           // numeric and BOOL elements
  std::vector<std::string_view> strings;  // STRING elements

  // As Value::as_int and as_double, for element idx (a GgufError when out of range).
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

  // Typed getters, the one way models and tokenizers read metadata: a missing key returns the
  // default (get_*) or is a GgufError (require_*); a value of another type, a float that is not
  // finite, or a number outside [lo, hi] is a GgufError naming the key and the value, e.g.
  // "f.gguf: metadata 'llama.context_length' = -5 is out of range; expected 1..16777216".
  // Integer reads take integers and bools; float reads take any number.
  std::string get_string(std::string_view key, std::string_view def = {}) const;
  int64_t get_int(std::string_view key, int64_t def, int64_t lo, int64_t hi) const;
  double get_float(std::string_view key, double def, double lo, double hi) const;
  bool get_bool(std::string_view key, bool def) const;
  std::string require_string(std::string_view key) const;
  int64_t require_int(std::string_view key, int64_t lo, int64_t hi) const;
  const Array& require_array(std::string_view key) const;
  const Array* find_array(std::string_view key) const;
  // An array of integers (or bools, or floats holding whole numbers), each in [lo, hi]; nullopt
  // when the key is missing. Errors name the element: "metadata 'k[3]' is NaN; expected 0 or 1".
  std::optional<std::vector<int64_t>> get_int_array(std::string_view key, int64_t lo,
                                                    int64_t hi) const;
  // The same for numbers, each finite and in [lo, hi].
  std::optional<std::vector<double>> get_float_array(std::string_view key, double lo,
                                                     double hi) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;

 private:
  File() = default;
  void parse_all();
  // The array at `key` when its elements are numbers (nullptr when missing), else a GgufError.
  const Array* numeric_array(std::string_view key) const;

  std::string path_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  void* map_ = nullptr;  // non-null when we own an mmap
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  // Keyed by views into the mapping (stable, unlike the strings above when kv_ grows).
  std::map<std::string_view, size_t, std::less<>> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string_view, size_t, std::less<>> tensor_index_;
};

}  // namespace ps::gguf
