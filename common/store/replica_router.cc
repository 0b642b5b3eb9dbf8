#include "common/store/replica_router.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "grpcpp/impl/client_unary_call.h"
#include "grpcpp/impl/rpc_method.h"
#include "common/rpc/status_util.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace psrt {
namespace {

constexpr char kPush[] = "/psrt.ParameterServer/Push";
// A backup that does not answer a forward within this fails the push (not
// acknowledged); the chief decides whether the backup is gone.
constexpr absl::Duration kForwardTimeout = absl::Seconds(10);

}  // namespace

ReplicaRouter::ReplicaRouter(ParameterServerCore* own, ServerCoreOptions base, ChannelCache* channels)
    : own_(own), base_(std::move(base)), channels_(channels) {
  auto s = std::make_unique<Store>();
  s->core = own_;
  absl::MutexLock lock(&mu_);
  stores_[base_.task_index] = std::move(s);
}

std::vector<ReplicaRouter::StoreRole> ReplicaRouter::Roles() const {
  std::vector<StoreRole> roles;
  absl::MutexLock lock(&mu_);
  for (const auto& [n, s] : stores_) roles.push_back(StoreRole{n, s->backup.load()});
  return roles;
}

absl::Status ReplicaRouter::CheckEpoch(int64_t epoch, absl::string_view what) const {
  const int64_t mine = epoch_.load();
  if (epoch == mine) return absl::OkStatus();
  stale_refused_.fetch_add(1);
  return absl::FailedPreconditionError(absl::StrCat(
      what, " of placement epoch ", epoch, " refused: ps:", base_.task_index, " is at placement epoch ", mine,
      epoch < mine ? " (the sender's placement is stale: ask the chief for the new one)"
                   : " (the chief has not moved this PS yet)"));
}

absl::StatusOr<ReplicaRouter::Store*> ReplicaRouter::Find(int store) const {
  absl::MutexLock lock(&mu_);
  auto it = stores_.find(store);
  if (it == stores_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("ps:", base_.task_index, " holds no copy of store ", store, " at placement epoch ", epoch_.load()));
  }
  return it->second.get();
}

