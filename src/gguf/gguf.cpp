#include "gguf/gguf.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace ps::gguf {
namespace {

constexpr int kMaxDims = 4;

}  // namespace

size_t value_type_size(ValueType t) {
  switch (t) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::BOOL:
      return 1;
    case ValueType::U16:
    case ValueType::I16:
      return 2;
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::F32:
      return 4;
    case ValueType::U64:
    case ValueType::I64:
    case ValueType::F64:
      return 8;
    default:
      return 0;
  }
}

namespace {

bool valid_value_type(uint32_t t) { return t <= uint32_t(ValueType::F64); }

// Reads little-endian fields and checks every read against the end of the file.
class Cursor {
 public:
  Cursor(const std::string& path, const uint8_t* base, uint64_t size)
      : path_(path), base_(base), size_(size) {}

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw GgufError(fmt::format("{}: {}: {}", path_, field, what));
  }
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  // `name` gives the field's name and is called only for an error, so the millions of
  // strings of a vocabulary cost no name each.
  template <typename Name>
  void need_named(uint64_t n, const Name& name) const {
    if (n > remaining())
      fail(name(), fmt::format("needs {} bytes at offset {} but the file ends at {} (truncated?)",
                               n, pos_, size_));
  }
  void need(uint64_t n, const std::string& field) const {
    need_named(n, [&] { return field; });
  }
  template <typename T>
  T read(const std::string& field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  template <typename Name>
  std::string_view read_string_named(const Name& name) {
    need_named(sizeof(uint64_t), [&] { return name() + " (string length)"; });
    uint64_t len;
    std::memcpy(&len, base_ + pos_, sizeof len);
    pos_ += sizeof len;
    need_named(len, [&] { return fmt::format("{} (string of {} bytes)", name(), len); });
    std::string_view s(reinterpret_cast<const char*>(base_ + pos_), size_t(len));
    pos_ += len;
    return s;
  }
  std::string_view read_string(const std::string& field) {
    return read_string_named([&] { return field; });
  }
  const uint8_t* take(uint64_t n, const std::string& field) {
    need(n, field);
    const uint8_t* p = base_ + pos_;
    pos_ += n;
    return p;
  }

 private:
  const std::string& path_;
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

std::shared_ptr<const Array> read_array(Cursor& c, const std::string& field) {
  auto arr = std::make_shared<Array>();
  const uint32_t et = c.read<uint32_t>(field + " (array element type)");
  if (!valid_value_type(et)) c.fail(field, fmt::format("unknown array element type {}", et));
  if (ValueType(et) == ValueType::ARRAY)
    c.fail(field, "arrays of arrays are not supported (nor by ggml's reader)");
  arr->elem_type = ValueType(et);
  arr->count = c.read<uint64_t>(field + " (array length)");
  const size_t es = value_type_size(arr->elem_type);
  if (es) {
    if (arr->count > c.remaining() / es)
      c.fail(field, fmt::format("array of {} {} elements is larger than the rest of the file",
                                arr->count, value_type_name(arr->elem_type)));
    arr->raw = c.take(arr->count * es, field);
  } else {
    // Each string takes at least its 8-byte length, which bounds a hostile count (and the
    // views reserved for it: 16 bytes each, twice the file bytes they stand for at most).
    if (arr->count > c.remaining() / 8)
      c.fail(field,
             fmt::format("array of {} strings is larger than the rest of the file", arr->count));
    arr->strings.reserve(arr->count);
    for (uint64_t k = 0; k < arr->count; ++k)
      arr->strings.push_back(c.read_string_named([&] { return fmt::format("{}[{}]", field, k); }));
  }
  return arr;
}

Value read_value(Cursor& c, ValueType type, const std::string& field) {
  Value v;
  v.type = type;
  switch (type) {
    case ValueType::U8:
      v.u = c.read<uint8_t>(field);
      break;
    case ValueType::I8:
      v.i = c.read<int8_t>(field);
      break;
    case ValueType::U16:
      v.u = c.read<uint16_t>(field);
      break;
    case ValueType::I16:
      v.i = c.read<int16_t>(field);
      break;
    case ValueType::U32:
      v.u = c.read<uint32_t>(field);
      break;
    case ValueType::I32:
      v.i = c.read<int32_t>(field);
      break;
    case ValueType::U64:
      v.u = c.read<uint64_t>(field);
      break;
    case ValueType::I64:
      v.i = c.read<int64_t>(field);
      break;
    case ValueType::F32:
      v.f = c.read<float>(field);
      break;
    case ValueType::F64:
      v.f = c.read<double>(field);
      break;
    case ValueType::BOOL: {
      const uint8_t b = c.read<uint8_t>(field);
      if (b > 1) c.fail(field, fmt::format("bool value {} is neither 0 nor 1", b));
      v.u = b;
      break;
    }
    case ValueType::STRING:
      v.str = c.read_string(field);
      break;
    case ValueType::ARRAY:
      v.arr = read_array(c, field);
      break;
  }
  return v;
}

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

std::string_view value_type_name(ValueType t) {
  static constexpr std::string_view names[] = {"u8",  "i8",  "u16",  "i16",    "u32",
                                               "i32", "f32", "bool", "string", "array",
                                               "u64", "i64", "f64"};
  const auto i = uint32_t(t);
  return i < std::size(names) ? names[i] : "unknown";
}

bool Value::is_integer() const {
  switch (type) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::U16:
    case ValueType::I16:
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::U64:
    case ValueType::I64:
      return true;
    default:
      return false;
  }
}

// A float as an int64 when it is a whole number in range; else a GgufError (a plain cast of
// NaN or 1e30 is undefined behaviour).
int64_t whole(double f) {
  if (!std::isfinite(f) || f != std::trunc(f) || f < -9.2233720368547758e18 ||
      f >= 9.2233720368547758e18)
    throw GgufError(fmt::format("{} is not an integer", f));
  return int64_t(f);
}

int64_t unsigned_int(uint64_t u) {
  if (u > uint64_t(std::numeric_limits<int64_t>::max()))
    throw GgufError(fmt::format("{} is too large", u));
  return int64_t(u);
}

int64_t Value::as_int() const {
  switch (type) {
    case ValueType::U8:
    case ValueType::U16:
    case ValueType::U32:
    case ValueType::BOOL:
      return int64_t(u);
    case ValueType::U64:
      return unsigned_int(u);
    case ValueType::I8:
    case ValueType::I16:
    case ValueType::I32:
    case ValueType::I64:
      return i;
    case ValueType::F32:
    case ValueType::F64:
      return whole(f);
    default:
      throw GgufError(fmt::format("a {} read as a number", value_type_name(type)));
  }
}

double Value::as_double() const { return is_float() ? f : double(as_int()); }

int64_t Array::int_at(uint64_t idx) const {
  if (idx >= count) throw GgufError(fmt::format("array index {} out of range {}", idx, count));
  const uint8_t* p = raw + idx * value_type_size(elem_type);
  switch (elem_type) {
    case ValueType::U8:
    case ValueType::BOOL:
      return load<uint8_t>(p);
    case ValueType::I8:
      return load<int8_t>(p);
    case ValueType::U16:
      return load<uint16_t>(p);
    case ValueType::I16:
      return load<int16_t>(p);
    case ValueType::U32:
      return load<uint32_t>(p);
    case ValueType::I32:
      return load<int32_t>(p);
    case ValueType::U64:
      return unsigned_int(load<uint64_t>(p));
    case ValueType::I64:
      return load<int64_t>(p);
    case ValueType::F32:
      return whole(load<float>(p));
    case ValueType::F64:
      return whole(load<double>(p));
    default:
      throw GgufError("array of " + std::string(value_type_name(elem_type)) + " read as numbers");
  }
}

double Array::double_at(uint64_t idx) const {
  if (elem_type == ValueType::F32 && idx < count) return load<float>(raw + idx * 4);
  if (elem_type == ValueType::F64 && idx < count) return load<double>(raw + idx * 8);
  return double(int_at(idx));
}

int64_t TensorInfo::n_elements() const {
  int64_t n = 1;
  for (auto d : dims) n *= d;
  return n;
}

std::unique_ptr<File> File::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw GgufError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw GgufError(fmt::format("{}: cannot stat: {}", path, std::strerror(e)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw GgufError(fmt::format("{}: not a regular file", path));
  }
  std::unique_ptr<File> f(new File());
  f->path_ = path;
  f->size_ = uint64_t(st.st_size);
  if (f->size_ > 0) {
    void* m = ::mmap(nullptr, size_t(f->size_), PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      throw GgufError(fmt::format("{}: cannot map: {}", path, std::strerror(e)));
    }
    f->map_ = m;
    f->base_ = static_cast<const uint8_t*>(m);
  }
  ::close(fd);
  f->parse_all();
  return f;
}

std::unique_ptr<File> File::parse(const std::string& name, const uint8_t* bytes, size_t size) {
  std::unique_ptr<File> f(new File());
  f->path_ = name;
  f->base_ = bytes;
  f->size_ = size;
  f->parse_all();
  return f;
}

File::~File() {
  if (map_) ::munmap(map_, size_t(size_));
}

void File::parse_all() {
  Cursor c(path_, base_, size_);
  if (size_ < 4 || std::memcmp(base_, "GGUF", 4) != 0)
    c.fail("magic", "not a GGUF file (the first 4 bytes are not 'GGUF')");
  c.take(4, "magic");
  version_ = c.read<uint32_t>("version");
  if (version_ == 1)
    c.fail("version", "GGUF version 1 is not supported (only 2 and 3); re-convert the model");
  if (version_ != 2 && version_ != 3)
    c.fail("version", fmt::format("unknown GGUF version {} (only 2 and 3 are read)", version_));

  const uint64_t n_tensors = c.read<uint64_t>("tensor_count");
  const uint64_t n_kv = c.read<uint64_t>("metadata_kv_count");
  if (n_kv > kMaxMetadata)
    c.fail("metadata_kv_count", fmt::format("{} entries; at most {} are read", n_kv, kMaxMetadata));
  if (n_tensors > kMaxTensors)
    c.fail("tensor_count", fmt::format("{} tensors; at most {} are read", n_tensors, kMaxTensors));
  // Smallest key/value record: 8-byte key length + 4-byte type + 1-byte value.
  if (n_kv > c.remaining() / 13)
    c.fail("metadata_kv_count", fmt::format("{} entries cannot fit in the file", n_kv));
  // Smallest tensor info: 8 (name length) + 4 (n_dims) + 4 (type) + 8 (offset).
  if (n_tensors > c.remaining() / 24)
    c.fail("tensor_count", fmt::format("{} tensors cannot fit in the file", n_tensors));

  kv_.reserve(n_kv);
  for (uint64_t k = 0; k < n_kv; ++k) {
    const std::string field = fmt::format("metadata entry {}", k);
    const std::string_view key = c.read_string(field + " key");
    const std::string kfield = fmt::format("metadata '{}'", key);
    const uint32_t t = c.read<uint32_t>(kfield + " (type)");
    if (!valid_value_type(t)) c.fail(kfield, fmt::format("unknown value type {}", t));
    Value v = read_value(c, ValueType(t), kfield);
    if (!kv_index_.emplace(key, kv_.size()).second) c.fail(kfield, "duplicate metadata key");
    kv_.emplace_back(std::string(key), std::move(v));
  }

  if (const Value* a = find("general.alignment")) {
    if (!a->is_integer() || a->as_int() <= 0 || (a->as_int() & (a->as_int() - 1)) != 0 ||
        a->as_int() > (1 << 20))
      c.fail("metadata 'general.alignment'", "must be a power of two between 1 and 1 MiB");
    alignment_ = uint64_t(a->as_int());
  }

  tensors_.reserve(n_tensors);
  for (uint64_t k = 0; k < n_tensors; ++k) {
    TensorInfo ti;
    const std::string_view name = c.read_string(fmt::format("tensor info {} name", k));
    ti.name = std::string(name);
    const std::string field = fmt::format("tensor '{}'", ti.name);
    const uint32_t n_dims = c.read<uint32_t>(field + " (n_dims)");
    if (n_dims == 0 || n_dims > kMaxDims)
      c.fail(field, fmt::format("n_dims is {}, must be 1..{}", n_dims, kMaxDims));
    int64_t n_el = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim = c.read<uint64_t>(field + fmt::format(" (dim {})", d));
      if (dim == 0 || dim > uint64_t(std::numeric_limits<int64_t>::max()) ||
          int64_t(dim) > std::numeric_limits<int64_t>::max() / n_el)
        c.fail(field, fmt::format("dimension {} = {} is zero or overflows", d, dim));
      n_el *= int64_t(dim);
      ti.dims.push_back(int64_t(dim));
    }
    const uint32_t type = c.read<uint32_t>(field + " (type)");
    const auto info = dtype_info(type);
    if (!info) c.fail(field, fmt::format("unknown tensor type id {}", type));
    ti.type = info->type;
    if (ti.dims[0] % info->block_size != 0)
      c.fail(field, fmt::format("row length {} is not a whole number of {} blocks of {}",
                                ti.dims[0], info->name, info->block_size));
    const uint64_t n_blocks = uint64_t(n_el / info->block_size);
    if (n_blocks > std::numeric_limits<uint64_t>::max() / info->block_bytes)
      c.fail(field, "size overflows");
    ti.nbytes = n_blocks * info->block_bytes;
    ti.offset = c.read<uint64_t>(field + " (offset)");
    if (ti.offset % alignment_ != 0)
      c.fail(field, fmt::format("data offset {} is not a multiple of the alignment {}", ti.offset,
                                alignment_));
    if (!tensor_index_.emplace(name, tensors_.size()).second)
      c.fail(field, "duplicate tensor name");
    tensors_.push_back(std::move(ti));
  }

