// Fuzzes the chief's control plane: the handlers of chief/chief_service.h
// (Register, Heartbeat, ReportFailure, JobStatus) called in sequence on one
// fresh TaskRegistry per input, so that a registration can be followed by
// heartbeats and reports that name it; plus the parsers of who a caller is
// (a certificate's name, a token file's role lines).
//
// Input layout: a sequence of records [op: 1 byte][length: 1 byte][body],
// at most 32 of them. op % 6 picks: 0 Register, 1 Heartbeat,
// 2 ReportFailure, 3 JobStatus (bodies are the protobuf requests), 4 a
// certificate common name, 5 a token file's text.
//
// Invariants: no input crashes or hangs; an accepted registration is what
// the registry holds; a failure report reaches the coordinator only from the
// registered incarnation and only as printable ASCII of bounded size;
// JobStatus never shows an incarnation to a caller that is not the chief's
// identity (here: nobody is); a certificate name that gives a role names
// that role's task; a token file that loads has a usable token.
#include <cstdint>
#include <string>

#include "chief/chief_service.h"
#include "chief/task_registry.h"
#include "common/cluster_spec.h"
#include "common/rpc/roles.h"
#include "common/rpc/security.h"
#include "glog/logging.h"
#include "google/protobuf/stubs/logging.h"
#include "grpcpp/server_context.h"
#include "tests/fuzz/fuzz_util.h"

using psrt::fuzz::Check;

namespace {

const psrt::ClusterSpec& Spec() {
  static const psrt::ClusterSpec* spec = [] {
    auto s = psrt::ClusterSpec::FromJson(
        R"({"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2", "127.0.0.1:3"], "worker": ["127.0.0.1:4", "127.0.0.1:5"]})",
        "fuzz");
    Check(s.ok(), "harness cluster spec");
    return new psrt::ClusterSpec(*std::move(s));
  }();
  return *spec;
}

bool Printable(const std::string& s) {
  for (char c : s) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

void CertificateName(const std::string& cn) {
  psrt::Caller c = psrt::CallerFromCertificateName(cn);
  Check(c.roles != 0 && !c.EveryRole(), "a certificate gives exactly one role");
  if (c.Has(psrt::Role::kObserver)) {
    Check(c.index == -1, "an observer has no task");
    for (const char* job : {"chief", "ps", "worker", "observer", ""}) {
      Check(!c.MayActFor(job, 0), "an observer speaks for no task");
    }
    return;
  }
  Check(c.index >= 0, "a task's certificate names its index");
  for (psrt::Role r : {psrt::Role::kChief, psrt::Role::kPs, psrt::Role::kWorker}) {
    if (!c.Has(r)) continue;
    std::string name(psrt::RoleName(r));
    Check(cn == name + "-" + std::to_string(c.index) || (r == psrt::Role::kChief && cn == "chief"),
          "the role and index are the certificate's name");
    Check(c.MayActFor(name, c.index) && !c.MayActFor(name, c.index ^ 1), "speaks for its own task only");
  }
}

void TokenFile(const std::string& text) {
  static const std::string path = psrt::fuzz::ScratchPath("token");
  psrt::fuzz::WriteFile(path, text.data(), text.size());
  psrt::SecurityPaths p;
  p.token_file = path;
  absl::StatusOr<psrt::TransportSecurity> s = psrt::LoadTransportSecurity(p);
  if (!s.ok()) return;
  Check(s->token.size() >= 16 && Printable(s->token) && s->token.find(' ') == std::string::npos,
        "a loaded token is 16+ printable characters");
  for (const psrt::TokenDigest& d : s->role_digests) {
    Check(d.digest.size() == 32, "a role digest is 32 bytes");
    Check(d.index >= -1 && (d.index == -1 || d.role != psrt::Role::kObserver), "an observer token names no task");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  FLAGS_minloglevel = 3;  // the handlers log every registration and report
  google::protobuf::SetLogHandler(nullptr);
  Spec();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  psrt::TaskRegistry registry(Spec(), absl::Seconds(10));
  psrt::ChiefServiceImpl service(&registry, 77);
  std::vector<psrt::ReportFailureRequest> reports;
  service.on_failure = [&](const psrt::ReportFailureRequest& r) { reports.push_back(r); };
  service.command_for = [](const psrt::TaskId&) { return psrt::HeartbeatResponse::CONTINUE; };

  size_t pos = 0;
  for (int record = 0; record < 32 && pos + 2 <= size; ++record) {
    const int op = data[pos] % 6;
    const size_t len = std::min<size_t>(data[pos + 1], size - pos - 2);
    const std::string body(reinterpret_cast<const char*>(data + pos + 2), len);
    pos += 2 + len;
    grpc::ServerContext ctx;
    switch (op) {
      case 0: {
        psrt::RegisterRequest req;
        psrt::RegisterResponse resp;
        if (!req.ParseFromString(body)) break;
        grpc::Status s = service.Register(&ctx, &req, &resp);
        if (s.ok()) {
          Check(registry.Get(req.task().task()).info.incarnation() == req.task().incarnation(),
                "an accepted registration is the registry's");
          Check(resp.chief_incarnation() == 77, "the chief's incarnation");
        }
        break;
      }
      case 1: {
        psrt::HeartbeatRequest req;
        psrt::HeartbeatResponse resp;
        if (!req.ParseFromString(body)) break;
        const uint64_t registered = registry.Get(req.task()).info.incarnation();
        grpc::Status s = service.Heartbeat(&ctx, &req, &resp);
        if (s.ok() && resp.command() != psrt::HeartbeatResponse::REREGISTER) {
          Check(registered != 0 && registered == req.incarnation(), "a heartbeat is heard only from the registered incarnation");
        }
        break;
      }
      case 2: {
        psrt::ReportFailureRequest req;
        psrt::ReportFailureResponse resp;
        if (!req.ParseFromString(body)) break;
        const uint64_t registered = registry.Get(req.reporter()).info.incarnation();
        const size_t before = reports.size();
        grpc::Status s = service.ReportFailure(&ctx, &req, &resp);
        Check(reports.size() == before + (s.ok() ? 1 : 0), "an accepted report, and only that, reaches the coordinator");
        if (s.ok()) {
          Check(registered != 0 && registered == req.reporter_incarnation(), "a report only from the registered incarnation");
          Check(Printable(reports.back().error()), "a reported error is printable");
          Check(reports.back().error().size() <= 4 * 2048 + 64, "a reported error is bounded");
        }
        break;
      }
      case 3: {
        psrt::JobStatusRequest req;
        psrt::JobStatusResponse resp;
        if (!req.ParseFromString(body)) break;
        Check(service.JobStatus(&ctx, &req, &resp).ok(), "JobStatus answers");
        Check(resp.task_size() == 5, "JobStatus lists the spec's tasks");
        for (const psrt::TaskInfo& t : resp.task()) Check(t.incarnation() == 0, "no incarnation is shown");
        break;
      }
      case 4:
        CertificateName(body);
        break;
      case 5:
        TokenFile(body);
        break;
    }
  }
  return 0;
}
