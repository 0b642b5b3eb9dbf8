// Plain types of the parameter-server contract that the PS, its clients
// and the wire encoding share.
#ifndef PSRT_COMMON_TRANSPORT_PS_TYPES_H_
#define PSRT_COMMON_TRANSPORT_PS_TYPES_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/tensor.h"

namespace psrt {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// The shard of a hash table that holds `id` when the table is split
// `shards` ways (VariableDef.hash_shard of hash_shards): workers route ids
// by it, a PS checks the rows it is given against it, and a restore onto
// another PS count re-shards by it. 0 for one shard or none.
inline int HashShardOf(int64_t id, int shards) {
  if (shards <= 1) return 0;
  const int64_t n = shards;
  return static_cast<int>(((id % n) + n) % n);
}

// Most parts one step's push to one PS may come in (RequestId.bucket): a
// client with more gradients than this puts the rest in the last part.
inline constexpr int kMaxPushBuckets = 4096;

// Rows of one sparse variable: a push applies `values[i]` to row `ids[i]`.
struct SparseUpdate {
  std::string variable;
  Tensor ids;     // int64 [n]
  Tensor values;  // [n, dim]
};

}  // namespace psrt

#endif  // PSRT_COMMON_TRANSPORT_PS_TYPES_H_
