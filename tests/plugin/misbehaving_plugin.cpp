// A backend plugin that misbehaves while it is loaded, in its library constructor, as a broken
// driver may: PS_MISBEHAVE_CRASH dies of a segmentation fault (SIGSEGV), PS_MISBEHAVE_HANG
// sleeps for ever, PS_MISBEHAVE_EXIT exits with status 3. The registry must report each for its
// API and go on with the others.
#include <unistd.h>

#include <csignal>
#include <cstdlib>

#include "backend/backend.h"

namespace {

__attribute__((constructor)) void misbehave() {
#if defined(PS_MISBEHAVE_CRASH)
  std::raise(SIGSEGV);
#elif defined(PS_MISBEHAVE_HANG)
  for (;;) pause();
#elif defined(PS_MISBEHAVE_EXIT)
  std::_Exit(3);
#endif
}

}  // namespace

POLYSTACK_BACKEND_PLUGIN(nullptr)