  const uint64_t pad = (alignment_ - c.pos() % alignment_) % alignment_;
  data_offset_ = c.pos() + pad;
  if (n_tensors > 0 && data_offset_ > size_)
    c.fail("tensor data", fmt::format("data section would start at {} past the end of the file "
                                      "({} bytes)",
                                      data_offset_, size_));
  const uint64_t data_size = size_ >= data_offset_ ? size_ - data_offset_ : 0;
  for (auto& ti : tensors_) {
    if (ti.offset > data_size)
      c.fail(fmt::format("tensor '{}'", ti.name),
             fmt::format("data offset {} lies past the end of the file ({} bytes of tensor "
                         "data; truncated?)",
                         ti.offset, data_size));
    if (ti.nbytes > data_size - ti.offset)
      c.fail(fmt::format("tensor '{}'", ti.name),
             fmt::format("{} bytes at data offset {} run past the end of the file ({} bytes of "
                         "tensor data; truncated?)",
                         ti.nbytes, ti.offset, data_size));
    ti.data = base_ + data_offset_ + ti.offset;
  }
}

const Value* File::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::string File::get_string(std::string_view key, std::string_view def) const {
  const Value* v = find(key);
  if (!v) return std::string(def);
  if (v->type != ValueType::STRING)
    throw GgufError(fmt::format("{}: metadata '{}': expected a string, found {}", path_, key,
                                value_type_name(v->type)));
  return std::string(v->str);
}

