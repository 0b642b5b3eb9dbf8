#include "common/store/server_core.h"

#include "absl/strings/escaping.h"
#include "common/store/parallel_apply.h"
#include "common/store/push_parts.h"
#include "common/store/restore_assembly.h"

#include <algorithm>
#include <limits>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_split.h"
#include "absl/strings/match.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace psrt {
namespace {

// Most snapshots one checkpoint's store keeps (SnapshotRequest.keep).
constexpr int kMaxKeep = 100;

std::string PsName(int task) { return absl::StrCat("ps:", task); }

// Sizes of answers from request counts: INT64_MAX instead of overflowing.
int64_t SaturatingMul(int64_t a, int64_t b) {
  int64_t r;
  return (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) ? INT64_MAX : r;
}
int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

// INVALID_ARGUMENT when a push's data position (RequestId.data_*) is
// malformed.
absl::Status CheckDataPosition(const RequestId& id) {
  if (!id.has_data()) return absl::OkStatus();
  if (id.data_stream() < 0 || id.data_batch() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("push of stream ", id.data_stream(), " batch ", id.data_batch(), ": negative"));
  }
  // Each stream named is remembered (DataStreams) until a restore: a
  // caller inventing streams must not grow it without bound.
  if (id.data_stream() >= DataStreams::kMaxStreams) {
    return absl::InvalidArgumentError(absl::StrCat("push of stream ", id.data_stream(), ": a job has at most ",
                                                   DataStreams::kMaxStreams, " data streams"));
  }
  return absl::OkStatus();
}

}  // namespace

ParameterServerCore::ParameterServerCore(ServerCoreOptions options)
    : options_(std::move(options)), apply_pool_(WorkPool::Create(options_.apply_threads)) {
  {
    absl::MutexLock lock(&stats_mu_);
    last_stats_ = absl::Now();
  }
  SnapshotWriterOptions writer;
  writer.snapshot_root = options_.snapshot_root;
  writer.store_name = StoreName();
  writer.store = options_.snapshot;
  writer_ = std::make_unique<SnapshotWriter>(std::move(writer));
}

ParameterServerCore::~ParameterServerCore() {
  // Parked pulls answered, then every pull runs at once; the sweeper joined.
  gate_.Stop(absl::UnavailableError(absl::StrCat(PsName(options_.task_index), " is shutting down")));
  writer_.reset();  // writes what is queued, then joins its thread
}

