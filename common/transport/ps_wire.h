// The Push/Pull/PullRows/PushRows messages of proto/ps_service.proto, written
// and read with common/tensor_wire.h: tensor bytes are never copied on send
// and copied once on receive. Any protobuf implementation of the service
// reads and writes the same bytes (ps_wire_test.cc checks both ways).
#ifndef PSRT_COMMON_TRANSPORT_PS_WIRE_H_
#define PSRT_COMMON_TRANSPORT_PS_WIRE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tensor_wire.h"
#include "common/transport/ps_types.h"
#include "proto/ps_service.pb.h"

namespace psrt {
namespace pswire {

struct PullArgs {
  std::vector<std::string> variables;
  int worker = 0;
  int64_t step = 0;
  int64_t generation = 0;
};
struct PullRowsArgs {
  std::vector<std::pair<std::string, Tensor>> ids;
  int worker = 0;
  int64_t step = 0;
  int64_t generation = 0;
  bool read_only = false;  // PullRowsRequest.read_only
};
struct PullResult {
  NamedTensors tensors;
  int64_t global_step = 0;
  uint64_t incarnation = 0;
};
struct PushArgs {
  RequestId id;
  NamedTensors gradients;
  std::vector<SparseUpdate> rows;  // PushRequest.rows
};
struct PushRowsArgs {
  RequestId id;
  std::vector<SparseUpdate> rows;
};

grpc::ByteBuffer EncodePull(const PullArgs& a);
absl::StatusOr<PullArgs> DecodePull(const grpc::ByteBuffer& b);
grpc::ByteBuffer EncodePullRows(const PullRowsArgs& a);
absl::StatusOr<PullRowsArgs> DecodePullRows(const grpc::ByteBuffer& b);
// PullResponse and PullRowsResponse share their layout.
grpc::ByteBuffer EncodePullResult(const PullResult& r);
// With `adopt_aligned`, large tensors lying aligned in one slice are
// referenced, not copied (wire::Reader::set_adopt_aligned): for received
// buffers that nothing writes to afterwards.
absl::StatusOr<PullResult> DecodePullResult(const grpc::ByteBuffer& b,
                                            wire::Reader::Allocator allocator = nullptr,
                                            bool adopt_aligned = false);
grpc::ByteBuffer EncodePush(const PushArgs& a);
absl::StatusOr<PushArgs> DecodePush(const grpc::ByteBuffer& b,
                                    wire::Reader::Allocator allocator = nullptr,
                                    bool adopt_aligned = false);
grpc::ByteBuffer EncodePushRows(const PushRowsArgs& a);
absl::StatusOr<PushRowsArgs> DecodePushRows(const grpc::ByteBuffer& b);
// PushResponse and PushRowsResponse share their layout.
grpc::ByteBuffer EncodePushResult(const PushResponse& r);
absl::StatusOr<PushResponse> DecodePushResult(const grpc::ByteBuffer& b);

}  // namespace pswire
}  // namespace psrt

#endif  // PSRT_COMMON_TRANSPORT_PS_WIRE_H_