absl::StatusOr<CreateVariablesResponse> ReplicaRouter::CreateVariables(const CreateVariablesRequest& req) {
  if (!req.has_replica()) return own_->CreateVariables(req);
  const ReplicaConfig& rc = req.replica();
  const int me = base_.task_index;
  if (rc.store() < 0) return absl::InvalidArgumentError(absl::StrCat("replica.store ", rc.store(), " is negative"));
  if (rc.epoch() < 1) return absl::InvalidArgumentError(absl::StrCat("replica.epoch ", rc.epoch(), " is not >= 1"));
  if (rc.epoch() < epoch_.load()) {
    return absl::FailedPreconditionError(absl::StrCat("replica.epoch ", rc.epoch(), " is older than ps:", me,
                                                      "'s placement epoch ", epoch_.load(), " (a stale chief?)"));
  }
  if (rc.backup() && rc.store() == me) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica: store ", me, " is ps:", me, "'s own; its backup must live on another PS"));
  }
  if (rc.backup() && !rc.backup_address().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("replica: a backup of store ", rc.store(),
                                                   " has no backup_address of its own"));
  }
  if (!rc.backup_address().empty() && channels_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("ps:", me, " cannot reach other PS to forward to a backup"));
  }
  Store* s;
  {
    absl::MutexLock lock(&mu_);
    auto it = stores_.find(rc.store());
    if (it == stores_.end()) {
      // Only a backup is ever made here: a primary made fresh would serve
      // initial values as if they were the store's.
      if (!rc.backup()) {
        return absl::FailedPreconditionError(absl::StrCat("replica: ps:", me, " holds no copy of store ", rc.store(),
                                                          " to serve as its primary"));
      }
      ServerCoreOptions o = base_;
      // Its snapshots under a name of its own: the old primary, if only cut
      // off, may still hold ps-<store> open (a shared --snapshot_dir). The
      // manifest names the directory, and a restore onto the usual layout
      // assembles from it (another layout, restore_assembly.h).
      o.store_name = absl::StrCat("ps-", rc.store(), "-on-ps-", me);
      auto fresh = std::make_unique<Store>();
      fresh->owned = std::make_unique<ParameterServerCore>(o);
      fresh->core = fresh->owned.get();
      fresh->backup = true;
      it = stores_.emplace(rc.store(), std::move(fresh)).first;
    }
    s = it->second.get();
  }
  // The variables first (all or nothing), then the role.
  ASSIGN_OR_RETURN(CreateVariablesResponse resp, s->core->CreateVariables(req));
  {
    // A forward waiting on a backup that stopped answering would hold the
    // role change up to its deadline: cancelled, its push is not
    // acknowledged and is retried under the new roles.
    absl::MutexLock cancel(&s->forward_mu);
    ++s->cancels;
    if (s->forwarding != nullptr) s->forwarding->TryCancel();
    if (s->forwarding_tcp != nullptr) {
      s->forwarding_tcp->Expire(s->forwarding_tcp_id,
                                absl::CancelledError("the store's roles changed during the forward"));
    }
  }
  absl::MutexLock lock(&s->mu);
  if (s->epoch > rc.epoch()) {
    return absl::FailedPreconditionError(absl::StrCat("replica.epoch ", rc.epoch(), " is older than store ",
                                                      rc.store(), "'s last role change at epoch ", s->epoch));
  }
  const bool was_backup = s->backup.load();
  s->backup = rc.backup();
  s->epoch = rc.epoch();
  s->backup_task = rc.backup_address().empty() ? -1 : rc.backup_task();
  s->to_backup = rc.backup_address().empty() ? nullptr : channels_->Get(rc.backup_address());
  // Connecting is not cancellable by a role change as a forward is: kept
  // short (a backup that does not answer in 1 s gets the gRPC forward).
  PsTcpChannelOptions tcp;
  tcp.connect_timeout = absl::Seconds(1);
  s->to_backup_tcp = s->to_backup == nullptr ? nullptr
                                             : std::make_shared<PsTcpChannel>(
                                                   s->to_backup, rc.backup_address(),
                                                   absl::StrCat("ps:", rc.backup_task(), " (backup)"), tcp);
  int64_t e = epoch_.load();
  while (e < rc.epoch() && !epoch_.compare_exchange_weak(e, rc.epoch())) {
  }
  LOG(INFO) << "store " << rc.store() << " at placement epoch " << rc.epoch() << ": "
            << (rc.backup() ? "backup" : was_backup ? "PROMOTED to primary" : "primary")
            << (rc.backup_address().empty() ? std::string(rc.backup() ? "" : ", no backup")
                                            : absl::StrCat(", backup on ps:", rc.backup_task()));
  return resp;
}

absl::StatusOr<ParameterServerCore*> ReplicaRouter::Resolve(const ReplicaHeader& h, bool control) {
  if (!h.present) return own_;
  RETURN_IF_ERROR(CheckEpoch(h.epoch, "a request"));
  ASSIGN_OR_RETURN(Store * s, Find(h.store));
  if (!control && s->backup.load()) {
    return absl::FailedPreconditionError(absl::StrCat("ps:", base_.task_index, " holds only a backup of store ",
                                                      h.store, "; its primary serves it"));
  }
  return s->core;
}

absl::Status ReplicaRouter::Forward(Store* s, int store, int64_t epoch, const grpc::ByteBuffer& raw) {
  if (s->to_backup_tcp != nullptr && s->to_backup_tcp->CanRoute()) return ForwardTcp(s, store, epoch, raw);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kForwardTimeout));
  AddReplicaHeader(&ctx, store, epoch, /*replica=*/true);
  grpc::ByteBuffer response;
  // A blocking call on its own completion queue (this thread polls it): it
  // needs none of the callback threads this handler may be holding.
  const grpc::internal::RpcMethod method(kPush, grpc::internal::RpcMethod::NORMAL_RPC);
  {
    absl::MutexLock l(&s->forward_mu);
    s->forwarding = &ctx;
  }
  grpc::Status status = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      s->to_backup.get(), method, &ctx, raw, &response);
  {
    absl::MutexLock l(&s->forward_mu);
    s->forwarding = nullptr;
  }
  if (status.ok()) return absl::OkStatus();
  return FromGrpcStatus(status, absl::StrCat("ps:", s->backup_task), "Push (replica)");
}

