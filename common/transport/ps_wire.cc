#include "common/transport/ps_wire.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace psrt {
namespace pswire {
namespace {

using wire::Reader;
using wire::Writer;

uint64_t Signed(int64_t v) { return static_cast<uint64_t>(v); }

size_t RequestIdSize(const RequestId& id) {
  size_t n = 0;
  if (id.worker() != 0) n += 1 + wire::VarintSize(Signed(id.worker()));
  if (id.worker_incarnation() != 0) n += 1 + 8;
  if (id.step() != 0) n += 1 + wire::VarintSize(Signed(id.step()));
  if (id.generation() != 0) n += 1 + wire::VarintSize(Signed(id.generation()));
  if (id.bucket() != 0) n += 1 + wire::VarintSize(Signed(id.bucket()));
  if (id.last_bucket()) n += 1 + 1;
  if (id.has_data()) n += 1 + 1;
  if (id.data_stream() != 0) n += 1 + wire::VarintSize(Signed(id.data_stream()));
  if (id.data_batch() != 0) n += 1 + wire::VarintSize(Signed(id.data_batch()));
  return n;
}

void WriteRequestId(Writer* w, uint32_t field, const RequestId& id) {
  w->Message(field, RequestIdSize(id));
  if (id.worker() != 0) w->Varint(1, Signed(id.worker()));
  if (id.worker_incarnation() != 0) w->Fixed64(2, id.worker_incarnation());
  if (id.step() != 0) w->Varint(3, Signed(id.step()));
  if (id.generation() != 0) w->Varint(4, Signed(id.generation()));
  if (id.bucket() != 0) w->Varint(5, Signed(id.bucket()));
  if (id.last_bucket()) w->Varint(6, 1);
  if (id.has_data()) w->Varint(7, 1);
  if (id.data_stream() != 0) w->Varint(8, Signed(id.data_stream()));
  if (id.data_batch() != 0) w->Varint(9, Signed(id.data_batch()));
}

absl::Status ReadRequestId(Reader* r, RequestId* id) {
  if (!r->EnterMessage()) return r->status();
  uint32_t f;
  int t;
  uint64_t v;
  while (r->Next(&f, &t)) {
    if (f == 1 && t == wire::kVarint && r->ReadVarint(&v)) {
      id->set_worker(static_cast<int32_t>(v));
    } else if (f == 2 && t == wire::kFixed64 && r->ReadFixed64(&v)) {
      id->set_worker_incarnation(v);
    } else if (f == 3 && t == wire::kVarint && r->ReadVarint(&v)) {
      id->set_step(static_cast<int64_t>(v));
    } else if (f == 4 && t == wire::kVarint && r->ReadVarint(&v)) {
      id->set_generation(static_cast<int64_t>(v));
    } else if (f == 5 && t == wire::kVarint && r->ReadVarint(&v)) {
      id->set_bucket(static_cast<int32_t>(v));
    } else if (f == 6 && t == wire::kVarint && r->ReadVarint(&v)) {
      id->set_last_bucket(v != 0);
    } else if (f == 7 && t == wire::kVarint && r->ReadVarint(&v)) {
      id->set_has_data(v != 0);
    } else if (f == 8 && t == wire::kVarint && r->ReadVarint(&v)) {
      id->set_data_stream(static_cast<int32_t>(v));
    } else if (f == 9 && t == wire::kVarint && r->ReadVarint(&v)) {
      id->set_data_batch(static_cast<int64_t>(v));
    } else if (!r->Skip(t)) {
      break;
    }
  }
  r->LeaveMessage();
  return r->status();
}

absl::Status Finish(const Reader& r, absl::string_view what) {
  if (r.status().ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", r.status().message()));
}

}  // namespace

grpc::ByteBuffer EncodePull(const PullArgs& a) {
  Writer w;
  for (const auto& v : a.variables) w.String(1, v);
  if (a.worker != 0) w.Varint(2, Signed(a.worker));
  if (a.step != 0) w.Varint(3, Signed(a.step));
  if (a.generation != 0) w.Varint(4, Signed(a.generation));
  return w.Finish();
}

static absl::StatusOr<PullArgs> DecodePullInner(const grpc::ByteBuffer& b) {
  Reader r(b);
  PullArgs a;
  uint32_t f;
  int t;
  uint64_t v;
  while (r.Next(&f, &t)) {
    if (f == 1 && t == wire::kLengthDelimited) {
      a.variables.emplace_back();
      if (!r.ReadString(&a.variables.back())) break;
    } else if (f == 2 && t == wire::kVarint && r.ReadVarint(&v)) {
      a.worker = static_cast<int32_t>(v);
    } else if (f == 3 && t == wire::kVarint && r.ReadVarint(&v)) {
      a.step = static_cast<int64_t>(v);
    } else if (f == 4 && t == wire::kVarint && r.ReadVarint(&v)) {
      a.generation = static_cast<int64_t>(v);
    } else if (!r.Skip(t)) {
      break;
    }
  }
  RETURN_IF_ERROR(Finish(r, "PullRequest"));
  return a;
}

grpc::ByteBuffer EncodePullRows(const PullRowsArgs& a) {
  Writer w;
  for (const auto& [name, ids] : a.ids) {
    size_t body = wire::MessageFieldSize(1, name.size()) +
                  wire::MessageFieldSize(2, wire::TensorProtoSize(ids));
    w.Message(1, body);
    w.String(1, name);
    w.Tensor(2, ids);
  }
  if (a.worker != 0) w.Varint(2, Signed(a.worker));
  if (a.step != 0) w.Varint(3, Signed(a.step));
  if (a.generation != 0) w.Varint(4, Signed(a.generation));
  if (a.read_only) w.Varint(5, 1);
  return w.Finish();
}

static absl::StatusOr<PullRowsArgs> DecodePullRowsInner(const grpc::ByteBuffer& b) {
  Reader r(b);
  PullRowsArgs a;
  uint32_t f;
  int t;
  uint64_t v;
  while (r.Next(&f, &t)) {
    if (f == 1 && t == wire::kLengthDelimited) {
      if (!r.EnterMessage()) break;
      std::pair<std::string, Tensor> entry;
      uint32_t g;
      int u;
      while (r.Next(&g, &u)) {
        if (g == 1 && u == wire::kLengthDelimited) {
          if (!r.ReadString(&entry.first)) break;
        } else if (g == 2 && u == wire::kLengthDelimited) {
          ASSIGN_OR_RETURN(entry.second, r.ReadTensor());
        } else if (!r.Skip(u)) {
          break;
        }
      }
      r.LeaveMessage();
      // An entry without ids would reach the server as an invalid tensor
      // (found by tests/fuzz/ps_request_fuzzer).
      if (r.status().ok() && !entry.second.IsValid()) {
        return absl::InvalidArgumentError(
            absl::StrCat("PullRowsRequest: variable '", entry.first, "' has no ids tensor"));
      }
      a.ids.push_back(std::move(entry));
    } else if (f == 2 && t == wire::kVarint && r.ReadVarint(&v)) {
      a.worker = static_cast<int32_t>(v);
    } else if (f == 3 && t == wire::kVarint && r.ReadVarint(&v)) {
      a.step = static_cast<int64_t>(v);
    } else if (f == 4 && t == wire::kVarint && r.ReadVarint(&v)) {
      a.generation = static_cast<int64_t>(v);
    } else if (f == 5 && t == wire::kVarint && r.ReadVarint(&v)) {
      a.read_only = v != 0;
    } else if (!r.Skip(t)) {
      break;
    }
  }
  RETURN_IF_ERROR(Finish(r, "PullRowsRequest"));
  return a;
}

grpc::ByteBuffer EncodePullResult(const PullResult& res) {
  Writer w;
  for (const auto& [name, t] : res.tensors) w.NamedTensor(1, name, t);
  if (res.global_step != 0) w.Varint(2, Signed(res.global_step));
  if (res.incarnation != 0) w.Fixed64(3, res.incarnation);
  return w.Finish();
}

static absl::StatusOr<PullResult> DecodePullResultInner(const grpc::ByteBuffer& b,
                                            wire::Reader::Allocator allocator, bool adopt_aligned) {
  Reader r(b);
  if (allocator) r.set_allocator(std::move(allocator));
  r.set_adopt_aligned(adopt_aligned);
  PullResult res;
  uint32_t f;
  int t;
  uint64_t v;
  while (r.Next(&f, &t)) {
    if (f == 1 && t == wire::kLengthDelimited) {
      ASSIGN_OR_RETURN(auto nt, r.ReadNamedTensor());
      res.tensors.push_back(std::move(nt));
    } else if (f == 2 && t == wire::kVarint && r.ReadVarint(&v)) {
      res.global_step = static_cast<int64_t>(v);
    } else if (f == 3 && t == wire::kFixed64 && r.ReadFixed64(&v)) {
      res.incarnation = v;
    } else if (!r.Skip(t)) {
      break;
    }
  }
  RETURN_IF_ERROR(Finish(r, "PullResponse"));
  return res;
}

// A SparseGradient (variable, ids, values) as field `field`.
static void WriteSparseGradient(Writer* w, uint32_t field, const SparseUpdate& u) {
  size_t body = wire::MessageFieldSize(1, u.variable.size()) + wire::MessageFieldSize(2, wire::TensorProtoSize(u.ids)) +
                wire::MessageFieldSize(3, wire::TensorProtoSize(u.values));
  w->Message(field, body);
  w->String(1, u.variable);
  w->Tensor(2, u.ids);
  w->Tensor(3, u.values);
}

// The SparseGradient at the reader's position; `what` names the message.
static absl::StatusOr<SparseUpdate> ReadSparseGradient(Reader* r, absl::string_view what) {
  SparseUpdate u;
  if (!r->EnterMessage()) {
    return r->status().ok() ? absl::InvalidArgumentError(absl::StrCat(what, ": a malformed SparseGradient")) : r->status();
  }
  uint32_t g;
  int k;
  while (r->Next(&g, &k)) {
    if (g == 1 && k == wire::kLengthDelimited) {
      if (!r->ReadString(&u.variable)) break;
    } else if (g == 2 && k == wire::kLengthDelimited) {
      ASSIGN_OR_RETURN(u.ids, r->ReadTensor());
    } else if (g == 3 && k == wire::kLengthDelimited) {
      ASSIGN_OR_RETURN(u.values, r->ReadTensor());
    } else if (!r->Skip(k)) {
      break;
    }
  }
  r->LeaveMessage();
  if (r->status().ok() && (!u.ids.IsValid() || !u.values.IsValid())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": variable '", u.variable, "' needs both ids and values tensors"));
  }
  return u;
}

