#include "common/transport/ps_client.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/rpc/retry.h"
#include "common/rpc/status_util.h"
#include "common/transport/ps_stream.h"
#include "common/transport/ps_tcp_channel.h"
#include "common/transport/ps_types.h"
#include "common/transport/replica_header.h"
#include "common/status_macros.h"

namespace psrt {
namespace {

constexpr char kPull[] = "/psrt.ParameterServer/Pull";
constexpr char kPullRows[] = "/psrt.ParameterServer/PullRows";
constexpr char kPush[] = "/psrt.ParameterServer/Push";
constexpr char kPushRows[] = "/psrt.ParameterServer/PushRows";

// A call to a PS the chief gave up on (Abandon): ended in flight, or not sent.
absl::Status GivenUp(int ps, bool sent = true) {
  return absl::CancelledError(
      absl::StrCat("ps:", ps, " was given up on by the chief (a failover)", sent ? "" : ": call not sent"));
}

}  // namespace

absl::StatusOr<PsTransport> ParsePsTransport(absl::string_view name) {
  if (name == "unary") return PsTransport::kUnary;
  if (name == "stream") return PsTransport::kStream;
  if (name == "tcp") return PsTransport::kTcp;
  return absl::InvalidArgumentError(absl::StrCat("PS transport '", name, "': want tcp, stream or unary"));
}

PsClient::PsClient(const PlacementMap& placement, std::vector<std::string> ps_addresses,
                   ChannelCache* channels, PsClientOptions options)
    : options_(options), addresses_(std::move(ps_addresses)) {
  for (size_t i = 0; i < addresses_.size(); ++i) {
    stubs_.push_back(std::make_unique<grpc::GenericStub>(channels->Get(addresses_[i])));
    const std::string peer = absl::StrCat("ps:", i);
    if (options_.transport == PsTransport::kStream) {
      framed_.push_back(std::make_unique<PsStream>(channels->Get(addresses_[i]), peer));
      max_framed_bytes_ = kMaxStreamedBytes;
    } else if (options_.transport == PsTransport::kTcp) {
      framed_.push_back(std::make_unique<PsTcpChannel>(channels->Get(addresses_[i]), addresses_[i], peer));
      max_framed_bytes_ = kMaxTcpFramedBytes;
    }
  }
  std::set<int> used;
  for (const VariablePlacement& vp : placement.variable()) {
    placement_[vp.variable().name()] = vp;
    std::vector<Shard>& s = shards_[vp.variable().name()];
    for (const auto& sh : vp.shard()) {
      s.push_back({sh.ps_task(), sh.row_begin(), sh.row_end()});
      used.insert(sh.ps_task());
    }
    std::sort(s.begin(), s.end(), [](const Shard& a, const Shard& b) { return a.row_begin < b.row_begin; });
  }
  used_ps_.assign(used.begin(), used.end());
}

void PsClient::SetRoute(const ReplicaRoute& route) {
  {
    absl::MutexLock lock(&route_mu_);
    route_ = route;
  }
  absl::MutexLock lock(&inflight_mu_);
  abandoned_.clear();
}

void PsClient::Abandon(const std::vector<int>& ps_tasks) {
  absl::MutexLock lock(&inflight_mu_);
  for (int t : ps_tasks) {
    abandoned_.insert(t);
    // The callbacks never take inflight_mu_, so cancelling under it is safe
    // whichever thread they run on; CallAll unlists a context before it goes.
    for (auto [it, end] = inflight_.equal_range(t); it != end; ++it) it->second->TryCancel();
    // Framed ones end here (a late answer finds them gone).
    for (auto [it, end] = inflight_framed_.equal_range(t); it != end; ++it) {
      it->second.first->Expire(it->second.second, GivenUp(t));
    }
  }
}

std::unique_ptr<PsClient::Pending> PsClient::StartCalls(
    const std::vector<std::pair<int, std::pair<std::string, grpc::ByteBuffer>>>& calls) {
  ReplicaRoute route;
  {
    absl::MutexLock lock(&route_mu_);
    route = route_;
  }
  auto p = std::make_unique<Pending>();
  // Unary calls end by their own deadline; streamed ones are ended by
  // WaitCalls when it passes (a little later, so that the unary deadline,
  // which started first, fires first when both are out).
  p->deadline = absl::Now() + options_.timeout + absl::Milliseconds(50);
  // calls[i].first is a store; the task serving it, by the route.
  p->task.resize(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    const int store = calls[i].first;
    p->task[i] = route.epoch() > 0 && store < route.store_task_size() ? route.store_task(store) : store;
    if (p->task[i] < 0 || p->task[i] >= static_cast<int>(stubs_.size())) p->task[i] = store;
    p->methods.push_back(calls[i].second.first);
  }
  const std::shared_ptr<Pending::Waiter>& w = p->w;
  {
    absl::MutexLock lock(&w->mu);
    w->left = calls.size();
    w->out.assign(calls.size(), absl::UnknownError("not answered"));
  }
  // Data calls go as frames of the PS's TCP connection or stream (up to
  // max_framed_bytes_: see kMaxStreamedBytes); larger ones and control
  // calls as unary calls. A replicated job's calls name their store and
  // epoch: in the TCP frame, or as a unary call's metadata where the channel
  // cannot carry them (the gRPC stream); a failover abandons them (Abandon).
  p->unary.resize(calls.size());
  p->streamed.assign(calls.size(), {nullptr, 0});
  for (size_t i = 0; i < calls.size(); ++i) {
    const int ps = p->task[i];
    const std::string& method = calls[i].second.first;
    const grpc::ByteBuffer& request = calls[i].second.second;
    psframe::Method m;
    const bool routed = route.epoch() > 0;
    if (!framed_.empty() && request.Length() <= max_framed_bytes_ && psframe::MethodFromPath(method, &m) &&
        (!routed || framed_[ps]->CanRoute())) {
      auto done = [w, i](absl::StatusOr<grpc::ByteBuffer> r) {
        absl::MutexLock lock(&w->mu);
        w->out[i] = std::move(r);
        --w->left;
      };
      CallRoute cr;
      if (routed) {
        cr.store = calls[i].first;
        cr.epoch = route.epoch();
        absl::MutexLock lock(&inflight_mu_);
        if (abandoned_.count(ps) > 0) {
          done(GivenUp(ps, /*sent=*/false));
          continue;
        }
      }
      PsCallChannel* channel = framed_[ps].get();
      const uint64_t id = channel->Start(m, request, options_.timeout, cr, std::move(done));
      p->streamed[i] = {channel, id};
      if (routed) {
        absl::MutexLock lock(&inflight_mu_);
        if (abandoned_.count(ps) > 0) {
          channel->Expire(id, GivenUp(ps));  // Abandon came while it was being sent
        } else {
          inflight_framed_.emplace(ps, std::make_pair(channel, id));
        }
      }
      continue;
    }
    p->unary[i] = std::make_unique<Pending::Unary>();
    Pending::Unary* u = p->unary[i].get();
    SetDeadline(&u->ctx, options_.timeout);
    if (route.epoch() > 0) AddReplicaHeader(&u->ctx, calls[i].first, route.epoch());
    {
      absl::MutexLock lock(&inflight_mu_);
      if (abandoned_.count(ps) > 0) {
        absl::MutexLock wl(&w->mu);
        w->out[i] = GivenUp(ps, /*sent=*/false);
        --w->left;
        p->unary[i].reset();
        continue;
      }
      inflight_.emplace(ps, &u->ctx);
    }
    stubs_[ps]->UnaryCall(&u->ctx, method, grpc::StubOptions(), &request, &u->response,
                          [w, i, u, ps, name = method.substr(method.rfind('/') + 1)](grpc::Status s) {
                            absl::MutexLock lock(&w->mu);
                            if (s.ok()) {
                              w->out[i] = std::move(u->response);
                            } else {
                              w->out[i] = FromGrpcStatus(s, absl::StrCat("ps:", ps), name);
                            }
                            --w->left;
                          });
  }
  return p;
}

std::vector<absl::StatusOr<grpc::ByteBuffer>> PsClient::WaitCalls(Pending* p) {
  const std::shared_ptr<Pending::Waiter>& w = p->w;
  w->mu.Lock();
  auto all = [&w]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu) { return w->left == 0; };
  if (!w->mu.AwaitWithDeadline(absl::Condition(&all), p->deadline)) {
    w->mu.Unlock();
    for (size_t i = 0; i < p->streamed.size(); ++i) {
      if (p->streamed[i].first == nullptr) continue;
      const std::string& method = p->methods[i];
      p->streamed[i].first->Expire(p->streamed[i].second,
                                   absl::DeadlineExceededError(absl::StrCat(
                                       "ps:", p->task[i], ": ", method.substr(method.rfind('/') + 1),
                                       ": Deadline Exceeded (no answer within ",
                                       absl::FormatDuration(options_.timeout), ")")));
    }
    w->mu.Lock();
    w->mu.Await(absl::Condition(&all));  // unary deadlines, and callbacks already running
  }
  w->mu.Unlock();  // before inflight_mu_: Abandon takes it first, then (a callback) w->mu
  {
    absl::MutexLock unlist(&inflight_mu_);
    for (size_t i = 0; i < p->streamed.size(); ++i) {
      if (p->streamed[i].first == nullptr) continue;
      for (auto [it, end] = inflight_framed_.equal_range(p->task[i]); it != end; ++it) {
        if (it->second == p->streamed[i]) {
          inflight_framed_.erase(it);
          break;
        }
      }
    }
    for (size_t i = 0; i < p->unary.size(); ++i) {
      if (p->unary[i] == nullptr) continue;
      for (auto [it, end] = inflight_.equal_range(p->task[i]); it != end; ++it) {
        if (it->second == &p->unary[i]->ctx) {
          inflight_.erase(it);
          break;
        }
      }
    }
  }
  absl::MutexLock lock(&w->mu);
  return std::move(w->out);
}

