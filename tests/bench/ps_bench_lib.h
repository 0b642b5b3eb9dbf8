// The pieces of ps_bench: a load driver, the three servers it measures
// (ours, a plain protobuf gRPC service, a plain TCP exchange) and their
// clients. The servers listen on any address, so the same code measures on
// loopback and across network namespaces (ps_bench --netns).
#ifndef PSRT_TESTS_BENCH_PS_BENCH_LIB_H_
#define PSRT_TESTS_BENCH_PS_BENCH_LIB_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/store/ps_service.h"
#include "common/store/ps_tcp_server.h"
#include "common/store/server_core.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/server.h"
#include "proto/ps_service.grpc.pb.h"

namespace psrt {
namespace bench {

struct Figure {
  double ops_per_sec = 0;
  double mb_per_sec = 0;
};

// Integer gRPC channel arguments set on every server and client.
using ChannelArgs = std::vector<std::pair<std::string, int>>;

// Keeps `window` operations in flight on each of `clients` for `seconds`
// (and until at least two rounds completed), then lets them drain: the rate
// is every completed operation over the whole time. start(client, done)
// begins one operation and calls done() when it ends (from any thread).
Figure Drive(int clients, int window, double seconds, size_t bytes_per_op,
             const std::function<void(int, std::function<void()>)>& start);

std::shared_ptr<grpc::Channel> NewChannel(const std::string& address, const ChannelArgs& extra);
// Listens on host:0; the chosen port in *port.
std::unique_ptr<grpc::Server> StartServer(grpc::Service* service, const std::string& host, int* port,
                                          const ChannelArgs& extra);

// The MLP example's variables (examples/fashion_mnist_mlp.pbtxt: 784-256-128-10).
std::vector<std::pair<std::string, std::vector<int64_t>>> MlpVariables();

// Ours: the real ParameterServerCore behind PsServiceImpl, holding a dense
// variable "w<bytes>" of each size, the MLP's variables and a fixed table
// "emb" [100000, 64]; ASYNC, 2 workers.
class OursServer {
 public:
  OursServer(const std::vector<int64_t>& sizes, const OptimizerDef& optimizer, int apply_threads,
             const std::string& host, const ChannelArgs& extra);
  ~OursServer();
  static std::string Name(int64_t bytes);
  int port() const { return port_; }

 private:
  std::unique_ptr<ParameterServerCore> core_;
  std::unique_ptr<PsServiceImpl> service_;
  std::unique_ptr<PsTcpServer> tcp_;  // its TCP data plane, on another port of `host`
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// The baseline service: PushRequest / PullResponse carry the tensor as a
// protobuf `bytes` field, parsed and serialized by protobuf as usual;
// nothing is applied. A Pull of variable "N" answers N bytes.
class RawGrpcService final : public ParameterServer::CallbackService {
 public:
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* ctx, const PushRequest* req,
                                 PushResponse* resp) override;
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* ctx, const PullRequest* req,
                                 PullResponse* resp) override;
};

// Starts one generic unary call; `check` decodes the answer (a failed call
// or check ends the benchmark).
void StartGeneric(grpc::GenericStub* stub, const std::string& method, grpc::ByteBuffer request,
                  std::function<bool(const grpc::ByteBuffer&)> check, std::function<void()> done);

// One baseline call through the generated async stub; `req` outlives it.
template <typename Request, typename Response>
void StartRaw(void (ParameterServer::Stub::async_interface::*method)(
                  grpc::ClientContext*, const Request*, Response*, std::function<void(grpc::Status)>),
              ParameterServer::Stub* stub, const Request* req, std::function<void()> done) {
  struct Call {
    grpc::ClientContext ctx;
    Response resp;
  };
  auto call = std::make_shared<Call>();
  (stub->async()->*method)(&call->ctx, req, &call->resp, [call, done](grpc::Status s) {
    if (!s.ok()) LOG(FATAL) << "baseline call failed: " << s.error_message();
    done();
  });
}

// The plain TCP exchange's server: each connection first says (up, down)
// in 16 bytes, then each request of `up` bytes is answered by `down`.
class TcpServer {
 public:
  explicit TcpServer(const std::string& host);
  ~TcpServer();
  int port() const { return port_; }

 private:
  void AcceptLoop();
  int listener_ = -1;
  int port_ = 0;
  std::thread acceptor_;
  absl::Mutex mu_;
  std::vector<std::thread> connections_ ABSL_GUARDED_BY(mu_);
};

// A request of `up` bytes answered by `down` bytes over one TCP connection
// per client to host:port, `window` requests pipelined: the kernel's
// ceiling for the same exchange. `payload` bytes count for MB/s.
Figure RawTcp(const std::string& host, int port, int clients, int window, double seconds, size_t up,
              size_t down, size_t payload);

// The best of `repeats` runs of each of `measure` (interleaved, every
// other round in reverse order).
std::vector<Figure> Best(int repeats, const std::vector<std::function<Figure()>>& measure);

}  // namespace bench
}  // namespace psrt

#endif  // PSRT_TESTS_BENCH_PS_BENCH_LIB_H_