grpc::ByteBuffer EncodePush(const PushArgs& a) {
  Writer w;
  WriteRequestId(&w, 1, a.id);
  for (const auto& [name, t] : a.gradients) w.NamedTensor(2, name, t);
  for (const SparseUpdate& u : a.rows) WriteSparseGradient(&w, 3, u);
  return w.Finish();
}

static absl::StatusOr<PushArgs> DecodePushInner(const grpc::ByteBuffer& b, wire::Reader::Allocator allocator,
                                                bool adopt_aligned) {
  Reader r(b);
  if (allocator) r.set_allocator(std::move(allocator));
  r.set_adopt_aligned(adopt_aligned);
  PushArgs a;
  uint32_t f;
  int t;
  while (r.Next(&f, &t)) {
    if (f == 1 && t == wire::kLengthDelimited) {
      RETURN_IF_ERROR(ReadRequestId(&r, &a.id));
    } else if (f == 2 && t == wire::kLengthDelimited) {
      ASSIGN_OR_RETURN(auto nt, r.ReadNamedTensor());
      a.gradients.push_back(std::move(nt));
    } else if (f == 3 && t == wire::kLengthDelimited) {
      ASSIGN_OR_RETURN(SparseUpdate u, ReadSparseGradient(&r, "PushRequest"));
      if (!r.status().ok()) break;
      a.rows.push_back(std::move(u));
    } else if (!r.Skip(t)) {
      break;
    }
  }
  RETURN_IF_ERROR(Finish(r, "PushRequest"));
  return a;
}