std::vector<absl::StatusOr<grpc::ByteBuffer>> PsClient::CallAll(
    const std::vector<std::pair<int, std::pair<std::string, grpc::ByteBuffer>>>& calls) {
  std::unique_ptr<Pending> p = StartCalls(calls);
  return WaitCalls(p.get());
}

absl::StatusOr<grpc::ByteBuffer> PsClient::Call(int ps, const std::string& method,
                                                const grpc::ByteBuffer& request) {
  std::vector<std::pair<int, std::pair<std::string, grpc::ByteBuffer>>> calls;
  calls.push_back({ps, {method, request}});
  return std::move(CallAll(calls)[0]);
}

absl::StatusOr<TensorMap> PsClient::Pull(const std::vector<std::string>& variables, int64_t step) {
  std::map<int, pswire::PullArgs> per_ps;
  for (const std::string& v : variables) {
    auto it = shards_.find(v);
    if (it == shards_.end()) return absl::NotFoundError(absl::StrCat("variable ", v, " is not in the placement"));
    for (const Shard& s : it->second) per_ps[s.ps].variables.push_back(v);
  }
  // SYNC and bounded staleness wait on every PS the worker uses, so pull
  // from each even when it holds none of these (an empty pull).
  for (int ps : used_ps_) per_ps[ps];
  std::vector<std::pair<int, std::pair<std::string, grpc::ByteBuffer>>> calls;
  for (auto& [ps, args] : per_ps) {
    args.worker = options_.worker;
    args.step = step;
    args.generation = generation_;
    calls.push_back({ps, {kPull, pswire::EncodePull(args)}});
  }
  auto responses = CallAll(calls);
  std::map<std::pair<std::string, int>, Tensor> parts;  // (variable, ps) -> slice
  for (size_t i = 0; i < calls.size(); ++i) {
    if (!responses[i].ok()) return responses[i].status();
    ASSIGN_OR_RETURN(pswire::PullResult r, pswire::DecodePullResult(*responses[i], pool_->Allocator(), /*adopt_aligned=*/true));
    for (auto& [name, t] : r.tensors) parts[{name, calls[i].first}] = std::move(t);
  }
  TensorMap out;
  for (const std::string& v : variables) {
    const std::vector<Shard>& shards = shards_[v];
    ASSIGN_OR_RETURN(TensorShape shape, TensorShape::FromProto(placement_[v].variable().shape()));
    // What a PS answers is checked before a byte is copied: a slice of the
    // wrong type or size would overflow the joined tensor.
    const int64_t rows = shape.rank() > 0 ? shape.dim(0) : 1;
    const int64_t row_bytes = rows > 0 ? shape.num_elements() * static_cast<int64_t>(sizeof(float)) / rows : 0;
    // (A single shard is handed over as it came, with nothing copied: a
    // placement that declares no shape, as tools and tests write, is
    // trusted there.)
    const bool declared = placement_[v].variable().has_shape() || shards.size() > 1;
    for (const Shard& s : shards) {
      if (!declared) break;
      const Tensor& part = parts[{v, s.ps}];
      const int64_t expected = shards.size() == 1 ? shape.num_elements() * static_cast<int64_t>(sizeof(float))
                                                  : (s.row_end - s.row_begin) * row_bytes;
      if (!part.IsValid() || part.dtype() != DT_FLOAT || static_cast<int64_t>(part.TotalBytes()) != expected) {
        return absl::DataLossError(absl::StrCat("ps:", s.ps, " answered ", v, " with ",
                                                part.IsValid() ? absl::StrCat(DataTypeName(part.dtype()), part.shape().ToString())
                                                               : std::string("nothing"),
                                                ", not its ", expected, " bytes of float32"));
      }
    }
    if (shards.size() == 1) {
      out[v] = parts[{v, shards[0].ps}];
      if (declared && out[v].shape() != shape) {
        return absl::DataLossError(absl::StrCat("ps:", shards[0].ps, " answered ", v, " with shape ",
                                                out[v].shape().ToString(), ", not ", shape.ToString()));
      }
      continue;
    }
    Tensor whole(DT_FLOAT, shape);
    size_t offset = 0;
    for (const Shard& s : shards) {
      const Tensor& part = parts[{v, s.ps}];
      std::memcpy(static_cast<char*>(whole.raw_data()) + offset, part.raw_data(), part.TotalBytes());
      offset += part.TotalBytes();
    }
    out[v] = std::move(whole);
  }
  return out;
}