absl::Status ReplicaRouter::ForwardTcp(Store* s, int store, int64_t epoch, const grpc::ByteBuffer& raw) {
  struct Answer {
    absl::Notification done;
    absl::Status status;
  };
  auto answer = std::make_shared<Answer>();
  PsTcpChannel* channel = s->to_backup_tcp.get();
  int64_t cancels;
  {
    absl::MutexLock l(&s->forward_mu);
    cancels = s->cancels;
  }
  CallRoute route;
  route.store = store;
  route.epoch = epoch;
  route.replica = true;
  const uint64_t id = channel->Start(psframe::Method::kPush, raw, kForwardTimeout, route,
                                     [answer](absl::StatusOr<grpc::ByteBuffer> r) {
                                       answer->status = r.status();
                                       answer->done.Notify();
                                     });
  {
    absl::MutexLock l(&s->forward_mu);
    s->forwarding_tcp = channel;
    s->forwarding_tcp_id = id;
    // A role change between the Start and here found nothing to cancel.
    if (s->cancels != cancels) {
      channel->Expire(id, absl::CancelledError("the store's roles changed during the forward"));
    }
  }
  if (!answer->done.WaitForNotificationWithTimeout(kForwardTimeout)) {
    channel->Expire(id, absl::DeadlineExceededError(absl::StrCat(
                            "no answer within ", absl::FormatDuration(kForwardTimeout))));
  }
  answer->done.WaitForNotification();
  {
    absl::MutexLock l(&s->forward_mu);
    s->forwarding_tcp = nullptr;
  }
  if (answer->status.ok()) return absl::OkStatus();
  return absl::Status(answer->status.code(), absl::StrCat("ps:", s->backup_task, ": Push (replica): ",
                                                          answer->status.message()));
}

ReplicaRouter::SerialQueue::SerialQueue() : thread_([this] {
  while (true) {
    std::function<void()> f;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](SerialQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) { return q->stop_ || !q->queue_.empty(); },
          this));
      if (queue_.empty()) return;
      f = std::move(queue_.front());
      queue_.pop_front();
    }
    f();
  }
}) {}

ReplicaRouter::SerialQueue::~SerialQueue() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void ReplicaRouter::SerialQueue::Post(std::function<void()> f) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(f));
}

void ReplicaRouter::Push(const ReplicaHeader& h, const grpc::ByteBuffer* raw, Apply apply, PushDone done) {
  if (!h.present) {
    if (epoch_.load() > 0) {
      stale_refused_.fetch_add(1);
      return done(absl::FailedPreconditionError(absl::StrCat(
          "ps:", base_.task_index, " replicates its shards (placement epoch ", epoch_.load(),
          "): a push must name its store and epoch (psrt-store, psrt-epoch)")));
    }
    return done(apply(own_));
  }
  absl::StatusOr<Store*> found = Find(h.store);
  if (!found.ok()) return done(found.status());
  Store* s = *found;
  bool forwards;
  {
    absl::MutexLock lock(&s->mu);
    forwards = !h.replica && s->to_backup != nullptr;
    // Applied here at once: a backup's replica push (it never waits on
    // another PS), or a primary's with no backup (no order to keep).
    if (!forwards) return done(PushLocked(s, h, *raw, apply));
  }
  // Queued in arrival order; the store's thread applies and forwards
  // (rechecking the role: it may have changed meanwhile).
  s->pushes.Post([this, s, h, raw, apply = std::move(apply), done = std::move(done)] {
    absl::MutexLock lock(&s->mu);
    done(PushLocked(s, h, *raw, apply));
  });
}

absl::StatusOr<PushResponse> ReplicaRouter::PushLocked(Store* s, const ReplicaHeader& h, const grpc::ByteBuffer& raw,
                                                       const Apply& apply) {
  RETURN_IF_ERROR(CheckEpoch(h.epoch, h.replica ? "a replica push" : "a push"));
  if (h.replica != s->backup.load()) {
    stale_refused_.fetch_add(1);
    return absl::FailedPreconditionError(
        h.replica ? absl::StrCat("a replica push of store ", h.store, " refused: ps:", base_.task_index,
                                 " is its primary now, not its backup")
                  : absl::StrCat("a push of store ", h.store, " refused: ps:", base_.task_index,
                                 " holds only its backup; push to its primary"));
  }
  ASSIGN_OR_RETURN(PushResponse r, apply(s->core));
  if (h.replica || s->to_backup == nullptr) return r;
  // Applied here (or a duplicate of one applied before, whose forward may
  // have failed): acknowledged only once the backup holds it too.
  absl::Status f = Forward(s, h.store, h.epoch, raw);
  if (!f.ok()) {
    return absl::UnavailableError(absl::StrCat("push of store ", h.store, " applied on ps:", base_.task_index,
                                               " but not on its backup, so not acknowledged: ", f.message()));
  }
  return r;
}

}  // namespace psrt
