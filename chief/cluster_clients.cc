#include "chief/cluster_clients.h"

#include <algorithm>

#include "absl/strings/strip.h"
#include "common/optimizer.h"
#include "common/rpc/unary_call.h"
#include "common/transport/replica_header.h"
#include "common/status_macros.h"

namespace psrt {
namespace {

constexpr absl::Duration kControlTimeout = absl::Seconds(30);
constexpr absl::Duration kReconfigureTimeout = absl::Seconds(5);
// Pause and Resume: a worker that does not answer within this is treated as
// unreachable (a checkpoint is abandoned, a recovery goes on without it).
constexpr absl::Duration kWorkerStateTimeout = absl::Seconds(5);
// A restore or a durable snapshot writes every byte the PS holds.
constexpr absl::Duration kStorageTimeout = absl::Minutes(10);

}  // namespace

absl::Duration CreateVariablesTimeout(const CreateVariablesRequest& req) {
  // Values and the optimizer's slots (two where the request names none the
  // PS would accept: it refuses those anyway).
  int slots = 2;
  if (absl::StatusOr<std::unique_ptr<Optimizer>> opt = Optimizer::Create(req.optimizer()); opt.ok()) {
    slots = (*opt)->num_slots();
  }
  double bytes = 0;
  for (const VariableDef& v : req.variable()) {
    if (v.kind() == VariableDef::HASH_TABLE) continue;
    double n = 4;  // float32
    for (int d = 0; d < v.shape().dim_size(); ++d) {
      const int64_t size = v.shape().dim(d);
      // A row slice holds only its rows.
      n *= d == 0 && v.row_end() > v.row_begin() ? static_cast<double>(v.row_end() - v.row_begin())
                                                 : static_cast<double>(std::max<int64_t>(size, 1));
    }
    bytes += (1 + slots) * n;
  }
  return std::min(kControlTimeout + absl::Seconds(bytes / 10e6), absl::Hours(1));
}

PsAdmin::PsAdmin(std::shared_ptr<grpc::Channel> channel, std::string name)
    : name_(std::move(name)), stub_(ParameterServer::NewStub(channel)) {}

template <typename Request, typename Response>
absl::StatusOr<Response> PsAdmin::Call(grpc::Status (ParameterServer::Stub::*method)(grpc::ClientContext*,
                                                                                    const Request&, Response*),
                                       const Request& req, absl::Duration timeout, absl::string_view what) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  if (epoch_ > 0) AddReplicaHeader(&ctx, store_, epoch_);
  Response response;
  absl::Status s = FromGrpcStatus((stub_.get()->*method)(&ctx, req, &response), name_, what);
  if (!s.ok()) return s;
  return response;
}

absl::StatusOr<CreateVariablesResponse> PsAdmin::CreateVariables(const CreateVariablesRequest& req,
                                                                 bool reconfigure) {
  return Call(&ParameterServer::Stub::CreateVariables, req,
              reconfigure ? kReconfigureTimeout : CreateVariablesTimeout(req), "CreateVariables");
}

std::string CheckpointName(absl::string_view checkpoint_dir) {
  absl::string_view d = absl::StripSuffix(checkpoint_dir, "/");
  size_t slash = d.rfind('/');
  return std::string(slash == absl::string_view::npos ? d : d.substr(slash + 1));
}

absl::StatusOr<SnapshotResponse> PsAdmin::Snapshot(int64_t step, const std::string& dir, bool wait_durable,
                                                   int keep, const std::vector<std::string>& variables,
                                                   int full_every) {
  SnapshotRequest req;
  req.set_step(step);
  req.set_wait_durable(wait_durable);
  req.set_keep(keep);
  req.set_full_every(full_every);
  for (const std::string& v : variables) req.add_variable(v);
  return Snapshot(std::move(req), dir);
}

absl::StatusOr<SnapshotResponse> PsAdmin::Snapshot(SnapshotRequest req, const std::string& dir) {
  req.set_checkpoint(CheckpointName(dir));
  // Without wait_durable a snapshot is an in-memory copy: a PS that takes
  // longer is hung, and the checkpoint is abandoned rather than waited on.
  const bool wait = req.wait_durable();
  return Call(&ParameterServer::Stub::Snapshot, req, wait ? kStorageTimeout : kControlTimeout, "Snapshot");
}

