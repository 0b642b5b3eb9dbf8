#include "worker/worker_runtime.h"

#include <malloc.h>
#include <signal.h>

#include <iostream>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace psrt {
namespace {

// Errors that mean "the parameters are not there right now": a PS down,
// restarted without its state, or restored under us. The chief recovers;
// the worker waits for its word.
bool IsPsFailure(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kFailedPrecondition:
      return true;
    default:
      return false;
  }
}


}  // namespace

WorkerRuntime::WorkerRuntime(WorkerOptions options, WorkerDeps deps)
    : options_(options), deps_(std::move(deps)) {
  if (!options_.data_log.empty()) data_log_.open(options_.data_log, std::ios::app);
}

WorkerRuntime::~WorkerRuntime() { Shutdown(); }

void WorkerRuntime::JoinLoop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  JoinPushBehind();
}

bool WorkerRuntime::JoinPushBehind() {
  if (push_behind_.joinable()) push_behind_.join();
  absl::MutexLock lock(&mu_);
  return std::exchange(behind_failed_, false);
}

absl::Status WorkerRuntime::Start(const WorkerAssignment& assignment) {
  if (!control_mu_.TryLock()) {
    return absl::FailedPreconditionError("another Start, Pause or Resume is under way; try again");
  }
  absl::Cleanup unlock = [this] { control_mu_.Unlock(); };
  {
    absl::MutexLock lock(&mu_);
    bool active = state_ == WorkerStatusResponse::RUNNING || state_ == WorkerStatusResponse::PAUSED;
    if (active && assignment.generation() <= generation_) {
      return absl::FailedPreconditionError(
          absl::StrCat("worker already running generation ", generation_));
    }
  }
  // A fetch waiting for a data stream to decode gives up (the step is
  // dropped): the stream moves to the new input still decoding.
  cancel_fetch_ = true;
  JoinLoop();
  prefetcher_.Drop();  // its fetch reads the dataset about to be replaced
  cancel_fetch_ = false;
  if (assignment.end_step() < assignment.start_step()) {
    return absl::InvalidArgumentError(absl::StrCat("assignment ends at step ", assignment.end_step(),
                                                   " before its start ", assignment.start_step()));
  }
  auto fail = [this](const absl::Status& s) {
    absl::MutexLock lock(&mu_);
    state_ = WorkerStatusResponse::FAILED;
    error_ = std::string(s.message());
    return s;
  };
  // The old run's runner and client go before the new ones are made, and
  // its datasets too but for the streams this worker keeps (those move
  // over, see below), and their memory back to the system: a dataset holds its shard
  // decoded (Fashion-MNIST: 188 MB of floats), and a new one made on another
  // gRPC thread (another malloc arena) beside the freed one kept both in
  // the RSS (+217 MB after a chief restarted the run, seen by
  // tests/control_soak_test).
  // The streams this worker keeps (a membership change moves only some)
  // are moved over from the old input, not decoded again; the others are
  // freed before any new one is built (StreamInput::Create).
  runner_.reset();
  client_.reset();
  retired_clients_.clear();
  {
    absl::MutexLock lock(&mu_);
    pending_client_.reset();
  }
  absl::StatusOr<std::unique_ptr<StreamInput>> input =
      StreamInput::Create(assignment, deps_.make_dataset ? deps_.make_dataset : ShardDataset, input_.get());
  input_.reset();
  ::malloc_trim(0);
  if (!input.ok()) return fail(input.status());
  absl::StatusOr<std::unique_ptr<StepRunner>> runner = deps_.make_runner(assignment);
  if (!runner.ok()) return fail(runner.status());
  absl::StatusOr<std::unique_ptr<ParameterClient>> client = deps_.make_client(assignment);
  if (!client.ok()) return fail(client.status());
  input_ = *std::move(input);
  input_->set_cancel(&cancel_fetch_);
  runner_ = *std::move(runner);
  client_ = *std::move(client);

  absl::MutexLock lock(&mu_);
  assignment_ = assignment;
  generation_ = assignment.generation();
  next_step_ = assignment.start_step();
  loss_step_ = -1;  // no loss of this assignment yet
  metrics_.clear();
  state_ = WorkerStatusResponse::RUNNING;
  pause_requested_ = false;
  stop_ = false;
  error_.clear();
  device_ = runner_->device();
  lockstep_ = client_->lockstep();
  ++interruptions_;
  LOG(INFO) << "worker " << options_.index << " starts steps [" << assignment.start_step() << ", "
            << assignment.end_step() << ") on " << device_ << ", generation " << generation_;
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

absl::StatusOr<int64_t> WorkerRuntime::Pause(int64_t generation, absl::Duration timeout,
                                             const std::vector<int>& abandon) {
  // Refused rather than queued: calls waiting here each held a server
  // thread, and a flood of them left none for Status (tests/control_soak_test).
  if (!control_mu_.TryLock()) {
    return absl::FailedPreconditionError("another Start, Pause or Resume is under way; try again");
  }
  absl::Cleanup unlock = [this] { control_mu_.Unlock(); };
  absl::MutexLock lock(&mu_);
  if (generation < generation_) {
    return absl::AbortedError(absl::StrCat("pause for generation ", generation,
                                           " but the worker is at ", generation_));
  }
  pause_requested_ = true;
  if (lockstep_ && state_ == WorkerStatusResponse::RUNNING) {
    // The wish rides this worker's next all-reduce; the whole group stops
    // after that step (see Loop and RunStep).
    auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return state_ != WorkerStatusResponse::RUNNING;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&stopped), timeout)) {
      return absl::DeadlineExceededError("the collective group has not reached a step boundary");
    }
    return next_step_;
  }
  ++interruptions_;
  // After the pause is requested, so that a cancelled step is not run again
  // before the Resume. (Its callbacks never take mu_.)
  if (!abandon.empty() && client_ != nullptr) client_->Abandon(abandon);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pushing_ == 0; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&idle), timeout)) {
    return absl::DeadlineExceededError("a push is still in flight");
  }
  if (state_ == WorkerStatusResponse::RUNNING) state_ = WorkerStatusResponse::PAUSED;
  return next_step_;
}

