#include "common/transport/chief_client.h"

#include "common/rpc/retry.h"
#include "common/rpc/unary_call.h"
#include "glog/logging.h"

namespace psrt {

ChiefClient::ChiefClient(std::shared_ptr<grpc::Channel> channel, std::string address,
                         absl::Duration call_timeout)
    : address_(std::move(address)), timeout_(call_timeout), stub_(Chief::NewStub(channel)) {}

absl::StatusOr<RegisterResponse> ChiefClient::Register(const TaskInfo& self, const JobIdentity* job) {
  RegisterRequest req;
  *req.mutable_task() = self;
  if (job != nullptr) *req.mutable_job() = *job;
  return CallUnary(stub_.get(), &Chief::Stub::Register, req, timeout_, address_, "Register");
}

absl::StatusOr<HeartbeatResponse> ChiefClient::Heartbeat(const HeartbeatRequest& beat) {
  return CallUnary(stub_.get(), &Chief::Stub::Heartbeat, beat, timeout_, address_, "Heartbeat");
}

absl::Status ChiefClient::ReportFailure(const ReportFailureRequest& report) {
  return CallUnary(stub_.get(), &Chief::Stub::ReportFailure, report, timeout_, address_,
                   "ReportFailure")
      .status();
}

absl::StatusOr<JobStatusResponse> ChiefClient::JobStatus() {
  return CallUnary(stub_.get(), &Chief::Stub::JobStatus, JobStatusRequest(), timeout_, address_,
                   "JobStatus");
}

ChiefLink::ChiefLink(std::shared_ptr<grpc::Channel> channel, std::string chief_address,
                     TaskInfo self, ChiefLinkOptions options)
    : client_(std::move(channel), std::move(chief_address)),
      self_(std::move(self)),
      options_(options) {}

ChiefLink::~ChiefLink() { Stop(); }

void ChiefLink::set_progress(std::function<Progress()> f) {
  absl::MutexLock lock(&mu_);
  progress_ = std::move(f);
}

void ChiefLink::set_on_command(std::function<void(HeartbeatResponse::Command)> f) {
  absl::MutexLock lock(&mu_);
  on_command_ = std::move(f);
}

void ChiefLink::set_on_chief_lost(std::function<void()> f) {
  absl::MutexLock lock(&mu_);
  on_chief_lost_ = std::move(f);
}

void ChiefLink::set_job_identity(JobIdentity job) {
  absl::MutexLock lock(&mu_);
  job_ = std::move(job);
}

void ChiefLink::set_on_refused(std::function<void(const absl::Status&)> f) {
  absl::MutexLock lock(&mu_);
  on_refused_ = std::move(f);
}

absl::Status ChiefLink::refused() const {
  absl::MutexLock lock(&mu_);
  return refused_;
}

void ChiefLink::Start() { thread_ = std::thread([this] { Loop(); }); }

void ChiefLink::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

bool ChiefLink::registered() const {
  absl::MutexLock lock(&mu_);
  return registered_;
}

bool ChiefLink::WaitRegistered(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return registered_ || stop_ || !refused_.ok(); };
  mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  return registered_;
}

void ChiefLink::Loop() {
  auto stopped = [this] {
    absl::MutexLock lock(&mu_);
    return stop_;
  };
  // Waits up to `d`, waking at once on Stop().
  auto nap = [this](absl::Duration d) {
    absl::MutexLock lock(&mu_);
    auto s = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
    mu_.AwaitWithTimeout(absl::Condition(&s), d);
    return stop_;
  };
  Backoff backoff(BackoffOptions{absl::Milliseconds(50), absl::Seconds(2)});
  absl::Time last_answer = absl::Now();
  bool lost = false;
  auto answered = [&] {
    last_answer = absl::Now();
    lost = false;
  };
  auto check_lost = [&] {
    if (lost || absl::Now() - last_answer < options_.chief_lost_after) return;
    lost = true;
    std::function<void()> f;
    {
      absl::MutexLock lock(&mu_);
      f = on_chief_lost_;
    }
    LOG(WARNING) << "no answer from the chief for " << absl::FormatDuration(absl::Now() - last_answer);
    if (f) f();
  };
  while (!stopped()) {
    bool is_registered;
    {
      absl::MutexLock lock(&mu_);
      is_registered = registered_;
    }
    if (!is_registered) {
      std::optional<JobIdentity> job;
      {
        absl::MutexLock lock(&mu_);
        job = job_;
      }
      absl::StatusOr<RegisterResponse> r = client_.Register(self_, job.has_value() ? &*job : nullptr);
      if (r.ok()) {
        answered();
        LOG(INFO) << "registered with the chief (incarnation " << std::hex << self_.incarnation()
                  << ")";
        absl::MutexLock lock(&mu_);
        registered_ = true;
        backoff.Reset();
        continue;
      }
      if (r.status().code() == absl::StatusCode::kPermissionDenied) {
        // Another job's chief, or credentials that may not act for this
        // task: asking again cannot change the answer.
        LOG(ERROR) << "the chief refuses this task: " << r.status().message();
        std::function<void(const absl::Status&)> f;
        {
          absl::MutexLock lock(&mu_);
          refused_ = r.status();
          f = on_refused_;
        }
        if (f) f(r.status());
        return;
      }
      check_lost();
      if (backoff.attempts() % 20 == 0) LOG(INFO) << "chief not reachable yet: " << r.status();
      if (nap(backoff.NextDelay())) return;
      continue;
    }
    HeartbeatRequest beat;
    *beat.mutable_task() = self_.task();
    beat.set_incarnation(self_.incarnation());
    std::function<Progress()> progress;
    std::function<void(HeartbeatResponse::Command)> on_command;
    {
      absl::MutexLock lock(&mu_);
      progress = progress_;
      on_command = on_command_;
    }
    if (progress) {
      Progress p = progress();
      beat.set_step(p.step);
      beat.set_loss(p.loss);
      beat.set_examples_per_sec(p.examples_per_sec);
      beat.set_epoch(p.epoch);
    }
    absl::StatusOr<HeartbeatResponse> resp = client_.Heartbeat(beat);
    if (resp.ok()) {
      answered();
    } else {
      check_lost();
    }
    if (!resp.ok() || resp->command() == HeartbeatResponse::REREGISTER) {
      // Unknown incarnation (the chief restarted) or the chief is gone:
      // register again, with backoff.
      if (!resp.ok() && resp.status().code() != absl::StatusCode::kAborted) {
        VLOG(1) << "heartbeat failed: " << resp.status();
      }
      absl::MutexLock lock(&mu_);
      registered_ = false;
      continue;
    }
    if (on_command) on_command(resp->command());
    if (nap(options_.heartbeat_interval)) return;
  }
}

}  // namespace psrt