absl::StatusOr<CreateVariablesResponse> ParameterServerCore::CreateVariables(
    const CreateVariablesRequest& req) {
  ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, Optimizer::Create(req.optimizer()));
  RETURN_IF_ERROR(StepGate::CheckConfig(req));
  std::vector<StepGate::Run> stale;  // pulls of the generation being left
  CreateVariablesResponse resp;
  resp.set_incarnation(options_.incarnation);
  {
  absl::MutexLock lock(&mu_);
  if (optimizer_ != nullptr && optimizer_def_.SerializeAsString() != req.optimizer().SerializeAsString()) {
    return absl::InvalidArgumentError(absl::StrCat(PsName(options_.task_index), " already holds variables of another optimizer (",
                                                   optimizer_->name(), ")"));
  }
  const Optimizer* use = optimizer_ != nullptr ? optimizer_.get() : opt.get();
  // Check every definition before creating any: all or nothing. To
  // reinitialise, every variable is made anew and replaces the old set.
  std::map<std::string, std::unique_ptr<Variable>> fresh;
  int64_t used = 0;
  if (!req.reinitialize()) {
    for (const auto& [name, v] : variables_) used += v->bytes();
  }
  for (const VariableDef& def : req.variable()) {
    auto it = variables_.find(def.name());
    if (it != variables_.end() && !req.reinitialize()) {
      RETURN_IF_ERROR(it->second->SameAs(def));
      continue;
    }
    if (fresh.count(def.name())) {
      return absl::InvalidArgumentError(absl::StrCat("variable ", def.name(), " listed twice"));
    }
    if (static_cast<int64_t>((req.reinitialize() ? 0 : variables_.size()) + fresh.size()) >=
        options_.max_variables) {
      return absl::ResourceExhaustedError(absl::StrCat(
          PsName(options_.task_index), " holds at most ", options_.max_variables,
          " variables (--max_variables); the request would add ", req.variable_size(),
          " to the ", variables_.size(), " it has"));
    }
    VariableLimits limits;
    limits.max_bytes = options_.max_memory_bytes == INT64_MAX ? INT64_MAX : std::max<int64_t>(0, options_.max_memory_bytes - used);
    limits.max_hash_rows = options_.max_hash_table_rows;
    ASSIGN_OR_RETURN(fresh[def.name()], Variable::Create(def, use, limits));
    used += fresh[def.name()]->bytes();
  }
  if (optimizer_ == nullptr) {
    optimizer_ = std::move(opt);
    optimizer_def_ = req.optimizer();
  }
  if (req.reinitialize()) {
    variables_.clear();
    LOG(INFO) << "reinitialising every variable (a fresh start)";
  }
  for (auto& [name, v] : fresh) variables_[name] = std::move(v);
  if (req.reinitialize() || !fresh.empty()) chain_ = DeltaChain();  // no base for a delta
  const bool new_generation = req.generation() != generation_;
  generation_ = req.generation();
  {
    absl::MutexLock s(gate_.mu());
    if (req.reinitialize()) {
      ResetStepsLocked(0);
      streams_.Clear();
    }
    // A SYNC step half gathered under the old generation is dropped: the
    // chief starts every worker of the new one (a resized group) at this
    // step, so each pushes it again and none counts twice.
    // A pull of the old generation waiting for a step is answered now:
    // its worker is being started again, and waits for no step of it. The
    // record of pushes goes too: the generation fence refuses a retry of
    // the old one, and a step pushed again in the new one must count.
    if (new_generation) {
      ledger_.Clear();
      stale = gate_.TakeParkedLocked();
    }
    // Each worker's start step in this generation: exact when the
    // generation is new (a resized SYNC group may start again at an
    // earlier step), else never backwards.
    gate_.ConfigureLocked(req, new_generation);
  }
  if (!fresh.empty()) {
    LOG(INFO) << "created " << fresh.size() << " variables (" << variables_.size() << " in all), "
              << optimizer_->name() << ", " << ConsistencyDef::Mode_Name(req.consistency().mode())
              << ", " << req.num_workers() << " workers";
  }
  }
  for (StepGate::Run& run : stale) {
    run(absl::AbortedError(absl::StrCat(PsName(options_.task_index), " moved to generation ", req.generation())));
  }
  gate_.WakeWaiters();  // fewer workers can complete a SYNC step
  return resp;
}

absl::Status ParameterServerCore::CheckPullResponse(absl::string_view method, int64_t bytes) const {
  if (bytes <= options_.max_pull_response_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      method, " refused: its answer would be ", bytes, " bytes, over --max_pull_response_mb (",
      options_.max_pull_response_bytes, " bytes); pull fewer variables or rows at once"));
}

absl::StatusOr<Variable*> ParameterServerCore::Find(const std::string& name) const {
  auto it = variables_.find(name);
  if (it == variables_.end()) {
    if (variables_.empty()) {
      return absl::NotFoundError(absl::StrCat(PsName(options_.task_index),
                                              " holds no variables (restarted and not restored yet?)"));
    }
    return absl::NotFoundError(absl::StrCat("variable ", name, " is not on ", PsName(options_.task_index)));
  }
  return it->second.get();
}

void ParameterServerCore::Pull(std::vector<std::string> names, int worker, int64_t step,
                               absl::Time deadline, PullDone done) {
  {
    absl::MutexLock lock(&stats_mu_);
    ++pulls_;
  }
  // Each name once: a variable named again and again made a small request
  // answer with a huge response (32 KB of request, 200 MB back).
  absl::flat_hash_set<absl::string_view> seen;
  for (const std::string& name : names) {
    if (!seen.insert(name).second) {
      return done(absl::InvalidArgumentError(absl::StrCat("Pull names variable ", name, " more than once")), {}, 0);
    }
  }
  gate_.WaitOrRun(worker, step, deadline, [this, names = std::move(names), done = std::move(done)](absl::Status s) {
    if (!s.ok()) return done(s, {}, 0);
    NamedTensors out;
    int64_t gs;
    {
      auto whole = WholeStepRead();
      absl::ReaderMutexLock lock(&mu_);
      // The whole answer's size first: nothing is read for one over the
      // bound (issue #17: a pull response was bounded by memory alone).
      std::vector<Variable*> vars;
      int64_t bytes = 0;
      for (const std::string& name : names) {
        absl::StatusOr<Variable*> v = Find(name);
        if (!v.ok()) return done(v.status(), {}, 0);
        vars.push_back(*v);
        bytes = SaturatingAdd(bytes, SaturatingMul((*v)->shape().num_elements(),
                                                   DataTypeSize((*v)->def().dtype())));
      }
      if (absl::Status b = CheckPullResponse("Pull", bytes); !b.ok()) return done(b, {}, 0);
      for (size_t i = 0; i < names.size(); ++i) {
        const std::string& name = names[i];
        absl::StatusOr<Tensor> t = vars[i]->Read();
        if (!t.ok()) return done(t.status(), {}, 0);
        out.emplace_back(name, *std::move(t));
      }
      absl::MutexLock sync(gate_.mu());
      gs = gate_.global_step();
    }
    done(absl::OkStatus(), std::move(out), gs);
  });
}

