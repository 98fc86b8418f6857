#include "engine/pipeline.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "cluster/cluster.h"
#include "core/error.h"
#include "core/version.h"
#include "engine/model_context.h"
#include "gguf/gguf.h"

namespace ps {

namespace {

void put_i32(std::vector<uint8_t>& out, int32_t v) {
  uint8_t b[4];
  std::memcpy(b, &v, 4);
  out.insert(out.end(), b, b + 4);
}

void put_ids(std::vector<uint8_t>& out, const std::vector<int32_t>& v) {
  put_i32(out, int32_t(v.size()));
  const auto* b = reinterpret_cast<const uint8_t*>(v.data());
  out.insert(out.end(), b, b + v.size() * 4);
}

struct Reader {
  std::span<const uint8_t> bytes;
  size_t at = 0;
  int32_t i32() {
    if (bytes.size() - at < 4) throw std::runtime_error("a pass message ends early");
    int32_t v;
    std::memcpy(&v, bytes.data() + at, 4);
    at += 4;
    return v;
  }
  bool flag() {
    const int32_t v = i32();
    if (v != 0 && v != 1)
      throw std::runtime_error("a pass message holds a flag that is not 0 or 1");
    return v == 1;
  }
  std::vector<int32_t> ids() {
    const int32_t n = i32();
    if (n < 0 || size_t(n) > (bytes.size() - at) / 4)
      throw std::runtime_error("a pass message holds a list longer than itself");
    std::vector<int32_t> v(static_cast<size_t>(n));
    if (n > 0) std::memcpy(v.data(), bytes.data() + at, size_t(n) * 4);
    at += size_t(n) * 4;
    return v;
  }
};

}  // namespace

std::vector<uint8_t> command_message(PipelineCommand cmd, const nlohmann::json* body) {
  std::vector<uint8_t> out(1, uint8_t(cmd));
  if (body) {
    const std::string text = body->dump();
    out.insert(out.end(), text.begin(), text.end());
  }
  return out;
}

void tell_workers(cluster::Cluster& c, const std::vector<uint8_t>& message) {
  for (int r = 1; r < c.size(); ++r) c.send(r, cluster::kCommand, message);
}

nlohmann::json recv_reply(cluster::Cluster& c, int rank) {
  const std::vector<uint8_t> bytes = c.recv(rank, cluster::kReply);
  return nlohmann::json::parse(bytes.begin(), bytes.end());
}

std::vector<uint8_t> encode_pass(const PassDesc& d) {
  std::vector<uint8_t> out(1, uint8_t(PipelineCommand::Pass));
  put_i32(out, d.all_logits ? 1 : 0);
  put_i32(out, int32_t(d.runs.size()));
  for (const PassRun& r : d.runs) {
    put_i32(out, r.seq);
    put_i32(out, r.n_past);
    put_i32(out, r.hidden ? 1 : 0);
    put_ids(out, r.tokens);
    put_i32(out, int32_t(r.tables.size()));
    for (const auto& t : r.tables) put_ids(out, t);
  }
  return out;
}

PassDesc decode_pass(std::span<const uint8_t> bytes) {
  if (bytes.empty() || bytes[0] != uint8_t(PipelineCommand::Pass))
    throw std::runtime_error("not a pass message");
  Reader r{bytes, 1};
  PassDesc d;
  d.all_logits = r.flag();
  const int32_t n = r.i32();
  if (n < 0 || n > 4096) throw std::runtime_error(fmt::format("a pass of {} runs", n));
  for (int32_t i = 0; i < n; ++i) {
    PassRun run;
    run.seq = r.i32();
    run.n_past = r.i32();
    run.hidden = r.flag();
    run.tokens = r.ids();
    const int32_t groups = r.i32();
    if (groups < 0 || groups > 1024)
      throw std::runtime_error(fmt::format("a pass run of {} groups", groups));
    for (int32_t g = 0; g < groups; ++g) run.tables.push_back(r.ids());
    d.runs.push_back(std::move(run));
  }
  if (r.at != bytes.size()) throw std::runtime_error("a pass message has bytes past its end");
  return d;
}

nlohmann::json context_options_json(const ContextOptions& o) {
  return {{"n_ctx", o.n_ctx},
          {"n_ctx_per_seq", o.n_ctx_per_seq},
          {"n_batch", o.n_batch},
          {"n_threads", o.n_threads},
          {"device", o.device},
          {"strict", o.strict},
          {"self_check", o.self_check},
          {"recheck", o.recheck},
          {"n_gpu_layers", o.n_gpu_layers},
          {"split_layers", o.split_layers},
          {"tensor_split", o.tensor_split},
          {"main_gpu", o.main_gpu},
          {"n_cpu_moe", o.n_cpu_moe},
          {"deterministic", o.deterministic},
          {"n_seq", o.n_seq},
          {"n_seq_cached", o.n_seq_cached}};
}

ContextOptions context_options_from_json(const nlohmann::json& j) {
  ContextOptions o;
  o.n_ctx = j.at("n_ctx");
  o.n_ctx_per_seq = j.at("n_ctx_per_seq");
  o.n_batch = j.at("n_batch");
  o.n_threads = j.at("n_threads");
  o.device = j.at("device");
  o.strict = j.at("strict");
  o.self_check = j.at("self_check");
  o.recheck = j.at("recheck");
  o.n_gpu_layers = j.at("n_gpu_layers");
  o.split_layers = j.at("split_layers");
  o.tensor_split = j.at("tensor_split").get<std::vector<double>>();
  o.main_gpu = j.at("main_gpu");
  o.n_cpu_moe = j.at("n_cpu_moe");
  o.deterministic = j.at("deterministic");
  o.n_seq = j.at("n_seq");
  o.n_seq_cached = j.at("n_seq_cached");
  return o;
}

std::string model_fingerprint(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw UsageError(fmt::format("{}: cannot read file", path));
  const uint64_t size = uint64_t(in.tellg());
  // FNV-1a over the first and last 1 MiB: the header (metadata and tensor list) and the ends of
  // the data.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t from, uint64_t n) {
    std::vector<char> buf(n);
    in.seekg(std::streamoff(from));
    in.read(buf.data(), std::streamsize(n));
    for (char c : buf) h = (h ^ uint8_t(c)) * 1099511628211ull;
  };
  const uint64_t chunk = uint64_t(1) << 20;
  mix(0, std::min(size, chunk));
  if (size > chunk) mix(size - std::min(size - chunk, chunk), std::min(size - chunk, chunk));
  return fmt::format("{} bytes, {:016x}", size, h);
}