absl::Status WorkerRuntime::Resume(int64_t start_step, int64_t generation, const ReplicaRoute& route,
                                   int64_t end_step) {
  if (!control_mu_.TryLock()) {
    return absl::FailedPreconditionError("another Start, Pause or Resume is under way; try again");
  }
  absl::Cleanup unlock = [this] { control_mu_.Unlock(); };
  absl::MutexLock lock(&mu_);
  if (state_ != WorkerStatusResponse::PAUSED && state_ != WorkerStatusResponse::RUNNING) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot resume a worker in state ", WorkerStatusResponse::State_Name(state_)));
  }
  if (generation < generation_) {
    return absl::AbortedError(absl::StrCat("resume for generation ", generation,
                                           " but the worker is at ", generation_));
  }
  if (end_step != 0 && (end_step < start_step || end_step > assignment_.end_step())) {
    return absl::InvalidArgumentError(absl::StrCat("ResumeRequest.end_step is ", end_step, "; it must be in [start_step ",
                                                   start_step, ", the assignment's end_step ",
                                                   assignment_.end_step(), "] (0: unchanged)"));
  }
  // Before the loop runs again: its next calls go to the new primaries.
  if (route.epoch() > 0 && client_ != nullptr) client_->SetRoute(route);
  if (end_step != 0 && end_step != assignment_.end_step()) {
    LOG(INFO) << "worker " << options_.index << " ends sooner: at step " << end_step << ", not "
              << assignment_.end_step();
    assignment_.set_end_step(end_step);
  }
  generation_ = generation;
  next_step_ = start_step;
  pause_requested_ = false;
  ++interruptions_;
  error_.clear();
  state_ = WorkerStatusResponse::RUNNING;
  return absl::OkStatus();
}

WorkerAssignment WorkerRuntime::assignment() const {
  absl::MutexLock lock(&mu_);
  return assignment_;
}

absl::Status WorkerRuntime::ReplaceClient(const WorkerAssignment& a) {
  if (!control_mu_.TryLock()) {
    return absl::FailedPreconditionError("another Start, Pause or Resume is under way; try again");
  }
  absl::Cleanup unlock = [this] { control_mu_.Unlock(); };
  auto check = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    if (state_ != WorkerStatusResponse::PAUSED || lockstep_ || client_ == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("a new placement needs a paused parameter-server worker, not ",
                                                        WorkerStatusResponse::State_Name(state_)));
    }
    return absl::OkStatus();
  };
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(check());
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ParameterClient> client, deps_.make_client(a));
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(check());
  // Installed by the loop before its next step (see Loop). Joining the
  // prefetcher's fetch here raced with the loop's own join of it, and a
  // worker hung in ReplaceClient for good (elastic_ps_test, once in CI).
  pending_client_ = std::move(client);
  *assignment_.mutable_placement() = a.placement();
  *assignment_.mutable_ps() = a.ps();
  ++interruptions_;  // a step in flight is dropped, not pushed
  LOG(INFO) << "new placement: " << a.ps_size() << " PS";
  return absl::OkStatus();
}