namespace {

std::string int_range(int64_t lo, int64_t hi) {
  return lo == 0 && hi == 1 ? "0 or 1" : fmt::format("an integer in {}..{}", lo, hi);
}

// "is NaN" / "is inf" / "= 2.5": how an error shows a number.
std::string shown(double f) {
  if (std::isnan(f)) return "is NaN";
  if (std::isinf(f)) return f > 0 ? "is inf" : "is -inf";
  return fmt::format("= {}", f);
}

// The same, for a number refused by its range: "is NaN" / "= 2.5 is out of range".
std::string out_of_range(double f) {
  return std::isfinite(f) ? shown(f) + " is out of range" : shown(f);
}

}  // namespace

int64_t File::get_int(std::string_view key, int64_t def, int64_t lo, int64_t hi) const {
  const Value* v = find(key);
  if (!v) return def;
  if (!v->is_integer() && v->type != ValueType::BOOL)
    throw GgufError(fmt::format("{}: metadata '{}': expected {}, found {}", path_, key,
                                int_range(lo, hi), value_type_name(v->type)));
  const bool huge = v->type == ValueType::U64 && v->u > uint64_t(INT64_MAX);
  if (huge || v->as_int() < lo || v->as_int() > hi)
    throw GgufError(fmt::format("{}: metadata '{}' = {} is out of range; expected {}", path_, key,
                                huge ? fmt::format("{}", v->u) : fmt::format("{}", v->as_int()),
                                int_range(lo, hi)));
  return v->as_int();
}

