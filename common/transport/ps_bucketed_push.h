// PsBucketedPush: PsClient's BucketedPush (parameter_client.h). Per PS it
// gathers the gradients handed to Add (slices of a partitioned variable go
// to their own PS) and, once they reach the bucket size, sends them as the
// next part of the step's push (RequestId.bucket 1, 2, ...) without
// waiting for the answer; Finish sends each PS its last part (what is left
// and the sparse rows, RequestId.last_bucket) and waits for all of them.
// The parts of a step are the same when the step is computed again (the
// backward pass makes the gradients in a fixed order), so a part retried
// after a failure is the one the PS may already hold and answers as a
// duplicate.
//
// One thread at a time; made by PsClient::StartBucketedPush, and must not
// outlive it.
#ifndef PSRT_COMMON_TRANSPORT_PS_BUCKETED_PUSH_H_
#define PSRT_COMMON_TRANSPORT_PS_BUCKETED_PUSH_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/transport/ps_client.h"

namespace psrt {

class PsBucketedPush : public BucketedPush {
 public:
  PsBucketedPush(PsClient* client, const RequestId& id, size_t bucket_bytes);
  ~PsBucketedPush() override;

  void Add(const std::string& variable, const Tensor& gradient) override;
  absl::Status Finish(const std::map<std::string, std::pair<Tensor, Tensor>>& sparse) override;

 private:
  struct Sent {
    int ps;
    bool with_rows;
    std::unique_ptr<PsClient::Pending> calls;
  };
  // Sends what is gathered for `ps` as its next part.
  void SendPart(int ps, bool last);
  // Waits for every part sent; the first failure (or OK).
  absl::Status WaitAll();

  PsClient* const client_;  // not owned
  const RequestId id_;
  const size_t bucket_bytes_;
  std::map<int, pswire::PushArgs> gathered_;  // per PS, not sent yet
  std::map<int, size_t> gathered_bytes_;
  std::map<int, int> parts_sent_;  // per PS
  std::vector<Sent> sent_;
  absl::Status error_;  // the first Add that failed
};

}  // namespace psrt

#endif  // PSRT_COMMON_TRANSPORT_PS_BUCKETED_PUSH_H_