void WorkerRuntime::Park(const std::string& why) {
  absl::MutexLock lock(&mu_);
  if (state_ != WorkerStatusResponse::RUNNING) return;
  LOG(WARNING) << "parking at step " << next_step_ << ": " << why;
  pause_requested_ = true;
  ++interruptions_;  // a step in flight is dropped, not pushed
  state_ = WorkerStatusResponse::PAUSED;
  error_ = why;
}

void WorkerRuntime::Loop() {
  while (true) {
    int64_t step, generation;
    {
      absl::MutexLock lock(&mu_);
      // In lockstep a requested pause is not a reason to stop here: the
      // group agrees on the step to stop after in its all-reduce.
      auto runnable = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || (state_ == WorkerStatusResponse::RUNNING && (!pause_requested_ || lockstep_));
      };
      mu_.Await(absl::Condition(&runnable));
      if (stop_) return;
      if (pending_client_ != nullptr) {
        // A new placement: once no fetch or push of the old client is in
        // flight (the old one is kept, retired, for any late callback).
        mu_.Unlock();
        JoinPushBehind();
        prefetcher_.Drop();  // its pull went to the old placement
        mu_.Lock();
        std::vector<std::unique_ptr<ParameterClient>> older;
        if (pending_client_ != nullptr) {
          pending_client_->SetGeneration(generation_);
          // Only the last is kept: every call of the ones before it was
          // joined before it was replaced (each new placement kept one more
          // client, its connections and buffers, for good).
          older.swap(retired_clients_);
          retired_clients_.push_back(std::move(client_));
          client_ = std::move(pending_client_);
        }
        mu_.Unlock();
        older.clear();  // outside the lock: a client's teardown may wait for its callbacks
        mu_.Lock();
        continue;
      }
      if (next_step_ >= assignment_.end_step() && push_behind_.joinable()) {
        // The last push may still fail and take the worker back.
        mu_.Unlock();
        JoinPushBehind();
        mu_.Lock();
        continue;
      }
      if (next_step_ >= assignment_.end_step()) {
        state_ = WorkerStatusResponse::DONE;
        LOG(INFO) << "worker " << options_.index << " finished at step " << next_step_;
        return;
      }
      step = next_step_;
      generation = generation_;
    }
    RunStep(step, generation);
  }
}

void WorkerRuntime::FetchInputs(int64_t step, StepInputs* in) {
  in->status = [&]() -> absl::Status {
    // A step dropped by a pause read its batch; a restore moves the step:
    // either way the input goes back to where `step` reads.
    if (input_->next_step() != step) RETURN_IF_ERROR(input_->Seek(step));
    ASSIGN_OR_RETURN(bool more, input_->Next(&in->batch));
    if (!more) return absl::OutOfRangeError("the input ran out");
    ASSIGN_OR_RETURN(in->dense, client_->Pull(runner_->DenseVariables(), step));
    ASSIGN_OR_RETURN(RowRequest rows, runner_->SparseRows(in->batch));
    if (!rows.empty()) {
      ASSIGN_OR_RETURN(in->rows, client_->PullRows(rows, step));
    }
    return absl::OkStatus();
  }();
}

