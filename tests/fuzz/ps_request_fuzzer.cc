// Fuzzes the parameter server's request path: the hand-written decoders of
// ps/ps_wire.h (Pull, PullRows, Push, PushRows and the pull response a
// worker decodes) and, for requests they accept, the handlers of
// ps/server_core.h that the gRPC service calls with them. CreateVariables
// gets a protobuf-parsed request on a fresh server.
//
// Input layout: byte 0 picks the message (low 3 bits) and the server's
// consistency mode (bits 3-4); the rest is the message body.
//
// Invariants: a decoded request re-encodes to bytes that decode to the same
// request; handlers refuse bad input with a status, never a crash.
#include <cstdint>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "glog/logging.h"
#include "google/protobuf/stubs/logging.h"
#include "google/protobuf/text_format.h"
#include "common/transport/ps_wire.h"
#include "common/store/server_core.h"
#include "tests/fuzz/fuzz_util.h"

using psrt::fuzz::Check;

namespace {

// Any variable a fuzzed CreateVariables asks for whose size is merely large
// (over 1 MiB, but a product that fits 64 bits) is skipped: allocating a
// big model is the PS's job, not a bug. Sizes that overflow stay in, since
// those must be refused.
constexpr unsigned __int128 kMaxHarnessBytes = 1 << 20;

bool TooBigToTry(const psrt::CreateVariablesRequest& req) {
  for (const psrt::VariableDef& v : req.variable()) {
    // The rows Variable::Create allocates: a hash table starts with 1024,
    // a partitioned variable holds its slice.
    unsigned __int128 n = 4;  // float32
    for (int i = 0; i < v.shape().dim_size(); ++i) {
      int64_t d = v.shape().dim(i);
      if (i == 0 && v.kind() == psrt::VariableDef::HASH_TABLE) d = 1024;
      if (i == 0 && v.kind() != psrt::VariableDef::HASH_TABLE && v.row_end() > v.row_begin() &&
          v.row_begin() >= 0) {
        d = v.row_end() - v.row_begin();
      }
      if (d <= 0) {  // refused, or no bytes at all
        n = 0;
        break;
      }
      n *= static_cast<uint64_t>(d);
      if (n >> 64) break;  // far past anything allocatable: must be refused
    }
    // Value plus up to two optimizer slots.
    if ((n >> 62) == 0 && 3 * n > kMaxHarnessBytes) return true;
  }
  return false;
}

// The server the requests go to: a dense variable, a fixed and a hash
// embedding table, two workers, in one of the three consistency modes.
psrt::ParameterServerCore* Server(int mode) {
  static psrt::ParameterServerCore* servers[3] = {};
  if (servers[mode] != nullptr) return servers[mode];
  psrt::ServerCoreOptions options;
  options.incarnation = 7;
  options.max_rows_per_request = 1 << 16;
  auto* core = new psrt::ParameterServerCore(options);  // lives for the process
  psrt::CreateVariablesRequest req;
  Check(google::protobuf::TextFormat::ParseFromString(R"pb(
    variable { name: "w" dtype: DT_FLOAT shape { dim: 4 dim: 3 } }
    variable { name: "b" dtype: DT_FLOAT shape { dim: 3 } }
    variable { name: "emb" kind: FIXED_TABLE dtype: DT_FLOAT shape { dim: 16 dim: 4 } }
    variable { name: "hash" kind: HASH_TABLE dtype: DT_FLOAT shape { dim: 0 dim: 2 } }
    optimizer { adagrad { learning_rate: 0.1 } }
    num_workers: 2
  )pb", &req), "harness CreateVariables text");
  req.mutable_consistency()->set_mode(static_cast<psrt::ConsistencyDef::Mode>(mode));
  if (mode == psrt::ConsistencyDef::BOUNDED_STALENESS) req.mutable_consistency()->set_staleness(2);
  absl::StatusOr<psrt::CreateVariablesResponse> created = core->CreateVariables(req);
  Check(created.ok(), "harness CreateVariables");
  servers[mode] = core;
  return core;
}

// A pull's callback may run later (a waiting SYNC pull answers at its
// deadline, on the sweeper thread); it only looks at its arguments.
void IgnorePull(absl::Status, psrt::NamedTensors, int64_t) {}

template <typename T, typename Encode, typename Decode>
void CheckRoundTrip(const T& decoded, Encode encode, Decode decode) {
  grpc::ByteBuffer first = encode(decoded);
  auto again = decode(first);
  Check(again.ok(), "a decoded request re-encodes to bytes the decoder refuses");
  Check(psrt::wire::ToString(encode(*again)) == psrt::wire::ToString(first),
        "decode(encode(request)) changes the request");
}

}  // namespace

// Quiet: the server logs each CreateVariables and protobuf each bad UTF-8
// name; at thousands of inputs a second that is most of the time spent.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  FLAGS_minloglevel = google::GLOG_WARNING;
  google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*, int,
                                     const std::string&) {});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int which = data[0] & 7;
  const int mode = ((data[0] >> 3) & 3) % 3;
  grpc::Slice slice(data + 1, size - 1);
  grpc::ByteBuffer body(&slice, 1);
  namespace pw = psrt::pswire;
  // Already past: a pull that would wait is answered by the sweeper.
  const absl::Time deadline = absl::Now();

  switch (which) {
    case 0: {
      auto a = pw::DecodePull(body);
      if (!a.ok()) break;
      CheckRoundTrip(*a, pw::EncodePull, pw::DecodePull);
      Server(mode)->Pull(a->variables, a->worker, a->step, deadline, IgnorePull);
      break;
    }
    case 1: {
      auto a = pw::DecodePullRows(body);
      if (!a.ok()) break;
      CheckRoundTrip(*a, pw::EncodePullRows, pw::DecodePullRows);
      Server(mode)->PullRows(a->ids, a->worker, a->step, deadline, IgnorePull);
      break;
    }
    case 2: {
      auto a = pw::DecodePush(body);
      if (!a.ok()) break;
      CheckRoundTrip(*a, pw::EncodePush, [](const grpc::ByteBuffer& b) { return pw::DecodePush(b); });
      (void)Server(mode)->Push(a->id, a->gradients);
      break;
    }
    case 3: {
      auto a = pw::DecodePushRows(body);
      if (!a.ok()) break;
      CheckRoundTrip(*a, pw::EncodePushRows, pw::DecodePushRows);
      (void)Server(mode)->PushRows(a->id, a->rows);
      break;
    }
    case 4: {
      auto r = pw::DecodePullResult(body);
      if (!r.ok()) break;
      CheckRoundTrip(*r, pw::EncodePullResult,
                     [](const grpc::ByteBuffer& b) { return pw::DecodePullResult(b); });
      break;
    }
    case 5: {
      (void)pw::DecodePushResult(body);
      break;
    }
    default: {
      psrt::CreateVariablesRequest req;
      if (!req.ParseFromArray(data + 1, static_cast<int>(size - 1)) || TooBigToTry(req)) break;
      psrt::ServerCoreOptions options;
      psrt::ParameterServerCore core(options);
      absl::StatusOr<psrt::CreateVariablesResponse> created = core.CreateVariables(req);
      if (!created.ok()) break;
      // What was created can be pulled, and a second identical create is a no-op.
      std::vector<std::string> names;
      for (const auto& v : req.variable()) {
        // A hash table has no whole value to pull (Variable::Read refuses it).
        if (v.kind() != psrt::VariableDef::HASH_TABLE) names.push_back(v.name());
      }
      bool pulled = false;
      core.Pull(names, -1, 0, deadline, [&](absl::Status s, psrt::NamedTensors, int64_t) {
        Check(s.ok(), "pulling just-created variables fails");
        pulled = true;
      });
      Check(pulled, "a chief's pull (worker -1) waited");
      Check(core.CreateVariables(req).ok(), "repeating CreateVariables is refused");
      break;
    }
  }
  return 0;
}
