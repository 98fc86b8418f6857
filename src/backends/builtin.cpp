// The backends compiled into the binary itself; GPU backends arrive as plugins.
#include "backends/builtin.h"

#include "backend/registry.h"
#include "backends/cpu/cpu_backend.h"

namespace ps {

void register_builtin_backends(Registry& registry) { registry.add(make_cpu_backend()); }

}  // namespace ps