double File::get_float(std::string_view key, double def, double lo, double hi) const {
  const Value* v = find(key);
  if (!v) return def;
  if (!v->is_float() && !v->is_integer())
    throw GgufError(fmt::format("{}: metadata '{}': expected a number, found {}", path_, key,
                                value_type_name(v->type)));
  const double d = v->type == ValueType::U64 ? double(v->u) : v->as_double();
  if (!(d >= lo && d <= hi))
    throw GgufError(fmt::format("{}: metadata '{}' {}; expected a number in [{}, {}]", path_, key,
                                out_of_range(d), lo, hi));
  return d;
}

const Array* File::numeric_array(std::string_view key) const {
  const Array* a = find_array(key);
  if (a && !a->raw)
    throw GgufError(
        fmt::format("{}: metadata '{}': expected an array of numbers, found an array "
                    "of {}",
                    path_, key, value_type_name(a->elem_type)));
  return a;
}

std::optional<std::vector<int64_t>> File::get_int_array(std::string_view key, int64_t lo,
                                                        int64_t hi) const {
  const Array* a = numeric_array(key);
  if (!a) return std::nullopt;
  std::vector<int64_t> out;
  out.reserve(size_t(a->count));
  for (uint64_t i = 0; i < a->count; ++i) {
    int64_t n = 0;
    bool ok;
    std::string value;
    if (a->elem_type == ValueType::F32 || a->elem_type == ValueType::F64) {
      const double d = a->double_at(i);
      ok = std::isfinite(d) && d == std::trunc(d) && d >= double(lo) && d <= double(hi);
      if (ok) n = int64_t(d);
      value = shown(d);
    } else if (a->elem_type == ValueType::U64) {
      const uint64_t u = load<uint64_t>(a->raw + i * 8);
      ok = hi >= 0 && u <= uint64_t(hi) && int64_t(u) >= lo;
      n = int64_t(u);
      value = fmt::format("= {}", u);
    } else {
      n = a->int_at(i);
      ok = n >= lo && n <= hi;
      value = fmt::format("= {}", n);
    }
    if (!ok)
      throw GgufError(fmt::format("{}: metadata '{}[{}]' {}; expected {}", path_, key, i, value,
                                  int_range(lo, hi)));
    out.push_back(n);
  }
  return out;
}

