// Fuzzes the control plane's edges (issue #17): the worker's assignment
// validator, with what the worker builds from an assignment it accepts (the
// PS client over its placement, the data position of its start step), and
// the PS's Snapshot and Restore with request-named checkpoints.
//
// Input layout: byte 0 picks the target (low 2 bits); the rest is a
// WorkerAssignment in protobuf text format (0), the same in binary (1), or a
// RestoreRequest / SnapshotRequest in text format (2, 3).
//
// Invariants: a refused assignment or request is a status, never a crash or
// a hang; an accepted checkpoint is a plain name, so its store lies in a
// directory of its own right under the PS's --snapshot_dir.
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "common/rpc/channel_cache.h"
#include "common/transport/ps_client.h"
#include "glog/logging.h"
#include "google/protobuf/stubs/logging.h"
#include "google/protobuf/text_format.h"
#include "common/store/server_core.h"
#include "tests/fuzz/fuzz_util.h"
#include "worker/assignment_validator.h"

using psrt::fuzz::Check;

namespace {

void Assignment(const psrt::WorkerAssignment& a) {
  psrt::AssignmentLimits limits;
  limits.num_ps = 2;
  if (!psrt::ValidateAssignment(a, limits).ok()) return;
  // Accepted: what the worker builds from it must hold too.
  static psrt::ChannelCache* channels = new psrt::ChannelCache();
  psrt::PsClient client(a.placement(), {"127.0.0.1:1", "127.0.0.1:2"}, channels, psrt::PsClientOptions());
  Check(client.num_ps() == 2, "PsClient lost a PS");
}

void SnapshotOrRestore(const std::string& text, bool restore) {
  static const std::string root = psrt::fuzz::ScratchPath("snapshots");
  static psrt::ParameterServerCore* ps = [] {
    psrt::ServerCoreOptions o;
    o.snapshot_root = root;
    o.max_memory_bytes = 1 << 20;
    auto* core = new psrt::ParameterServerCore(o);
    psrt::CreateVariablesRequest create;
    Check(google::protobuf::TextFormat::ParseFromString(
              R"pb(variable { name: "w" dtype: DT_FLOAT shape { dim: 2 } initializer { kind: ZEROS } }
                   optimizer { sgd { learning_rate: 0.1 } } consistency { mode: ASYNC } num_workers: 1)pb",
              &create),
          "harness request");
    Check(core->CreateVariables(create).ok(), "harness variables");
    return core;
  }();
  // Accepted: one path component, so root/NAME is a directory right under
  // the root, never the root itself or anything outside it.
  auto inside = [](const std::string& name) {
    return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
           name.find('\0') == std::string::npos;
  };
  if (restore) {
    psrt::RestoreRequest req;
    if (!google::protobuf::TextFormat::ParseFromString(text, &req)) return;
    if (ps->Restore(req).ok()) Check(inside(req.checkpoint()), "restored from outside --snapshot_dir");
  } else {
    psrt::SnapshotRequest req;
    if (!google::protobuf::TextFormat::ParseFromString(text, &req)) return;
    req.set_wait_durable(true);
    if (ps->Snapshot(req).ok()) Check(inside(req.checkpoint()), "snapshot outside --snapshot_dir");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bool quiet = [] {
    google::protobuf::SetLogHandler(nullptr);
    FLAGS_minloglevel = 3;
    return true;
  }();
  (void)quiet;
  if (size < 1 || size > (1 << 16)) return 0;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] & 3) {
    case 0: {
      psrt::WorkerAssignment a;
      if (google::protobuf::TextFormat::ParseFromString(body, &a)) Assignment(a);
      break;
    }
    case 1: {
      psrt::WorkerAssignment a;
      if (a.ParseFromString(body)) Assignment(a);
      break;
    }
    case 2: SnapshotOrRestore(body, /*restore=*/true); break;
    case 3: SnapshotOrRestore(body, /*restore=*/false); break;
  }
  return 0;
}
