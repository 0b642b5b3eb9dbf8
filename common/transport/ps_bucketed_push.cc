#include "common/transport/ps_bucketed_push.h"

#include "common/transport/ps_types.h"
#include "common/status_macros.h"

namespace psrt {
namespace {

constexpr char kPush[] = "/psrt.ParameterServer/Push";

}  // namespace

std::unique_ptr<BucketedPush> PsClient::StartBucketedPush(const RequestId& id, size_t bucket_bytes) {
  return std::make_unique<PsBucketedPush>(this, id, bucket_bytes);
}

PsBucketedPush::PsBucketedPush(PsClient* client, const RequestId& id, size_t bucket_bytes)
    : client_(client), id_(id), bucket_bytes_(bucket_bytes) {}

PsBucketedPush::~PsBucketedPush() { WaitAll().IgnoreError(); }

void PsBucketedPush::Add(const std::string& variable, const Tensor& gradient) {
  if (!error_.ok()) return;
  std::map<int, pswire::PushArgs> routed;
  error_ = client_->RouteDense(variable, gradient, &routed);
  if (!error_.ok()) return;
  for (auto& [ps, args] : routed) {
    pswire::PushArgs& mine = gathered_[ps];
    for (auto& g : args.gradients) {
      gathered_bytes_[ps] += g.second.TotalBytes();
      mine.gradients.push_back(std::move(g));
    }
    // The part before the last one the PS allows takes the rest in the last.
    if (gathered_bytes_[ps] >= bucket_bytes_ && parts_sent_[ps] < kMaxPushBuckets - 1) SendPart(ps, false);
  }
}

void PsBucketedPush::SendPart(int ps, bool last) {
  pswire::PushArgs args = std::move(gathered_[ps]);
  gathered_.erase(ps);
  gathered_bytes_.erase(ps);
  args.id = id_;
  args.id.set_bucket(++parts_sent_[ps]);
  args.id.set_last_bucket(last);
  const bool with_rows = !args.rows.empty();
  std::vector<std::pair<int, std::pair<std::string, grpc::ByteBuffer>>> calls;
  calls.push_back({ps, {kPush, pswire::EncodePush(args)}});
  sent_.push_back({ps, with_rows, client_->StartCalls(calls)});
}

absl::Status PsBucketedPush::Finish(const std::map<std::string, std::pair<Tensor, Tensor>>& sparse) {
  if (error_.ok()) error_ = client_->RouteSparse(sparse, &gathered_);
  if (!error_.ok()) {
    WaitAll().IgnoreError();  // no last part leaves: the PS never counts the step
    return error_;
  }
  for (int ps : client_->used_ps_) gathered_[ps];  // every PS counts this worker's step
  std::vector<int> targets;
  for (const auto& [ps, args] : gathered_) targets.push_back(ps);
  for (int ps : targets) SendPart(ps, true);
  return WaitAll();
}

absl::Status PsBucketedPush::WaitAll() {
  absl::Status first;
  for (Sent& s : sent_) {
    std::vector<absl::StatusOr<grpc::ByteBuffer>> answers = client_->WaitCalls(s.calls.get());
    absl::Status st = PsClient::CheckPushAnswer(s.ps, id_, s.with_rows, answers[0]);
    if (first.ok() && !st.ok()) first = st;
  }
  sent_.clear();
  return first;
}

}  // namespace psrt
