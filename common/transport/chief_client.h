// The daemons' side of the chief: register, heartbeat, report failures.
//
// ChiefLink runs in the background of a PS or worker: it registers (retrying
// with backoff while the chief is not up), then heartbeats every interval,
// registering again whenever the chief does not know this incarnation (a
// restarted chief). The daemon serves whether or not the chief is there.
// A chief that refuses the registration for good (PERMISSION_DENIED: the
// task belongs to another job, or its credentials may not act for it) ends
// the link: on_refused runs once with the chief's error, and the daemon
// exits with it.
//
//   ChiefLink link(channels.Get(chief_address), self, ChiefLinkOptions());
//   link.set_progress([&] { return Progress{step, loss, eps, epoch}; });
//   link.Start();
//   ...
//   link.Stop();  // joins the thread
#ifndef PSRT_COMMON_TRANSPORT_CHIEF_CLIENT_H_
#define PSRT_COMMON_TRANSPORT_CHIEF_CLIENT_H_

#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "proto/chief_service.grpc.pb.h"

namespace psrt {

// One-call wrappers over the Chief service, with deadlines.
class ChiefClient {
 public:
  ChiefClient(std::shared_ptr<grpc::Channel> channel, std::string address,
              absl::Duration call_timeout = absl::Seconds(5));

  // `job` (may be null: an older task's request) is the task's identity.
  absl::StatusOr<RegisterResponse> Register(const TaskInfo& self, const JobIdentity* job = nullptr);
  absl::StatusOr<HeartbeatResponse> Heartbeat(const HeartbeatRequest& beat);
  absl::Status ReportFailure(const ReportFailureRequest& report);
  absl::StatusOr<JobStatusResponse> JobStatus();

 private:
  const std::string address_;
  const absl::Duration timeout_;
  std::unique_ptr<Chief::Stub> stub_;
};

struct ChiefLinkOptions {
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // No answer from the chief for this long: on_chief_lost runs (once, until
  // the chief answers again).
  absl::Duration chief_lost_after = absl::Seconds(10);
};

struct Progress {
  int64_t step = 0;
  float loss = 0;
  double examples_per_sec = 0;
  int epoch = 0;
};

class ChiefLink {
 public:
  ChiefLink(std::shared_ptr<grpc::Channel> channel, std::string chief_address, TaskInfo self,
            ChiefLinkOptions options);
  ~ChiefLink();  // Stop()

  // What each heartbeat carries; called on the link's thread.
  void set_progress(std::function<Progress()> f);
  // Gets the chief's command from each heartbeat answer.
  void set_on_command(std::function<void(HeartbeatResponse::Command)> f);
  // Runs on the link's thread when the chief has not answered for
  // options.chief_lost_after (a worker parks: no pushes without a chief).
  void set_on_chief_lost(std::function<void()> f);
  // The job this task belongs to, sent with every registration. Call
  // before Start().
  void set_job_identity(JobIdentity job);
  // Runs on the link's thread, once, when the chief refuses this task for
  // good (PERMISSION_DENIED from Register); the link stops registering.
  void set_on_refused(std::function<void(const absl::Status&)> f);

  void Start();
  void Stop();
  bool registered() const;
  // Blocks until registered, refused or `timeout`; true if registered.
  bool WaitRegistered(absl::Duration timeout) const;
  // The chief's refusal (see set_on_refused); OK while there is none.
  absl::Status refused() const;
  ChiefClient* client() { return &client_; }

 private:
  void Loop();

  ChiefClient client_;
  const TaskInfo self_;
  const ChiefLinkOptions options_;
  mutable absl::Mutex mu_;
  std::function<Progress()> progress_ ABSL_GUARDED_BY(mu_);
  std::function<void(HeartbeatResponse::Command)> on_command_ ABSL_GUARDED_BY(mu_);
  std::function<void()> on_chief_lost_ ABSL_GUARDED_BY(mu_);
  std::function<void(const absl::Status&)> on_refused_ ABSL_GUARDED_BY(mu_);
  std::optional<JobIdentity> job_ ABSL_GUARDED_BY(mu_);
  absl::Status refused_ ABSL_GUARDED_BY(mu_);
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace psrt

#endif  // PSRT_COMMON_TRANSPORT_CHIEF_CLIENT_H_