uint64_t resident_bytes(bool peak) {
  std::ifstream in("/proc/self/status");
  const std::string key = peak ? "VmHWM:" : "VmRSS:";
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return uint64_t(std::stoull(line.substr(6))) * 1024;
  return 0;
}

namespace {

std::vector<uint8_t> json_bytes(const nlohmann::json& j) {
  const std::string s = j.dump();
  return std::vector<uint8_t>(s.begin(), s.end());
}

nlohmann::json json_of(const std::vector<uint8_t>& msg) {
  return nlohmann::json::parse(msg.begin() + 1, msg.end());
}

PipelineCommand command_of(const std::vector<uint8_t>& msg) {
  if (msg.empty() || msg[0] < uint8_t(PipelineCommand::Start) ||
      msg[0] > uint8_t(PipelineCommand::Memory))
    throw std::runtime_error("rank 0 sent a message that is no command");
  return PipelineCommand(msg[0]);
}

}  // namespace

int run_pipeline_worker(cluster::Cluster& c, const std::string& own_model) {
  const int me = c.rank();
  // A test hook: the version this rank says it runs.
  const char* version_env = std::getenv("POLYSTACK_TEST_VERSION");
  const std::string version = version_env && *version_env ? version_env : kVersion;
  auto fatal = [&](const std::string& what) {
    fmt::print(stderr, "polystack: error: rank {} ({}): {}\n", me, c.host(), what);
    c.abort(1);
  };
  try {
    for (;;) {
      std::vector<uint8_t> msg = c.recv(0, cluster::kCommand);
      PipelineCommand cmd = command_of(msg);
      if (cmd == PipelineCommand::Quit) break;
      if (cmd != PipelineCommand::Start) continue;  // End of a context this rank never joined
      // Start: the model loaded and checked, the devices opened, the facts sent back.
      const nlohmann::json start = json_of(msg);
      ContextOptions opts = context_options_from_json(start.at("options"));
      opts.mpi = true;
      std::shared_ptr<LoadedModel> model;
      OpenedDevices opened;
      nlohmann::json reply = {{"host", c.host()}, {"version", version}};
      try {
        const std::string path =
            own_model.empty() ? start.at("model").get<std::string>() : own_model;
        reply["fingerprint"] = model_fingerprint(path);
        if (reply["fingerprint"] == start.at("fingerprint") && start.at("version") == version) {
          model = LoadedModel::load(path, false);
          opened = open_devices(*model, opts);
          const PlacementRank facts = placement_rank(opened);
          reply["free"] = facts.free;
          reply["devices"] = facts.devices;
        }
      } catch (const std::exception& e) {
        reply["error"] = e.what();
        model.reset();
      }
      c.send(0, cluster::kReply, json_bytes(reply));
      msg = c.recv(0, cluster::kCommand);
      cmd = command_of(msg);
      if (cmd == PipelineCommand::Quit) break;
      if (cmd != PipelineCommand::Plan) continue;
      // Plan: this rank's layers loaded.
      std::unique_ptr<ModelContext> ctx;
      nlohmann::json ready;
      try {
        if (!model) throw BackendError("the model did not load here");
        ctx = std::make_unique<ModelContext>(model, opts, std::move(opened),
                                             json_of(msg).get<std::vector<int>>(), me);
        ready["summary"] = ctx->plan().summary;
        ready["rss"] = resident_bytes();
      } catch (const std::exception& e) {
        ready["error"] = e.what();
      }
      c.send(0, cluster::kReply, json_bytes(ready));
      // Passes until End.
      for (;;) {
        msg = c.recv(0, cluster::kCommand);
        cmd = command_of(msg);
        if (cmd == PipelineCommand::Pass) {
          if (!ctx) fatal("a pass for a context that failed to load here");
          ctx->run_pass(decode_pass(msg));
          continue;
        }
        if (cmd == PipelineCommand::Ping) {
          c.send(0, cluster::kReply, msg);
          continue;
        }
        if (cmd == PipelineCommand::Memory) {
          if (ctx) ctx->finish_passes();
          c.send(0, cluster::kReply,
                 json_bytes({{"rss", resident_bytes()}, {"peak", resident_bytes(true)}}));
          continue;
        }
        break;
      }
      ctx.reset();
      if (cmd == PipelineCommand::Quit) break;
    }
    c.finalize();
    return 0;
  } catch (const std::exception& e) {
    fatal(e.what());
  }
  return 1;
}

void stop_pipeline_workers(cluster::Cluster& c) {
  if (c.rank() == 0) tell_workers(c, command_message(PipelineCommand::Quit));
  c.finalize();
}

}  // namespace ps