void ParameterServerCore::PullRows(std::vector<std::pair<std::string, Tensor>> ids, int worker,
                                   int64_t step, absl::Time deadline, PullDone done, bool read_only) {
  int64_t rows = 0;
  for (const auto& [name, t] : ids) rows += t.NumElements();
  if (rows > options_.max_rows_per_request) {
    return done(absl::ResourceExhaustedError(absl::StrCat("PullRows asks for ", rows,
                                                          " rows, the limit is ",
                                                          options_.max_rows_per_request)),
                {}, 0);
  }
  {
    absl::MutexLock lock(&stats_mu_);
    ++pulls_;
  }
  gate_.WaitOrRun(worker, step, deadline, [this, ids = std::move(ids), done = std::move(done), read_only](absl::Status s) {
    if (!s.ok()) return done(s, {}, 0);
    NamedTensors out;
    int64_t gs;
    {
      auto whole = WholeStepRead();
      absl::ReaderMutexLock lock(&mu_);
      // Size first, before any row is copied or made.
      std::vector<Variable*> vars;
      int64_t bytes = 0;
      for (const auto& [name, t] : ids) {
        absl::StatusOr<Variable*> v = Find(name);
        if (!v.ok()) return done(v.status(), {}, 0);
        vars.push_back(*v);
        const TensorShape& shape = (*v)->shape();
        const int64_t row = shape.rank() == 0 ? 1 : shape.row_elements();
        bytes = SaturatingAdd(bytes, SaturatingMul(SaturatingMul(t.NumElements(), row),
                                                   DataTypeSize((*v)->def().dtype())));
      }
      if (absl::Status b = CheckPullResponse("PullRows", bytes); !b.ok()) return done(b, {}, 0);
      for (size_t i = 0; i < ids.size(); ++i) {
        const auto& [name, t] = ids[i];
        absl::StatusOr<Tensor> r = vars[i]->ReadRows(t, pool_.get(), /*make_rows=*/!read_only);
        if (!r.ok()) return done(r.status(), {}, 0);
        out.emplace_back(name, *std::move(r));
      }
      absl::MutexLock sync(gate_.mu());
      gs = gate_.global_step();
    }
    done(absl::OkStatus(), std::move(out), gs);
  });
}

void ParameterServerCore::RecordLocked(const RequestId& id) {
  ledger_.RecordPush(id);
  gate_.CountPushLocked(id.worker(), id.step());
}