absl::StatusOr<std::vector<int>> PsClient::Route(const std::string& variable, const Tensor& ids) const {
  auto it = shards_.find(variable);
  if (it == shards_.end()) return absl::NotFoundError(absl::StrCat("variable ", variable, " is not in the placement"));
  const std::vector<Shard>& shards = it->second;
  const bool hash = placement_.at(variable).variable().kind() == VariableDef::HASH_TABLE;
  std::vector<int> route(ids.NumElements());
  for (int64_t i = 0; i < ids.NumElements(); ++i) {
    int64_t id = ids.data<int64_t>()[i];
    if (hash || shards.size() == 1) {
      route[i] = HashShardOf(id, static_cast<int>(shards.size()));
      continue;
    }
    auto s = std::upper_bound(shards.begin(), shards.end(), id,
                              [](int64_t v, const Shard& sh) { return v < sh.row_begin; });
    route[i] = static_cast<int>(std::max<ptrdiff_t>(0, (s - shards.begin()) - 1));
  }
  return route;
}

absl::StatusOr<TensorMap> PsClient::PullRows(const RowRequest& rows, int64_t step) {
  // Per variable: which shard each id goes to, and its position there.
  struct Plan {
    std::vector<int> route;
    std::vector<int64_t> position;
    std::vector<std::vector<int64_t>> per_shard;
  };
  std::map<std::string, Plan> plans;
  std::map<int, pswire::PullRowsArgs> per_ps;
  for (const auto& [v, ids] : rows) {
    Plan& p = plans[v];
    ASSIGN_OR_RETURN(p.route, Route(v, ids));
    p.per_shard.resize(shards_[v].size());
    for (int64_t i = 0; i < ids.NumElements(); ++i) {
      std::vector<int64_t>& bucket = p.per_shard[p.route[i]];
      p.position.push_back(static_cast<int64_t>(bucket.size()));
      bucket.push_back(ids.data<int64_t>()[i]);
    }
    for (size_t s = 0; s < p.per_shard.size(); ++s) {
      if (p.per_shard[s].empty()) continue;
      int64_t n = static_cast<int64_t>(p.per_shard[s].size());
      per_ps[shards_[v][s].ps].ids.emplace_back(v, Tensor::FromVector<int64_t>(p.per_shard[s], TensorShape({n})));
    }
  }
  std::vector<std::pair<int, std::pair<std::string, grpc::ByteBuffer>>> calls;
  for (auto& [ps, args] : per_ps) {
    args.worker = options_.worker;
    args.step = step;
    args.generation = generation_;
    args.read_only = options_.read_only_rows;
    calls.push_back({ps, {kPullRows, pswire::EncodePullRows(args)}});
  }
  auto responses = CallAll(calls);
  std::map<std::pair<std::string, int>, Tensor> parts;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (!responses[i].ok()) return responses[i].status();
    ASSIGN_OR_RETURN(pswire::PullResult r, pswire::DecodePullResult(*responses[i], pool_->Allocator(), /*adopt_aligned=*/true));
    for (auto& [name, t] : r.tensors) parts[{name, calls[i].first}] = std::move(t);
  }
  TensorMap out;
  for (const auto& [v, ids] : rows) {
    const Plan& p = plans[v];
    int64_t dim = placement_[v].variable().shape().dim(1);
    for (size_t s = 0; s < p.per_shard.size(); ++s) {
      if (p.per_shard[s].empty()) continue;
      const Tensor& part = parts[{v, shards_[v][s].ps}];
      const int64_t n = static_cast<int64_t>(p.per_shard[s].size());
      if (!part.IsValid() || part.dtype() != DT_FLOAT || part.shape() != TensorShape({n, dim})) {
        return absl::DataLossError(absl::StrCat("ps:", shards_[v][s].ps, " answered ", n, " rows of ", v, " with ",
                                                part.IsValid() ? absl::StrCat(DataTypeName(part.dtype()), part.shape().ToString())
                                                               : std::string("nothing"),
                                                ", not float32[", n, ",", dim, "]"));
      }
    }
    Tensor result(DT_FLOAT, TensorShape({ids.NumElements(), dim}));
    for (int64_t i = 0; i < ids.NumElements(); ++i) {
      const Tensor& part = parts[{v, shards_[v][p.route[i]].ps}];
      std::memcpy(result.data<float>() + i * dim, part.data<float>() + p.position[i] * dim, dim * sizeof(float));
    }
    out[v] = std::move(result);
  }
  return out;
}