grpc::ByteBuffer EncodePushRows(const PushRowsArgs& a) {
  Writer w;
  WriteRequestId(&w, 1, a.id);
  for (const SparseUpdate& u : a.rows) WriteSparseGradient(&w, 2, u);
  return w.Finish();
}

static absl::StatusOr<PushRowsArgs> DecodePushRowsInner(const grpc::ByteBuffer& b) {
  Reader r(b);
  PushRowsArgs a;
  uint32_t f;
  int t;
  while (r.Next(&f, &t)) {
    if (f == 1 && t == wire::kLengthDelimited) {
      RETURN_IF_ERROR(ReadRequestId(&r, &a.id));
    } else if (f == 2 && t == wire::kLengthDelimited) {
      ASSIGN_OR_RETURN(SparseUpdate u, ReadSparseGradient(&r, "PushRowsRequest"));
      if (!r.status().ok()) break;
      a.rows.push_back(std::move(u));
    } else if (!r.Skip(t)) {
      break;
    }
  }
  RETURN_IF_ERROR(Finish(r, "PushRowsRequest"));
  return a;
}

grpc::ByteBuffer EncodePushResult(const PushResponse& res) {
  Writer w;
  if (res.global_step() != 0) w.Varint(1, Signed(res.global_step()));
  if (res.duplicate()) w.Varint(2, 1);
  if (res.rows_taken()) w.Varint(3, 1);
  return w.Finish();
}

