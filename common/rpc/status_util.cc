#include "common/rpc/status_util.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace psrt {

// Both enumerations use the canonical code numbers 0..16.
grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

absl::Status FromGrpcStatus(const grpc::Status& s, absl::string_view peer,
                            absl::string_view method) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(peer, ": ", method, ": ", s.error_message()));
}

}  // namespace psrt
