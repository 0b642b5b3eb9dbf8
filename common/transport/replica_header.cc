#include "common/transport/replica_header.h"

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace psrt {
namespace {

constexpr char kStore[] = "psrt-store";
constexpr char kEpoch[] = "psrt-epoch";
constexpr char kReplica[] = "psrt-replica";

// The value of `key`, or nullopt-like empty with *found false.
absl::string_view Value(const grpc::ServerContextBase& ctx, const char* key, bool* found) {
  const auto& md = ctx.client_metadata();
  auto it = md.find(key);
  *found = it != md.end();
  return *found ? absl::string_view(it->second.data(), it->second.size()) : absl::string_view();
}

}  // namespace

void AddReplicaHeader(grpc::ClientContext* ctx, int store, int64_t epoch, bool replica) {
  ctx->AddMetadata(kStore, std::to_string(store));
  ctx->AddMetadata(kEpoch, std::to_string(epoch));
  if (replica) ctx->AddMetadata(kReplica, "1");
}

absl::StatusOr<ReplicaHeader> ReadReplicaHeader(const grpc::ServerContextBase& ctx) {
  ReplicaHeader h;
  bool has_store, has_epoch, has_replica;
  absl::string_view store = Value(ctx, kStore, &has_store);
  absl::string_view epoch = Value(ctx, kEpoch, &has_epoch);
  absl::string_view replica = Value(ctx, kReplica, &has_replica);
  if (!has_store && !has_epoch && !has_replica) return h;
  if (!has_store || !has_epoch) {
    return absl::InvalidArgumentError(absl::StrCat("metadata ", has_store ? kEpoch : kStore, " is missing (",
                                                   kStore, " and ", kEpoch, " come together)"));
  }
  if (!absl::SimpleAtoi(store, &h.store) || h.store < 0) {
    return absl::InvalidArgumentError(absl::StrCat("metadata ", kStore, " '", store, "' is not a store index"));
  }
  if (!absl::SimpleAtoi(epoch, &h.epoch) || h.epoch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("metadata ", kEpoch, " '", epoch, "' is not an epoch (>= 1)"));
  }
  if (has_replica && replica != "1") {
    return absl::InvalidArgumentError(absl::StrCat("metadata ", kReplica, " '", replica, "' is not 1"));
  }
  h.present = true;
  h.replica = has_replica;
  return h;
}

}  // namespace psrt
