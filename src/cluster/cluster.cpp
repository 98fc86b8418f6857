#include "cluster/cluster.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "cluster/mpi_module.h"
#include "core/error.h"

namespace ps::cluster {

namespace {

Cluster* g_cluster = nullptr;

const PolystackMpiModule* module_of(const void* m) {
  return static_cast<const PolystackMpiModule*>(m);
}

std::string module_path() {
  if (const char* p = std::getenv("POLYSTACK_MPI_MODULE"); p && *p) return p;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("libpolystack-mpi.so")
            : (exe.parent_path() / "libpolystack-mpi.so").string();
}

const char* const kHowToGet =
    "install Open MPI (Debian/Ubuntu: apt install openmpi-bin libopenmpi-dev) and build "
    "polystack again";

// The line a rank prints if the job is stopped while it waits on another: two buffers, so that
// the signal handler never reads one being written.
char g_waiting[2][512] = {};
std::atomic<int> g_waiting_at{0};

void on_stop(int) {
  const char* what = g_waiting[g_waiting_at.load()];
  if (!*what) _exit(1);
  const ssize_t n = write(STDERR_FILENO, what, std::strlen(what));
  (void)n;
  _exit(1);
}

}  // namespace

std::string mpi_module_problem() {
  const std::string path = module_path();
  if (!std::filesystem::exists(path))
    return fmt::format("this polystack was built without MPI ({} does not exist): {}", path,
                       kHowToGet);
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    const std::string why = dlerror();
    if (why.find("libmpi") != std::string::npos)
      return fmt::format(
          "the MPI library is missing ({}): install Open MPI's runtime (Debian/Ubuntu: apt "
          "install openmpi-bin)",
          why);
    return fmt::format("cannot open {}: {}", path, why);
  }
  return "";
}

Cluster* start_mpi() {
  if (g_cluster) return g_cluster;
  if (std::string why = mpi_module_problem(); !why.empty())
    throw UsageError(fmt::format("--mpi: {}", why));
  void* h = dlopen(module_path().c_str(), RTLD_NOW | RTLD_GLOBAL);
  auto entry = reinterpret_cast<const PolystackMpiModule* (*)()>(dlsym(h, "polystack_mpi_module"));
  if (!entry) throw UsageError(fmt::format("--mpi: {} has no polystack_mpi_module", module_path()));
  const PolystackMpiModule* m = entry();
  if (m->abi != kPolystackMpiAbi)
    throw UsageError(
        fmt::format("--mpi: {} speaks version {} of the module interface, this "
                    "polystack version {}",
                    module_path(), m->abi, kPolystackMpiAbi));
  auto* c = new Cluster();
  c->module_ = m;
  if (m->init(&c->rank_, &c->size_)) throw BackendError(fmt::format("--mpi: {}", m->last_error()));
  c->host_ = m->host();
  c->local_size_ = std::max(1, m->local_size());
  c->library_ = m->library();
  g_cluster = c;
  // mpirun stops the other ranks when one dies: say so rather than vanish.
  std::signal(SIGTERM, on_stop);
  return c;
}

Cluster* current() { return g_cluster; }

void Cluster::fail(const char* what) {
  throw BackendError(fmt::format("rank {}: {}: {}", rank_, what, module_of(module_)->last_error()));
}

void Cluster::send(int dst, Tag tag, const void* data, size_t n) {
  if (module_of(module_)->send(dst, int(tag), data, n)) fail("send");
}

Cluster::Pending Cluster::isend(int dst, Tag tag, const void* data, size_t n) {
  Pending p;
  if (module_of(module_)->isend(dst, int(tag), data, n, &p.handle)) fail("send");
  return p;
}

void Cluster::wait(Pending& p) {
  if (!p.handle) return;
  void* h = p.handle;
  p.handle = nullptr;
  if (module_of(module_)->wait(h)) fail("send");
}

std::vector<uint8_t> Cluster::recv(int src, Tag tag) {
  size_t n = 0;
  if (module_of(module_)->probe(src, int(tag), &n)) fail("receive");
  std::vector<uint8_t> out(n);
  recv(src, tag, out.data(), n);
  return out;
}

void Cluster::recv(int src, Tag tag, void* data, size_t n) {
  if (module_of(module_)->recv(src, int(tag), data, n)) fail("receive");
}

void Cluster::abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  module_of(module_)->abort(code);
  std::_Exit(code);
}

void Cluster::finalize() {
  std::signal(SIGTERM, SIG_DFL);
  if (module_of(module_)->finalize()) fail("finalize");
}

void Cluster::set_waiting_for(const std::string& what) {
  const int next = 1 - g_waiting_at.load();
  const std::string line =
      what.empty() ? std::string()
                   : fmt::format(
                         "polystack: error: rank {}: the MPI job was stopped while waiting for "
                         "{}: that rank has ended (mpirun's message names it)\n",
                         rank_, what);
  std::snprintf(g_waiting[next], sizeof g_waiting[next], "%s", line.c_str());
  g_waiting_at.store(next);
}

}  // namespace ps::cluster