absl::StatusOr<PushResponse> DecodePushResult(const grpc::ByteBuffer& b) {
  PushResponse res;
  if (!res.ParseFromString(wire::ToString(b))) {
    return absl::InvalidArgumentError("PushResponse: unparsable");
  }
  return res;
}

namespace {
template <typename T>
absl::StatusOr<T> Named(absl::StatusOr<T> r, absl::string_view what) {
  if (r.ok() || absl::StrContains(r.status().message(), what)) return r;
  return absl::Status(r.status().code(), absl::StrCat(what, ": ", r.status().message()));
}
}  // namespace

absl::StatusOr<PullArgs> DecodePull(const grpc::ByteBuffer& b) {
  return Named(DecodePullInner(b), "PullRequest");
}
absl::StatusOr<PullRowsArgs> DecodePullRows(const grpc::ByteBuffer& b) {
  return Named(DecodePullRowsInner(b), "PullRowsRequest");
}
absl::StatusOr<PullResult> DecodePullResult(const grpc::ByteBuffer& b, wire::Reader::Allocator allocator,
                                            bool adopt_aligned) {
  return Named(DecodePullResultInner(b, std::move(allocator), adopt_aligned), "PullResponse");
}
absl::StatusOr<PushArgs> DecodePush(const grpc::ByteBuffer& b, wire::Reader::Allocator allocator,
                                    bool adopt_aligned) {
  return Named(DecodePushInner(b, std::move(allocator), adopt_aligned), "PushRequest");
}
absl::StatusOr<PushRowsArgs> DecodePushRows(const grpc::ByteBuffer& b) {
  return Named(DecodePushRowsInner(b), "PushRowsRequest");
}

}  // namespace pswire
}  // namespace psrt