absl::Status PsClient::RouteDense(const std::string& v, const Tensor& grad,
                                  std::map<int, pswire::PushArgs>* per_ps) const {
  auto it = shards_.find(v);
  if (it == shards_.end()) return absl::NotFoundError(absl::StrCat("variable ", v, " is not in the placement"));
  if (it->second.size() == 1) {
    (*per_ps)[it->second[0].ps].gradients.emplace_back(v, grad);
    return absl::OkStatus();
  }
  for (const Shard& s : it->second) {
    (*per_ps)[s.ps].gradients.emplace_back(v, grad.Slice(s.row_begin, s.row_end));  // a view, no copy
  }
  return absl::OkStatus();
}

absl::Status PsClient::RouteSparse(const std::map<std::string, std::pair<Tensor, Tensor>>& sparse,
                                   std::map<int, pswire::PushArgs>* per_ps) const {
  for (const auto& [v, ids_values] : sparse) {
    const auto& [ids, values] = ids_values;
    ASSIGN_OR_RETURN(std::vector<int> route, Route(v, ids));
    const std::vector<Shard>& shards = shards_.at(v);
    int64_t dim = values.shape().dim(1);
    std::vector<std::vector<int64_t>> shard_ids(shards.size());
    std::vector<std::vector<float>> shard_vals(shards.size());
    for (int64_t i = 0; i < ids.NumElements(); ++i) {
      shard_ids[route[i]].push_back(ids.data<int64_t>()[i]);
      shard_vals[route[i]].insert(shard_vals[route[i]].end(), values.data<float>() + i * dim,
                                  values.data<float>() + (i + 1) * dim);
    }
    for (size_t s = 0; s < shard_ids.size(); ++s) {
      if (shard_ids[s].empty()) continue;
      int64_t n = static_cast<int64_t>(shard_ids[s].size());
      (*per_ps)[shards[s].ps].rows.push_back({v, Tensor::FromVector<int64_t>(shard_ids[s], TensorShape({n})),
                                              Tensor::FromVector<float>(shard_vals[s], TensorShape({n, dim}))});
    }
  }
  return absl::OkStatus();
}

