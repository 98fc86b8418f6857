#pragma once
// One exception type per domain; the CLI prints what() on one line and exits non-zero.
#include <stdexcept>
#include <string>

namespace ps {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A GGUF file is malformed or uses something we do not read.
class GgufError : public Error {
 public:
  using Error::Error;
};

// A backend or device failed or was asked for something it cannot do.
class BackendError : public Error {
 public:
  using Error::Error;
};

// The model's metadata or tensors do not form a model we can run.
class ModelError : public Error {
 public:
  using Error::Error;
};

// Bad user input: flags, prompts longer than the context, and so on.
class UsageError : public Error {
 public:
  using Error::Error;
};

}  // namespace ps