absl::StatusOr<PushResponse> ParameterServerCore::Push(const RequestId& id,
                                                       const NamedTensors& gradients) {
  PushResponse resp;
  bool wake = false;
  {
    // The step counted and its values applied as one, for whole-step reads.
    absl::MutexLockMaybe whole(options_.reads_see_whole_steps ? &whole_step_mu_ : nullptr);
    absl::ReaderMutexLock lock(&mu_);
    RETURN_IF_ERROR(CheckGenerationLocked(id.generation(), "push"));
    // Validate everything first: a refused push changes nothing.
    RETURN_IF_ERROR(PushParts::Check(id));
    RETURN_IF_ERROR(CheckDataPosition(id));
    std::vector<Variable*> vars;
    for (const auto& [name, grad] : gradients) {
      ASSIGN_OR_RETURN(Variable * v, Find(name));
      if (v->def().kind() == VariableDef::HASH_TABLE || grad.dtype() != DT_FLOAT ||
          grad.shape() != v->shape()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "variable ", name, ": gradient is ", DataTypeName(grad.dtype()),
            grad.shape().ToString(), ", the variable is float32", v->shape().ToString()));
      }
      vars.push_back(v);
    }
    {
      absl::MutexLock stats(&stats_mu_);
      ++pushes_;
    }
    bool apply_now = false;
    std::vector<bool> skip(gradients.size(), false);  // applied already, by a push of the same batch
    {
      absl::MutexLock s(gate_.mu());
      resp.set_global_step(gate_.global_step());
      if (ledger_.PushSeen(id)) {
        resp.set_duplicate(true);
        return resp;
      }
      if (gate_.mode() == ConsistencyDef::SYNC) {
        if (id.step() > gate_.sync_step()) {
          return absl::FailedPreconditionError(absl::StrCat(
              "worker ", id.worker(), " pushed step ", id.step(), " but ",
              PsName(options_.task_index), " is at sync step ", gate_.sync_step()));
        }
        if (id.step() < gate_.sync_step() || ledger_.Gathered(id.worker())) {
          resp.set_duplicate(true);
          return resp;
        }
        // A bucket waits with the worker's other parts (copied: the request's
        // buffers are not ours to keep); all are summed once all are in.
        NamedTensors step_grads;
        for (const auto& [name, grad] : gradients) step_grads.emplace_back(name, id.bucket() > 0 ? grad.Copy() : grad);
        ASSIGN_OR_RETURN(const bool whole, ledger_.TakePart(id, &step_grads));
        if (!whole) return resp;
        ledger_.GatherDense(id.worker(), step_grads);
        RecordLocked(id);
        if (ledger_.gathered_workers() >= gate_.num_workers()) {
          // The mean applied, then the step moves on. Find needs mu_, which
          // this thread holds (shared) all along.
          auto find = [this](const std::string& name) ABSL_NO_THREAD_SAFETY_ANALYSIS { return Find(name); };
          RETURN_IF_ERROR(ledger_.ApplyMean(gate_.num_workers(), find, apply_pool_.get()));
          gate_.AdvanceSyncStepLocked();
          wake = true;
        }
        resp.set_global_step(gate_.global_step());
      } else {
        // Its batch was applied here already (pushed by a worker that
        // died before it reached every PS): a duplicate, whoever sends it.
        if (id.has_data() && streams_.Done(id.data_stream(), id.data_batch())) {
          resp.set_duplicate(true);
          return resp;
        }
        // Recorded before applying, so a concurrent retry of the same id is
        // answered as a duplicate rather than applied twice. A bucket is
        // applied at once; the step counts when its last part is in.
        ASSIGN_OR_RETURN(const bool whole, ledger_.TakePart(id));
        // Of a batch in progress here (a worker died between its parts, or
        // its rows came first), only the variables no push of it applied
        // yet. (A whole step of a batch not in progress takes all.)
        if (id.has_data() && (!whole || streams_.InProgress(id.data_stream(), id.data_batch()))) {
          std::vector<std::string> names;
          for (const auto& [name, grad] : gradients) names.push_back(name);
          const std::set<std::string> fresh = streams_.Take(id.data_stream(), id.data_batch(), names);
          for (size_t i = 0; i < gradients.size(); ++i) skip[i] = !fresh.count(gradients[i].first);
        }
        if (id.has_data() && whole) streams_.Complete(id.data_stream(), id.data_batch());
        if (whole) {
          RecordLocked(id);
          resp.set_global_step(gate_.AdvanceGlobalStepLocked());
          wake = gate_.mode() == ConsistencyDef::BOUNDED_STALENESS;
        }
        apply_now = true;
      }
    }
    if (apply_now) {
      std::vector<Variable*> apply;
      std::vector<const Tensor*> grads;
      for (size_t i = 0; i < gradients.size(); ++i) {
        if (skip[i]) continue;
        apply.push_back(vars[i]);
        grads.push_back(&gradients[i].second);
      }
      RETURN_IF_ERROR(ApplyDenseAll(apply_pool_.get(), apply, grads));
    }
  }
  if (wake) gate_.WakeWaiters();
  return resp;
}

