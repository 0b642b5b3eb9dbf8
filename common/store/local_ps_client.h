// LocalPsClient: the worker's ParameterClient over a ParameterServerCore in
// the same process — the in-process trainer's parameter server, running the
// very same variable, optimizer and consistency code as the daemon.
#ifndef PSRT_COMMON_STORE_LOCAL_PS_CLIENT_H_
#define PSRT_COMMON_STORE_LOCAL_PS_CLIENT_H_

#include "common/store/server_core.h"
#include "common/transport/parameter_client.h"

namespace psrt {

class LocalPsClient : public ParameterClient {
 public:
  // `core` is not owned.
  LocalPsClient(ParameterServerCore* core, int worker) : core_(core), worker_(worker) {}

  absl::StatusOr<TensorMap> Pull(const std::vector<std::string>& variables, int64_t step) override;
  absl::StatusOr<TensorMap> PullRows(const RowRequest& rows, int64_t step) override;
  absl::Status Push(const RequestId& id, const TensorMap& dense,
                    const std::map<std::string, std::pair<Tensor, Tensor>>& sparse) override;

 private:
  ParameterServerCore* const core_;
  const int worker_;
};

}  // namespace psrt

#endif  // PSRT_COMMON_STORE_LOCAL_PS_CLIENT_H_