std::optional<std::vector<double>> File::get_float_array(std::string_view key, double lo,
                                                         double hi) const {
  const Array* a = numeric_array(key);
  if (!a) return std::nullopt;
  std::vector<double> out;
  out.reserve(size_t(a->count));
  for (uint64_t i = 0; i < a->count; ++i) {
    const double d =
        a->elem_type == ValueType::U64 ? double(load<uint64_t>(a->raw + i * 8)) : a->double_at(i);
    if (!(d >= lo && d <= hi))
      throw GgufError(fmt::format("{}: metadata '{}[{}]' {}; expected a number in [{}, {}]", path_,
                                  key, i, out_of_range(d), lo, hi));
    out.push_back(d);
  }
  return out;
}

bool File::get_bool(std::string_view key, bool def) const {
  const Value* v = find(key);
  if (!v) return def;
  if (v->type != ValueType::BOOL)
    throw GgufError(fmt::format("{}: metadata '{}': expected a bool, found {}", path_, key,
                                value_type_name(v->type)));
  return v->u != 0;
}

std::string File::require_string(std::string_view key) const {
  if (!find(key)) throw GgufError(fmt::format("{}: metadata '{}' is missing", path_, key));
  return get_string(key);
}

int64_t File::require_int(std::string_view key, int64_t lo, int64_t hi) const {
  if (!find(key)) throw GgufError(fmt::format("{}: metadata '{}' is missing", path_, key));
  return get_int(key, 0, lo, hi);
}

const Array* File::find_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return nullptr;
  if (v->type != ValueType::ARRAY)
    throw GgufError(fmt::format("{}: metadata '{}': expected an array, found {}", path_, key,
                                value_type_name(v->type)));
  return v->arr.get();
}

const Array& File::require_array(std::string_view key) const {
  const Array* a = find_array(key);
  if (!a) throw GgufError(fmt::format("{}: metadata '{}' is missing", path_, key));
  return *a;
}

}  // namespace ps::gguf