absl::StatusOr<PushResponse> ParameterServerCore::PushRows(const RequestId& id,
                                                           const std::vector<SparseUpdate>& rows) {
  int64_t total = 0;
  for (const SparseUpdate& u : rows) total += u.ids.NumElements();
  if (total > options_.max_rows_per_request) {
    return absl::ResourceExhaustedError(absl::StrCat("PushRows carries ", total,
                                                     " rows, the limit is ", options_.max_rows_per_request));
  }
  PushResponse resp;
  absl::ReaderMutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckGenerationLocked(id.generation(), "push"));
  RETURN_IF_ERROR(PushParts::Check(id));
  RETURN_IF_ERROR(CheckDataPosition(id));
  if (id.bucket() > 0 && !id.last_bucket() && !rows.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("rows came in bucket ", id.bucket(),
                                                   " of a step; they travel only in its last bucket"));
  }
  std::vector<Variable*> vars;
  for (const SparseUpdate& u : rows) {
    ASSIGN_OR_RETURN(Variable * v, Find(u.variable));
    if (v->def().kind() == VariableDef::DENSE) {
      return absl::InvalidArgumentError(absl::StrCat("variable ", u.variable, " is dense, not a table"));
    }
    const int64_t dim = v->def().shape().dim(1);
    if (u.ids.dtype() != DT_INT64 || u.ids.shape().rank() != 1 || u.values.dtype() != DT_FLOAT ||
        u.values.shape() != TensorShape({u.ids.NumElements(), dim})) {
      return absl::InvalidArgumentError(absl::StrCat(
          "variable ", u.variable, ": rows must be int64 ids [n] and float32 values [n,", dim,
          "], got ", DataTypeName(u.ids.dtype()), u.ids.shape().ToString(), " and ",
          DataTypeName(u.values.dtype()), u.values.shape().ToString()));
    }
    // Before any is applied or queued: a refused push changes no table.
    RETURN_IF_ERROR(v->CheckRoom(u.ids));
    vars.push_back(v);
  }
  absl::MutexLock s(gate_.mu());
  resp.set_global_step(gate_.global_step());
  if (gate_.mode() == ConsistencyDef::SYNC) {
    // Rows of step t wait with the dense part; the worker's Push (sent after
    // its PushRows) completes its share of the step.
    if (id.step() != gate_.sync_step() || ledger_.Gathered(id.worker()) || ledger_.PartSeen(id)) {
      resp.set_duplicate(true);
      return resp;
    }
    ledger_.GatherRows(rows);
    return resp;
  }
  // Rows of a batch applied here already (by any worker or incarnation)
  // are a duplicate, as that batch's dense gradients are (see Push).
  if (id.has_data() && streams_.Done(id.data_stream(), id.data_batch())) {
    resp.set_duplicate(true);
    return resp;
  }
  // A retried PushRows (same id) is acknowledged and changes nothing; its
  // ids are recorded apart from Push's, which the same step also sends.
  if (ledger_.RowsSeen(id)) {
    resp.set_duplicate(true);
    return resp;
  }
  ledger_.RecordRows(id);
  if (id.has_data()) {
    // Of a batch in progress here, only the tables whose rows no push of
    // it applied yet (the batch is whole with its Push's last part).
    std::vector<std::string> names;
    for (const SparseUpdate& u : rows) names.push_back(u.variable);
    const std::set<std::string> fresh = streams_.Take(id.data_stream(), id.data_batch(), names);
    if (fresh.size() < std::set<std::string>(names.begin(), names.end()).size()) {
      std::vector<Variable*> some_vars;
      std::vector<SparseUpdate> some_rows;
      for (size_t i = 0; i < rows.size(); ++i) {
        if (!fresh.count(rows[i].variable)) continue;
        some_vars.push_back(vars[i]);
        some_rows.push_back(rows[i]);
      }
      RETURN_IF_ERROR(ApplyRowsAll(apply_pool_.get(), some_vars, some_rows));
      return resp;
    }
  }
  // Row ids of a hash table are checked by the table itself, so apply
  // under the table's lock; fixed-table ranges were checked above by
  // ApplyRows' own validation before any change.
  RETURN_IF_ERROR(ApplyRowsAll(apply_pool_.get(), vars, rows));
  return resp;
}

