#pragma once
// The CPU backend: always present, the reference every other backend is tested against.
#include <memory>

#include "backend/backend.h"

namespace ps {

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace ps