void WorkerRuntime::RunStep(int64_t step, int64_t generation) {
  if (options_.kill_at_step > 0 && step == options_.kill_at_step) {
    LOG(WARNING) << "fault injection: killing worker " << options_.index << " at step " << step;
    ::raise(SIGKILL);
  }
  int64_t seen, end_step;
  bool overlap, overlap_push, lockstep;
  std::optional<StreamPos> data;  // ASYNC: the batch the step reads (RequestId.data_*)
  {
    absl::MutexLock lock(&mu_);
    seen = interruptions_;
    if (assignment_.consistency().mode() != ConsistencyDef::SYNC && assignment_.stream_size() > 0) {
      data = BatchOf(assignment_, step);
    }
    lockstep = lockstep_;
    end_step = assignment_.end_step();
    overlap = options_.overlap_pull && assignment_.consistency().mode() == ConsistencyDef::ASYNC;
    overlap_push = options_.overlap_push && assignment_.consistency().mode() == ConsistencyDef::ASYNC;
  }
  const absl::Time start = absl::Now();
  client_->SetGeneration(generation);
  std::optional<StepInputs> prefetched = prefetcher_.Take(step, seen);
  StepInputs in;
  if (prefetched.has_value()) {
    in = *std::move(prefetched);
  } else {
    FetchInputs(step, &in);
  }
  // The next step's read and pull go out now and overlap this compute.
  if (overlap && in.status.ok() && step + 1 < end_step) prefetcher_.Start(step + 1, seen);
  Batch& batch = in.batch;
  absl::Status status = in.status;
  StepResult result;
  RequestId id;
  id.set_worker(options_.index);
  id.set_worker_incarnation(options_.incarnation);
  id.set_step(step);
  id.set_generation(generation);
  if (data.has_value()) {
    id.set_has_data(true);
    id.set_data_stream(data->index);
    id.set_data_batch(data->batch);
  }
  // Bucketed push: the first part to leave commits the step to its push
  // (a Pause or Resume before it drops the step, as before any push).
  std::unique_ptr<BucketedPush> parts;
  bool committed = false, dropped = false;
  const bool stop_before_push = options_.stop_before_push_at_step > 0 && step == options_.stop_before_push_at_step;
  if (status.ok() && options_.push_bucket_bytes > 0 && !lockstep && !overlap_push && !stop_before_push) {
    parts = client_->StartBucketedPush(id, options_.push_bucket_bytes);
    if (parts != nullptr && !bucket_logged_.exchange(true)) {
      LOG(INFO) << "worker " << options_.index << " pushes in buckets of " << options_.push_bucket_bytes
                << " bytes per PS";
    }
  }
  if (status.ok()) {
    absl::StatusOr<StepResult> r;
    if (parts != nullptr) {
      r = runner_->RunStreaming(in.dense, in.rows, batch, step, [&](const std::string& v, const Tensor& g) {
        if (!committed && !dropped) {
          absl::MutexLock lock(&mu_);
          committed = interruptions_ == seen && !stop_;
          dropped = !committed;
          if (committed) ++pushing_;  // from here a Pause waits for this push
        }
        if (committed) parts->Add(v, g);
      });
    } else {
      r = runner_->Run(in.dense, in.rows, batch, step);
    }
    status = r.status();
    if (r.ok()) result = *std::move(r);
  }
  // The pulled parameters are done with: an in-process store (a mirrored
  // replica, the in-process trainer's PS) shares them copy-on-write, and
  // holding them through the push would make every update copy the
  // variable first.
  in.dense.clear();
  in.rows.clear();
  bool pause_wanted = false;
  if (!status.ok()) {
    if (committed) {
      parts.reset();  // waits for the parts on the wire; the PS never counts the step
      absl::MutexLock lock(&mu_);
      --pushing_;
    }
    // Accounted after the push before it: that one may have failed first
    // (and dropped this step already).
    if (JoinPushBehind()) return;
    HandleStepFailure(step, seen, status);
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    if (dropped) return;  // paused or resumed before its first part left
    if (!committed) {
      if (interruptions_ != seen || stop_) return;  // paused or resumed under us: drop it
      ++pushing_;  // from here a Pause waits for this push
    }
    pause_wanted = pause_requested_;
    overlap_push = overlap_push && !lockstep;
  }
  // Step t-1's push is answered before step t's leaves: in order, once.
  if (JoinPushBehind()) {
    // It failed and took the worker back to its step: drop this one.
    parts.reset();  // waits for the parts already on the wire
    absl::MutexLock lock(&mu_);
    --pushing_;
    return;
  }
  if (options_.stop_before_push_at_step > 0 && step == options_.stop_before_push_at_step &&
      !stopped_for_fault_.exchange(true)) {
    LOG(WARNING) << "fault injection: stopping before the push of step " << step;
    std::cerr << "FAULT: stopping before the push of step " << step << std::endl;
    ::raise(SIGSTOP);
  }
  PushDone done{step, seen, batch.size, start, absl::Now(), result.loss, batch.epoch, std::move(result.metrics)};
  done.generation = generation;
  if (parts != nullptr) {
    FinishPush(done, parts->Finish(result.sparse_gradients));
    return;
  }
  if (overlap_push) {
    // The loop goes on to the next step while this push is in flight.
    done.behind = true;
    {
      absl::MutexLock lock(&mu_);
      if (next_step_ == step) next_step_ = step + 1;
    }
    push_behind_ = std::thread([this, id, done, dense = std::move(result.dense_gradients),
                                sparse = std::move(result.sparse_gradients)] {
      FinishPush(done, client_->Push(id, dense, sparse));
    });
    return;
  }
  if (lockstep) {
    absl::StatusOr<bool> agreed =
        client_->PushAgreeing(id, result.dense_gradients, result.sparse_gradients, pause_wanted);
    status = agreed.status();
    done.pause_agreed = agreed.ok() && *agreed;
  } else {
    status = client_->Push(id, result.dense_gradients, result.sparse_gradients);
  }
  FinishPush(done, status);
}