absl::StatusOr<SnapshotResponse> ParameterServerCore::Snapshot(const SnapshotRequest& req) {
  // Each kept snapshot is a copy of every variable on disk: a caller may not
  // make the PS keep without bound.
  if (req.keep() > kMaxKeep) {
    return absl::InvalidArgumentError(
        absl::StrCat("keep: ", req.keep(), " snapshots; at most ", kMaxKeep, " are kept"));
  }
  if (req.full_every() < 0 || req.full_every() > kMaxFullEvery) {
    return absl::InvalidArgumentError(
        absl::StrCat("full_every: ", req.full_every(), "; want 0 (every snapshot full) to ", kMaxFullEvery));
  }
  if (req.retain().step_size() > kMaxKeep) {
    return absl::InvalidArgumentError(
        absl::StrCat("retain: ", req.retain().step_size(), " steps; at most ", kMaxKeep, " are kept"));
  }
  RETURN_IF_ERROR(writer_->CheckQueueRoom(req.step()));
  ASSIGN_OR_RETURN(SnapshotStore * store, writer_->Acquire(req.checkpoint()));
  absl::Cleanup release = [this, store] { writer_->Release(store); };
  SnapshotWriter::Job job;
  job.store = store;
  job.keep = req.keep() > 0 ? req.keep() : 3;
  if (req.has_retain()) job.retain.emplace(req.retain().step().begin(), req.retain().step().end());
  job.snapshot.step = req.step();
  int64_t bytes = 0;
  {
    // The pause: no push applies while every variable is copied.
    absl::MutexLock lock(&mu_);
    std::vector<Variable*> vars;
    if (req.variable_size() == 0) {
      for (const auto& [name, v] : variables_) vars.push_back(v.get());
    } else {
      std::set<std::string> named;
      for (const std::string& name : req.variable()) {
        if (!named.insert(name).second) {
          return absl::InvalidArgumentError(absl::StrCat("snapshot: variable ", absl::CEscape(name.substr(0, 64)), " named twice"));
        }
        ASSIGN_OR_RETURN(Variable * v, Find(name));
        vars.push_back(v);
      }
    }
    for (const Variable* v : vars) bytes += v->bytes();
    job.snapshot.delta = DeltaNextLocked(req, vars, &job.snapshot.base_step);
    // Copy on every core: the pause is memory bandwidth, not one thread.
    job.snapshot.variables.resize(vars.size());
    const size_t threads = std::max<size_t>(1, std::min<size_t>(vars.size(), std::thread::hardware_concurrency()));
    std::vector<std::thread> copiers;
    for (size_t t = 0; t < threads; ++t) {
      copiers.emplace_back([&, t] {
        for (size_t i = t; i < vars.size(); i += threads) {
          job.snapshot.variables[i] = vars[i]->CopyForSnapshot(writer_->copy_pool(), job.snapshot.delta);
        }
      });
    }
    for (std::thread& c : copiers) c.join();
    if (job.snapshot.delta) {  // what is copied (and written), not what is held
      bytes = 0;
      for (const VariableState& st : job.snapshot.variables) {
        bytes += st.value.TotalBytes() + (st.ids.IsValid() ? st.ids.TotalBytes() : 0);
        for (const Tensor& t : st.slots) bytes += t.TotalBytes();
      }
    }
    absl::MutexLock s(gate_.mu());
    job.snapshot.global_step = gate_.global_step();
    job.snapshot.sync_step = gate_.sync_step();
    job.snapshot.worker_next_step = gate_.worker_next_step();
  }
  const bool job_delta = job.snapshot.delta;
  const int64_t job_base = job.snapshot.base_step;
  const uint64_t seq = writer_->Enqueue(std::move(job), /*waited=*/req.wait_durable());
  // Queued, the job is the writer's to track (SnapshotWriter::Replace
  // clears queued jobs' stores): the use ends here, before any wait on the
  // writer, so a writer replacing the store can wait for every use to end.
  std::move(release).Invoke();
  SnapshotResponse resp;
  resp.set_step(req.step());
  resp.set_bytes(bytes);
  resp.set_path(StoreName());
  resp.set_delta(job_delta);
  resp.set_base_step(job_base);
  if (req.wait_durable()) {
    // Its own job's end, whatever later jobs prune (SnapshotWriter).
    RETURN_IF_ERROR(writer_->WaitWritten(seq));
    resp.set_durable(true);
  }
  return resp;
}

SnapshotReadOptions ParameterServerCore::RestoreReadOptions(bool all_here) const {
  auto defs = std::make_shared<std::map<std::string, VariableDef>>();
  {
    absl::ReaderMutexLock lock(&mu_);
    for (const auto& [name, v] : variables_) (*defs)[name] = v->def();
  }
  SnapshotReadOptions options;
  options.check_variable = [defs, all_here](const VariableDef& saved, DataType dtype, const TensorShape& value) {
    auto it = defs->find(saved.name());
    if (it == defs->end()) {
      // Another layout's store holds other PS's variables too.
      if (!all_here) return absl::OkStatus();
      return absl::FailedPreconditionError(absl::StrCat("variable ", saved.name(), " is not on this PS"));
    }
    return FitsVariable(it->second, saved, dtype, value);
  };
  return options;
}