absl::StatusOr<RestoreResponse> PsAdmin::Restore(int64_t step, const std::string& dir, int64_t generation,
                                                 const std::vector<std::string>& sources,
                                                 const google::protobuf::Map<int32_t, int64_t>* stream_next) {
  RestoreRequest req;
  for (const std::string& s : sources) req.add_source(s);
  if (stream_next != nullptr) *req.mutable_stream_next_batch() = *stream_next;
  req.set_step(step);
  req.set_generation(generation);
  req.set_checkpoint(CheckpointName(dir));
  return Call(&ParameterServer::Stub::Restore, req, kStorageTimeout, "Restore");
}

absl::StatusOr<MoveVariablesResponse> PsAdmin::MoveVariables(const MoveVariablesRequest& req) {
  return Call(&ParameterServer::Stub::MoveVariables, req, kStorageTimeout, "MoveVariables");
}

absl::StatusOr<PsStatusResponse> PsAdmin::Status(absl::Duration timeout) {
  return Call(&ParameterServer::Stub::Status, PsStatusRequest(), timeout, "Status");
}

absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> PsAdmin::Pull(
    const std::vector<std::string>& names, int64_t generation) {
  PullRequest req;
  req.set_generation(generation);
  for (const auto& n : names) req.add_variable(n);
  req.set_worker(-1);  // the chief: never waits on a sync step
  ASSIGN_OR_RETURN(PullResponse resp, Call(&ParameterServer::Stub::Pull, req, kControlTimeout, "Pull"));
  std::vector<std::pair<std::string, Tensor>> out;
  for (const NamedTensor& nt : resp.tensor()) {
    ASSIGN_OR_RETURN(Tensor t, Tensor::FromProto(nt.tensor()));
    out.emplace_back(nt.name(), std::move(t));
  }
  return out;
}

WorkerControl::WorkerControl(std::shared_ptr<grpc::Channel> channel, std::string name)
    : name_(std::move(name)), stub_(Worker::NewStub(channel)) {}

absl::Status WorkerControl::Start(const WorkerAssignment& assignment) {
  StartRequest req;
  *req.mutable_assignment() = assignment;
  return CallUnary(stub_.get(), &Worker::Stub::Start, req, kControlTimeout, name_, "Start").status();
}

absl::StatusOr<int64_t> WorkerControl::Pause(int64_t generation, absl::Duration timeout,
                                             const std::vector<int>& abandon, uint64_t expected_incarnation) {
  PauseRequest req;
  for (int ps : abandon) req.add_abandon_ps(ps);
  req.set_generation(generation);
  ASSIGN_OR_RETURN(PauseResponse resp,
                   CallUnary(stub_.get(), &Worker::Stub::Pause, req, timeout, name_, "Pause"));
  if (expected_incarnation != 0 && resp.incarnation() != 0 && resp.incarnation() != expected_incarnation) {
    return absl::AbortedError(absl::StrCat(name_, " restarted (incarnation ", resp.incarnation(), ", not ",
                                           expected_incarnation, "): its step says nothing of the old process"));
  }
  return resp.step();
}

absl::Status WorkerControl::Resume(int64_t start_step, int64_t generation, const ReplicaRoute& route,
                                   int64_t end_step) {
  ResumeRequest req;
  if (route.epoch() > 0) *req.mutable_route() = route;
  req.set_start_step(start_step);
  req.set_generation(generation);
  req.set_end_step(end_step);
  return CallUnary(stub_.get(), &Worker::Stub::Resume, req, kWorkerStateTimeout, name_, "Resume").status();
}

absl::Status WorkerControl::ResumePlaced(int64_t start_step, int64_t generation, const WorkerAssignment& a,
                                         int64_t end_step) {
  ResumeRequest req;
  *req.mutable_placement() = a.placement();
  *req.mutable_ps() = a.ps();
  req.set_start_step(start_step);
  req.set_generation(generation);
  req.set_end_step(end_step);
  return CallUnary(stub_.get(), &Worker::Stub::Resume, req, kWorkerStateTimeout, name_, "Resume").status();
}

absl::StatusOr<WorkerStatusResponse> WorkerControl::Status(absl::Duration timeout) {
  return CallUnary(stub_.get(), &Worker::Stub::Status, WorkerStatusRequest(), timeout, name_,
                   "Status");
}

absl::Status WorkerControl::Shutdown() {
  return CallUnary(stub_.get(), &Worker::Stub::Shutdown, ShutdownRequest(), kControlTimeout, name_,
                   "Shutdown")
      .status();
}

}  // namespace psrt