absl::Status PsClient::CheckPushAnswer(int ps, const RequestId& id, bool with_rows,
                                       const absl::StatusOr<grpc::ByteBuffer>& answer) {
  RETURN_IF_ERROR(answer.status());
  if (!with_rows) return absl::OkStatus();
  ASSIGN_OR_RETURN(PushResponse r, pswire::DecodePushResult(*answer));
  // A PS that predates rows in a Push ignored them: say so rather than
  // train on without them.
  if (!r.rows_taken() && !r.duplicate()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ps:", ps, " did not take the rows sent with the push of step ", id.step(),
        ": it is older than this worker; run the same psrt version on every task"));
  }
  return absl::OkStatus();
}

absl::Status PsClient::Push(const RequestId& id, const TensorMap& dense,
                            const std::map<std::string, std::pair<Tensor, Tensor>>& sparse) {
  std::map<int, pswire::PushArgs> per_ps;
  for (int ps : used_ps_) per_ps[ps];  // every PS counts this worker's step
  for (const auto& [v, grad] : dense) RETURN_IF_ERROR(RouteDense(v, grad, &per_ps));
  // One call per PS for the whole step: the rows travel in the Push.
  RETURN_IF_ERROR(RouteSparse(sparse, &per_ps));
  std::vector<std::pair<int, std::pair<std::string, grpc::ByteBuffer>>> calls;
  std::vector<bool> with_rows;
  for (auto& [ps, args] : per_ps) {
    args.id = id;
    calls.push_back({ps, {kPush, pswire::EncodePush(args)}});
    with_rows.push_back(!args.rows.empty());
  }
  std::vector<absl::StatusOr<grpc::ByteBuffer>> answers = CallAll(calls);
  for (size_t i = 0; i < answers.size(); ++i) {
    RETURN_IF_ERROR(CheckPushAnswer(calls[i].first, id, with_rows[i], answers[i]));
  }
  return absl::OkStatus();
}

}  // namespace psrt