absl::StatusOr<RestoreResponse> ParameterServerCore::RestoreFromSources(const RestoreRequest& req) {
  constexpr int kMaxSources = 1024;
  if (req.source_size() > kMaxSources) {
    return absl::InvalidArgumentError(absl::StrCat("restore: ", req.source_size(), " sources, at most ", kMaxSources));
  }
  RETURN_IF_ERROR(CheckCheckpointName(req.checkpoint()));
  for (const std::string& source : req.source()) {
    absl::Status s = CheckCheckpointName(source);
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("restore: source \"", absl::CEscape(source.substr(0, 64)), "\": ", s.message()));
  }
  if (options_.snapshot_root.empty()) {
    return absl::FailedPreconditionError("this store has no snapshot directory (--snapshot_dir)");
  }
  // Every source read whole and checked (read-only: they may be other
  // daemons' stores) before anything here changes; each piece of a
  // variable here checked against it before it is allocated.
  const SnapshotReadOptions read_options = RestoreReadOptions(/*all_here=*/false);
  std::vector<PsSnapshot> snaps;
  for (const std::string& source : req.source()) {
    const std::string dir =
        absl::StrCat(absl::StripSuffix(options_.snapshot_root, "/"), "/", req.checkpoint(), "/", source);
    ASSIGN_OR_RETURN(std::unique_ptr<SnapshotStore> store, SnapshotStore::OpenReadOnly(dir));
    absl::StatusOr<PsSnapshot> snap = store->Read(req.step(), read_options);
    if (!snap.ok()) {
      return absl::Status(snap.status().code(), absl::StrCat(source, ": ", snap.status().message()));
    }
    snaps.push_back(*std::move(snap));
  }
  std::vector<VariableDef> wanted;
  int num_slots = 0;
  {
    absl::ReaderMutexLock lock(&mu_);
    if (optimizer_ == nullptr) return absl::FailedPreconditionError("restore before CreateVariables");
    num_slots = optimizer_->num_slots();
    for (const auto& [name, v] : variables_) wanted.push_back(v->def());
  }
  ASSIGN_OR_RETURN(std::vector<VariableState> states, AssembleVariables(wanted, num_slots, snaps));
  RestoreResponse resp;
  {
    absl::MutexLock lock(&mu_);
    for (const VariableState& st : states) {
      ASSIGN_OR_RETURN(Variable * v, Find(st.def.name()));
      RETURN_IF_ERROR(v->CheckState(st));
    }
    for (const VariableState& st : states) RETURN_IF_ERROR(variables_[st.def.name()]->LoadState(st));
    generation_ = req.generation();
    absl::MutexLock sync(gate_.mu());
    chain_ = DeltaChain();  // the restored state is no snapshot's base
    ledger_.Clear();
    streams_.Reset(req.stream_next_batch());  // none for a checkpoint: its stream positions go on from here
    // Counters of another layout mean nothing here: start them at the step.
    gate_.RestoreAllAtLocked(req.step(), snaps.empty() ? 0 : snaps[0].global_step);
    resp.set_step(req.step());
    resp.set_variables(static_cast<int64_t>(states.size()));
  }
  LOG(INFO) << "restored " << resp.variables() << " variables of step " << req.step() << " from "
            << req.source_size() << " stores of another layout";
  gate_.WakeWaiters();
  return resp;
}

