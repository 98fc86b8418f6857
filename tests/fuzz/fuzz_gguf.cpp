// libFuzzer target for the GGUF reader: the input is a file image. Whatever it holds, parsing
// either succeeds or throws a ps::Error; then every metadata value is read through each getter
// a command uses (arrays element by element, nested arrays recursively), every tensor's facts
// are read, and `polystack inspect` renders the file as text and as JSON.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "gguf/gguf.h"

namespace {

namespace fs = std::filesystem;
using ps::gguf::Array;
using ps::gguf::Value;
using ps::gguf::ValueType;

// Elements read per array: enough to reach the end of the short ones and both ends of the
// long ones without making every input cost as much as its largest count.
constexpr uint64_t kElementsRead = 64;

volatile uint64_t g_sink;

void touch_element(const Array& a, uint64_t i) {
  switch (a.elem_type) {
    case ValueType::STRING:
      g_sink = g_sink + a.string_at(i).size();
      break;
    default:  // numbers (arrays of arrays are refused by the reader)
      try {  // a float that is not a whole number, or a u64 above int64, is refused
        g_sink = g_sink + uint64_t(a.int_at(i));
      } catch (const ps::GgufError&) {
      }
      try {
        g_sink = g_sink + uint64_t(a.double_at(i) != 0);
      } catch (const ps::GgufError&) {
      }
      break;
  }
}

void touch(const Value& v) {
  g_sink = g_sink + v.is_integer() + v.is_float() + ps::gguf::value_type_name(v.type).size() +
           ps::gguf::value_type_size(v.type);
  if (v.type == ValueType::STRING) {
    g_sink = g_sink + v.str.size();
    return;
  }
  if (v.type != ValueType::ARRAY) {
    try {
      g_sink = g_sink + uint64_t(v.as_int());
    } catch (const ps::GgufError&) {
    }
    try {
      g_sink = g_sink + uint64_t(v.as_double() != 0);
    } catch (const ps::GgufError&) {
    }
    return;
  }
  if (!v.arr) return;
  const Array& a = *v.arr;
  const uint64_t n = a.count;
  for (uint64_t i = 0; i < n && i < kElementsRead; ++i) touch_element(a, i);
  for (uint64_t i = n > kElementsRead ? n - kElementsRead : n; i < n; ++i)
    touch_element(a, i);
}

// The typed getters over every key, each either answering or throwing GgufError.
void getters(const ps::gguf::File& f, const std::string& key) {
  try {
    g_sink = g_sink + f.get_string(key, "default").size();
  } catch (const ps::GgufError&) {
  }
  try {
    g_sink = g_sink + uint64_t(f.get_int(key, 7, -5, 1 << 24));
  } catch (const ps::GgufError&) {
  }
  try {
    g_sink = g_sink + uint64_t(f.get_float(key, 0.5, -1e9, 1e9) != 0);
  } catch (const ps::GgufError&) {
  }
  try {
    if (auto v = f.get_int_array(key, 0, 1)) g_sink = g_sink + v->size();
  } catch (const ps::GgufError&) {
  }
  try {
    if (auto v = f.get_float_array(key, -1e30, 1e30)) g_sink = g_sink + v->size();
  } catch (const ps::GgufError&) {
  }
  try {
    g_sink = g_sink + f.get_bool(key, true);
  } catch (const ps::GgufError&) {
  }
  try {
    g_sink = g_sink + f.require_array(key).count;
  } catch (const ps::GgufError&) {
  }
  try {
    g_sink = g_sink + (f.find_array(key) != nullptr);
  } catch (const ps::GgufError&) {
  }
  g_sink = g_sink + f.has(key);
}

const fs::path& scratch_file() {
  static const fs::path p = [] {
    const fs::path dir = fs::temp_directory_path() / ("fuzz-gguf-" + std::to_string(getpid()));
    fs::create_directories(dir);
    return dir / "input.gguf";
  }();
  return p;
}

// `polystack inspect FILE` and `polystack inspect --json FILE`, as the CLI runs them. Their
// output goes to stdout, which LLVMFuzzerInitialize points at /dev/null.
void inspect(const uint8_t* data, size_t size) {
  const fs::path& path = scratch_file();
  if (std::FILE* out = std::fopen(path.c_str(), "wb")) {
    if (size) std::fwrite(data, 1, size, out);
    std::fclose(out);
  }
  for (const bool json : {false, true}) {
    CLI::App app;
    const ps::cli::Action action = ps::cli::add_inspect(app);
    std::vector<std::string> args{path.string(), "inspect"};
    if (json) args.insert(args.begin(), "--json");
    app.parse(args);  // CLI11 takes the arguments in reverse order
    try {
      (void)action();
    } catch (const ps::Error&) {
    }
    std::fflush(stdout);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const int null = open("/dev/null", O_WRONLY);
  if (null >= 0) dup2(null, STDOUT_FILENO);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<ps::gguf::File> f;
  try {
    f = ps::gguf::File::parse("fuzz.gguf", data, size);
  } catch (const ps::Error&) {
    return 0;
  }
  g_sink = g_sink + f->version() + f->alignment() + f->file_size() + f->data_offset();
  for (const auto& [key, value] : f->metadata()) {
    touch(value);
    getters(*f, key);
    g_sink = g_sink + (f->find(key) != nullptr);
  }
  for (const std::string key : {"general.architecture", "tokenizer.ggml.tokens", "missing"})
    getters(*f, key);
  try {
    (void)f->require_string("general.architecture");
  } catch (const ps::GgufError&) {
  }
  try {
    (void)f->require_int("general.alignment", 1, 1 << 20);
  } catch (const ps::GgufError&) {
  }
  for (const ps::gguf::TensorInfo& t : f->tensors()) {
    g_sink = g_sink + t.name.size() + t.dims.size() + uint64_t(t.n_elements()) + t.offset +
             t.nbytes + ps::dtype_name(t.type).size();
    if (t.nbytes) g_sink = g_sink + t.data[0] + t.data[t.nbytes - 1];
    g_sink = g_sink + (f->find_tensor(t.name) == &t);
  }
  inspect(data, size);
  return 0;
}
