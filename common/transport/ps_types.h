// Plain types of the parameter-server contract that the PS, its clients
// and the wire encoding share.
#ifndef PSRT_COMMON_TRANSPORT_PS_TYPES_H_
#define PSRT_COMMON_TRANSPORT_PS_TYPES_H_

#include <string>
#include <utility>
#include <vector>

#include "common/tensor.h"

namespace psrt {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Rows of one sparse variable: a push applies `values[i]` to row `ids[i]`.
struct SparseUpdate {
  std::string variable;
  Tensor ids;     // int64 [n]
  Tensor values;  // [n, dim]
};

}  // namespace psrt

#endif  // PSRT_COMMON_TRANSPORT_PS_TYPES_H_