absl::StatusOr<RestoreResponse> ParameterServerCore::Restore(const RestoreRequest& req) {
  for (const auto& [stream, batch] : req.stream_next_batch()) {
    if (stream < 0 || stream >= DataStreams::kMaxStreams || batch < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("restore: stream ", stream, " applied up to batch ", batch, ": out of range"));
    }
  }
  if (req.source_size() > 0) return RestoreFromSources(req);
  RETURN_IF_ERROR(CheckCheckpointName(req.checkpoint()));
  {
    // Let a write of this very step finish first, holding no use of the
    // store: a writer replacing it waits for its uses to end.
    writer_->WaitIdle();
  }
  ASSIGN_OR_RETURN(SnapshotStore * store, writer_->Acquire(req.checkpoint()));
  absl::Cleanup release = [this, store] { writer_->Release(store); };
  // Each variable of the snapshot checked against this PS's before it is
  // allocated: a file cannot make a restore ask for more than the job's.
  absl::StatusOr<PsSnapshot> read = store->Read(req.step(), RestoreReadOptions(/*all_here=*/true));
  if (read.status().code() == absl::StatusCode::kDataLoss) {
    std::move(release).Invoke();
    writer_->Replace(store, /*salvage=*/true, /*wait_for_uses=*/true);
  }
  if (!read.ok()) return read.status();
  PsSnapshot snap = *std::move(read);
  RestoreResponse resp;
  {
    absl::MutexLock lock(&mu_);
    // Check that the snapshot and the variables here match one to one
    // before touching any.
    std::set<std::string> in_snapshot;
    for (const VariableState& st : snap.variables) {
      ASSIGN_OR_RETURN(Variable * v, Find(st.def.name()));
      RETURN_IF_ERROR(v->CheckState(st));
      const int num_slots = SlotsOf(v->def(), optimizer_->num_slots());
      if (st.slots.size() != static_cast<size_t>(num_slots)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "snapshot of step ", req.step(), " has ", st.slots.size(), " slots for ", st.def.name(),
            "; it has ", num_slots, " with the job's optimizer"));
      }
      in_snapshot.insert(st.def.name());
    }
    for (const auto& [name, v] : variables_) {
      if (!in_snapshot.count(name)) {
        return absl::DataLossError(absl::StrCat("snapshot of step ", req.step(), " in ", store->dir(),
                                                " lacks variable ", name));
      }
    }
    for (const VariableState& st : snap.variables) RETURN_IF_ERROR(variables_[st.def.name()]->LoadState(st));
    // The values and the generation change together, under the writer
    // lock: no push of the old generation lands after the restore.
    generation_ = req.generation();
    chain_ = DeltaChain();  // the restored state is no snapshot's base
    absl::MutexLock s(gate_.mu());
    ledger_.Clear();
    streams_.Reset(req.stream_next_batch());  // none for a checkpoint: its stream positions go on from here
    gate_.RestoreLocked(snap.step, snap.global_step, snap.sync_step, std::move(snap.worker_next_step));
    resp.set_step(req.step());
    resp.set_variables(static_cast<int64_t>(snap.variables.size()));
  }
  LOG(INFO) << "restored " << resp.variables() << " variables from the snapshot of step " << req.step();
  gate_.WakeWaiters();
  return resp;
}

absl::Status ParameterServerCore::CheckGeneration(int64_t generation, absl::string_view what) const {
  absl::ReaderMutexLock lock(&mu_);
  return CheckGenerationLocked(generation, what);
}

absl::Status ParameterServerCore::CheckGenerationLocked(int64_t generation, absl::string_view what) const {
  if (generation == generation_) return absl::OkStatus();
  stale_refused_.fetch_add(1, std::memory_order_relaxed);
  return absl::FailedPreconditionError(absl::StrCat(
      what, " of generation ", generation, " refused: ", PsName(options_.task_index), " is at generation ",
      generation_, " (restored or restarted since; wait for the chief)"));
}

void ParameterServerCore::ResetStepsLocked(int64_t step) {
  gate_.ResetLocked(step);
  ledger_.Clear();  // the same steps will be pushed again
}

PsStatusResponse ParameterServerCore::Status() {
  PsStatusResponse r;
  r.set_incarnation(options_.incarnation);
  r.set_state(STATE_SERVING);
  {
    absl::ReaderMutexLock lock(&mu_);
    r.set_generation(generation_);
    r.set_stale_generation_refused(stale_refused_.load(std::memory_order_relaxed));
    r.set_variables(static_cast<int64_t>(variables_.size()));
    int64_t bytes = 0, rows = 0;
    for (const auto& [name, v] : variables_) {
      bytes += v->bytes();
      rows += v->rows();
    }
    r.set_bytes(bytes);
    r.set_rows(rows);
  }
  {
    absl::MutexLock lock(gate_.mu());
    r.set_global_step(gate_.global_step());
    if (gate_.mode() == ConsistencyDef::SYNC) r.set_sync_step(gate_.sync_step());
    for (const auto& [stream, next] : streams_.next()) (*r.mutable_stream_next_batch())[stream] = next;
    for (const auto& [stream, batch] : streams_.InProgress()) (*r.mutable_stream_part_batch())[stream] = batch;
  }
  {
    absl::MutexLock lock(&stats_mu_);
    absl::Time now = absl::Now();
    double dt = absl::ToDoubleSeconds(now - last_stats_);
    if (dt > 0) {
      r.set_pushes_per_sec((pushes_ - last_pushes_) / dt);
      r.set_pulls_per_sec((pulls_ - last_pulls_) / dt);
    }
    if (dt > 1.0) {
      last_stats_ = now;
      last_pushes_ = pushes_;
      last_pulls_ = pulls_;
    }
  }
  writer_->AddStatus(&r);
  return r;
}

}  // namespace psrt