void WorkerRuntime::FinishPush(const PushDone& p, const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    --pushing_;
    if (status.ok()) {
      if (next_step_ == p.step) next_step_ = p.step + 1;
      if (data_log_.is_open()) {
        const StreamPos pos = BatchOf(assignment_, p.step);
        data_log_ << p.generation << " " << p.step << " " << pos.index << " " << pos.batch << " "
                  << absl::ToUnixMillis(absl::Now()) << std::endl;
      }
      if (p.pause_agreed && state_ == WorkerStatusResponse::RUNNING) {
        // A member of the group asked to pause: all stop after this step.
        pause_requested_ = true;
        state_ = WorkerStatusResponse::PAUSED;
      }
      const double dt = absl::ToDoubleSeconds((p.behind ? p.left : absl::Now()) - p.start);
      const double eps = dt > 0 ? p.examples / dt : 0;
      examples_per_sec_ = examples_per_sec_ == 0 ? eps : 0.9 * examples_per_sec_ + 0.1 * eps;
      loss_ = p.loss;
      loss_step_ = p.step;
      metrics_ = p.metrics;
      epoch_ = p.epoch;
      return;
    }
    // Not pushed: this step is the one to run again (unless a Resume has
    // moved the worker elsewhere since).
    if (p.behind && next_step_ == p.step + 1) next_step_ = p.step;
  }
  HandleStepFailure(p.step, p.seen, status);
  if (p.behind) {
    // The step computed meanwhile must not be pushed past this one: the
    // loop drops it (JoinPushBehind says so) and runs this step again.
    absl::MutexLock lock(&mu_);
    behind_failed_ = true;
  }
}

void WorkerRuntime::HandleStepFailure(int64_t step, int64_t seen, const absl::Status& status) {
  if (status.code() == absl::StatusCode::kCancelled) return;  // dropped for a Start
  if (status.code() == absl::StatusCode::kDeadlineExceeded) {
    LOG(WARNING) << "step " << step << " timed out, retrying: " << status;
    return;
  }
  if (IsPsFailure(status)) {
    LOG(WARNING) << "step " << step << ": parameter server failure, waiting for the chief: "
                 << status;
    {
      absl::MutexLock lock(&mu_);
      if (interruptions_ == seen && state_ == WorkerStatusResponse::RUNNING) {
        state_ = WorkerStatusResponse::PAUSED;
        error_ = std::string(status.message());
      }
    }
    // Parked first, reported after: the chief resumes a parked worker when
    // it has a report and finds every PS well. Reported first, the chief
    // could take the report, see this worker still RUNNING and drop it;
    // then nothing would ever resume it (seen under load in cluster_test).
    if (deps_.report_failure) deps_.report_failure(status, step);
    return;
  }
  LOG(ERROR) << "step " << step << " failed: " << status;
  absl::MutexLock lock(&mu_);
  state_ = WorkerStatusResponse::FAILED;
  error_ = absl::StrCat("step ", step, ": ", status.message());
  stop_ = true;
}

WorkerStatusResponse WorkerRuntime::Status() const {
  absl::MutexLock lock(&mu_);
  WorkerStatusResponse r;
  r.set_state(state_);
  r.set_step(next_step_);
  r.set_loss(loss_);
  r.set_examples_per_sec(examples_per_sec_);
  r.set_incarnation(options_.incarnation);
  r.set_device(device_);
  r.set_error(error_);
  r.set_generation(generation_);
  r.set_loss_step(loss_step_);
  for (const auto& [name, value] : metrics_) (*r.mutable_train_metric())[name] = value;
  return r;
}

Progress WorkerRuntime::progress() const {
  absl::MutexLock lock(&mu_);
  return Progress{next_step_, loss_, examples_per_sec_, epoch_};
}

WorkerStatusResponse::State WorkerRuntime::WaitFinished(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto finished = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return state_ == WorkerStatusResponse::DONE || state_ == WorkerStatusResponse::FAILED;
  };
  mu_.AwaitWithTimeout(absl::Condition(&finished), timeout);
  return state_;
}

void WorkerRuntime::Shutdown() { JoinLoop(); }

}  // namespace psrt
