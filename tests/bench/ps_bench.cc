// Parameter-server throughput on loopback, beside two baselines carrying the
// same bytes: a plain gRPC service whose messages hold a protobuf `bytes`
// field (what a straightforward implementation would do), and a plain TCP
// stream (the loopback ceiling).
//
//   bazel run //tests/bench:ps_bench -- [--seconds=0.4] [--sizes=4096,1048576,16777216]
//
// Ours is the real server: ParameterServerCore behind PsServiceImpl,
// applying SGD to an ASYNC variable on every push, and a client on the
// generic stub with ps_wire (what PsClient sends). Each figure is requests
// per second and MB/s (10^6 bytes of tensor content) with 1 or 16 requests
// in flight per client, and 1 or 2 clients (each its own TCP connection).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "common/buffer_pool.h"
#include "common/rpc/channel_cache.h"
#include "google/protobuf/text_format.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "common/store/ps_service.h"
#include "common/transport/ps_client.h"
#include "common/transport/ps_stream.h"
#include "common/transport/ps_wire.h"
#include "common/store/server_core.h"

ABSL_FLAG(double, seconds, 0.25, "Seconds per measurement.");
ABSL_FLAG(std::string, transport, "stream",
          "How ours travels: 'stream' (as PsClient: requests up to 1 MiB as frames of one "
          "ParameterServer/Exchange stream per client, larger ones unary) or 'unary' (one call each).");
ABSL_FLAG(std::string, channel_args, "",
          "Experiment: integer gRPC channel arguments NAME=VALUE,... set on the server and "
          "every client (e.g. grpc.http2.max_frame_size=1048576).");
ABSL_FLAG(int, repeats, 3,
          "Each figure is the best of this many measurements, ours and the baselines "
          "interleaved, so that load from other processes on a shared machine hurts less.");
ABSL_FLAG(std::string, sizes, "4096,1048576,16777216",
          "Dense tensor sizes in bytes (empty: sparse figures only).");

namespace psrt {
namespace {

using Clock = std::chrono::steady_clock;

struct Figure {
  double ops_per_sec = 0;
  double mb_per_sec = 0;
};

// Keeps `window` operations in flight on each of `clients` for `seconds`
// (and until at least two rounds completed), then lets them drain: the rate
// is every completed operation over the whole time. start(client, done)
// begins one operation and calls done() when it ends (from any thread).
Figure Drive(int clients, int window, double seconds, size_t bytes_per_op,
             const std::function<void(int, std::function<void()>)>& start) {
  absl::Mutex mu;
  int64_t completed = 0;
  int outstanding = clients * window;
  const int64_t min_ops = 2 * int64_t{clients} * window;
  const auto t0 = Clock::now();
  const auto until = t0 + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(seconds));
  std::function<void(int)> launch = [&](int client) {
    start(client, [&, client] {
      bool again;
      {
        absl::MutexLock lock(&mu);
        ++completed;
        again = completed + outstanding <= min_ops || Clock::now() < until;
        if (!again) --outstanding;
      }
      if (again) launch(client);
    });
  };
  for (int c = 0; c < clients; ++c) {
    for (int w = 0; w < window; ++w) launch(c);
  }
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(+[](int* n) { return *n == 0; }, &outstanding));
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  Figure f;
  f.ops_per_sec = completed / elapsed;
  f.mb_per_sec = f.ops_per_sec * bytes_per_op / 1e6;
  return f;
}

// --channel_args, parsed.
std::vector<std::pair<std::string, int>> ExtraArgs() {
  std::vector<std::pair<std::string, int>> out;
  for (absl::string_view kv : absl::StrSplit(absl::GetFlag(FLAGS_channel_args), ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
    int v = 0;
    CHECK(absl::SimpleAtoi(p.second, &v)) << "bad --channel_args entry " << kv;
    out.emplace_back(p.first, v);
  }
  return out;
}

std::shared_ptr<grpc::Channel> NewChannel(const std::string& address) {
  grpc::ChannelArguments args = ClientChannelArguments(RpcOptions());
  for (const auto& [name, v] : ExtraArgs()) args.SetInt(name, v);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

std::unique_ptr<grpc::Server> StartServer(grpc::Service* service, int* port) {
  grpc::ServerBuilder builder;
  ConfigureServerBuilder(RpcOptions(), &builder);
  for (const auto& [name, v] : ExtraArgs()) builder.AddChannelArgument(name, v);
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), port);
  builder.RegisterService(service);
  return builder.BuildAndStart();
}

// ---------------------------------------------------------------- ours

class Ours {
 public:
  explicit Ours(const std::vector<int64_t>& sizes) {
    ServerCoreOptions o;
    o.incarnation = 1;
    core_ = std::make_unique<ParameterServerCore>(o);
    CreateVariablesRequest req;
    for (int64_t bytes : sizes) {
      VariableDef* v = req.add_variable();
      v->set_name(Name(bytes));
      v->set_dtype(DT_FLOAT);
      v->mutable_shape()->add_dim(bytes / 4);
      v->mutable_initializer()->set_kind(InitializerDef::ZEROS);
    }
    VariableDef* e = req.add_variable();
    e->set_name("emb");
    e->set_kind(VariableDef::FIXED_TABLE);
    e->set_dtype(DT_FLOAT);
    e->mutable_shape()->add_dim(100000);
    e->mutable_shape()->add_dim(64);
    e->mutable_initializer()->set_kind(InitializerDef::ZEROS);
    req.mutable_optimizer()->mutable_sgd()->set_learning_rate(1e-6f);
    req.set_num_workers(2);
    absl::StatusOr<CreateVariablesResponse> created = core_->CreateVariables(req);
    CHECK(created.ok()) << created.status();
    service_ = std::make_unique<PsServiceImpl>(core_.get());
    server_ = StartServer(service_.get(), &port_);
    CHECK(server_ != nullptr);
  }
  ~Ours() { server_->Shutdown(); }

  static std::string Name(int64_t bytes) { return absl::StrCat("w", bytes); }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  std::unique_ptr<ParameterServerCore> core_;
  std::unique_ptr<PsServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

struct GenericCall {
  grpc::ClientContext ctx;
  grpc::ByteBuffer request;
  grpc::ByteBuffer response;
};

// Starts one generic unary call; `check` decodes the answer.
void StartGeneric(grpc::GenericStub* stub, const std::string& method, grpc::ByteBuffer request,
                  std::function<bool(const grpc::ByteBuffer&)> check, std::function<void()> done) {
  auto call = std::make_shared<GenericCall>();
  call->request = std::move(request);
  stub->UnaryCall(&call->ctx, method, grpc::StubOptions(), &call->request, &call->response,
                  [call, check = std::move(check), done = std::move(done)](grpc::Status s) {
                    if (!s.ok() || !check(call->response)) {
                      LOG(FATAL) << "benchmark call failed: " << s.error_message();
                    }
                    done();
                  });
}

// Ours as PsClient sends it (--transport): small requests as frames of the
// client's stream, the rest as unary calls.
struct OurClient {
  std::unique_ptr<grpc::GenericStub> stub;
  std::unique_ptr<PsStream> stream;
};

void StartOurs(OurClient* c, const std::string& method, grpc::ByteBuffer request,
               std::function<bool(const grpc::ByteBuffer&)> check, std::function<void()> done) {
  psframe::Method m;
  if (c->stream == nullptr || request.Length() > kMaxStreamedBytes || !psframe::MethodFromPath(method, &m)) {
    return StartGeneric(c->stub.get(), method, std::move(request), std::move(check), std::move(done));
  }
  c->stream->Start(m, request, absl::Seconds(60),
                   [check = std::move(check), done = std::move(done)](absl::StatusOr<grpc::ByteBuffer> r) {
                     if (!r.ok() || !check(*r)) LOG(FATAL) << "benchmark call failed: " << r.status();
                     done();
                   });
}

// ---------------------------------------------------------------- raw gRPC

// The baseline service: PushRequest / PullResponse carry the tensor as a
// protobuf `bytes` field, parsed and serialized by protobuf as usual.
class RawGrpc final : public ParameterServer::CallbackService {
 public:
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* ctx, const PushRequest* req,
                                 PushResponse* resp) override {
    resp->set_global_step(req->gradient_size());
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* ctx, const PullRequest* req,
                                 PullResponse* resp) override {
    int64_t bytes = 0;
    absl::SimpleAtoi(req->variable(0), &bytes);
    NamedTensor* t = resp->add_tensor();
    t->set_name(req->variable(0));
    t->mutable_tensor()->set_dtype(DT_FLOAT);
    t->mutable_tensor()->mutable_shape()->add_dim(bytes / 4);
    t->mutable_tensor()->mutable_content()->resize(bytes);  // what a server fills from its state
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }
};

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
    CHECK(s.ok()) << s.error_message();
    done();
  });
}

// ---------------------------------------------------------------- raw TCP

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    p += w;
    n -= w;
  }
  return true;
}
bool ReadAll(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r <= 0) return false;
    p += r;
    n -= r;
  }
  return true;
}

// A request of `up` bytes answered by `down` bytes over one loopback TCP
// connection per client, `window` requests pipelined: the kernel's ceiling
// for the same exchange.
Figure RawTcp(int clients, int window, double seconds, size_t up, size_t down, size_t payload) {
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  ::listen(listener, 8);
  std::vector<std::thread> servers;
  std::vector<int> client_fds;
  for (int c = 0; c < clients; ++c) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    CHECK_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    client_fds.push_back(fd);
    int sfd = ::accept(listener, nullptr, nullptr);
    ::setsockopt(sfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    servers.emplace_back([sfd, up, down] {
      std::vector<char> in(up), out(down, 1);
      while (ReadAll(sfd, in.data(), up) && WriteAll(sfd, out.data(), down)) {
      }
      ::close(sfd);
    });
  }
  ::close(listener);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> done{0};
  std::vector<std::thread> drivers;
  auto t0 = Clock::now();
  for (int c = 0; c < clients; ++c) {
    drivers.emplace_back([&, c] {
      int fd = client_fds[c];
      std::vector<char> out(up, 2), in(down);
      // A writer thread keeps `window` requests ahead of the answers read.
      std::atomic<int64_t> sent{0}, answered{0};
      std::thread writer([&] {
        while (!stop) {
          if (sent - answered >= window) {
            std::this_thread::yield();
            continue;
          }
          if (!WriteAll(fd, out.data(), up)) return;
          ++sent;
        }
        ::shutdown(fd, SHUT_WR);
      });
      while (ReadAll(fd, in.data(), down)) {
        ++answered;
        ++done;
      }
      writer.join();
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  int64_t count = done;
  double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  stop = true;
  for (auto& d : drivers) d.join();
  for (int fd : client_fds) ::close(fd);
  for (auto& s : servers) s.join();
  Figure f;
  f.ops_per_sec = count / elapsed;
  f.mb_per_sec = f.ops_per_sec * payload / 1e6;
  return f;
}

// ---------------------------------------------------------------- main

// The best of `repeats` runs of each of `measure` (interleaved).
std::vector<Figure> Best(int repeats, const std::vector<std::function<Figure()>>& measure) {
  std::vector<Figure> best(measure.size());
  for (int r = 0; r < repeats; ++r) {
    for (size_t i = 0; i < measure.size(); ++i) {
      Figure f = measure[i]();
      if (f.ops_per_sec > best[i].ops_per_sec) best[i] = f;
    }
  }
  return best;
}

void Print(const std::string& what, const std::vector<Figure>& f) {
  const Figure& ours = f[0];
  const Figure& grpc_raw = f[1];
  const Figure& tcp = f[2];
  std::printf("%-34s %10.0f/s %9.1f MB/s | raw gRPC %9.0f/s %9.1f MB/s | TCP %9.0f/s %9.1f MB/s | ours/gRPC %.2f ours/TCP %.2f\n",
              what.c_str(), ours.ops_per_sec, ours.mb_per_sec, grpc_raw.ops_per_sec,
              grpc_raw.mb_per_sec, tcp.ops_per_sec, tcp.mb_per_sec,
              ours.ops_per_sec / grpc_raw.ops_per_sec, ours.ops_per_sec / tcp.ops_per_sec);
  std::fflush(stdout);
}

int Main() {
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  // Pulled tensors land in pooled storage, as in PsClient.
  std::shared_ptr<BufferPool> client_pool = BufferPool::Create();
  std::vector<int64_t> sizes;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_sizes), ',', absl::SkipEmpty())) {
    int64_t v;
    CHECK(absl::SimpleAtoi(s, &v));
    sizes.push_back(v);
  }
  Ours ours(sizes);
  RawGrpc raw_service;
  int raw_port = 0;
  auto raw_server = StartServer(&raw_service, &raw_port);
  const std::string raw_address = absl::StrCat("127.0.0.1:", raw_port);

  const std::string transport = absl::GetFlag(FLAGS_transport);
  CHECK(transport == "stream" || transport == "unary") << "--transport must be stream or unary";
  std::vector<OurClient> our_clients(2);
  std::vector<std::unique_ptr<ParameterServer::Stub>> raw_stubs;
  for (int c = 0; c < 2; ++c) {
    std::shared_ptr<grpc::Channel> channel = NewChannel(ours.address());
    our_clients[c].stub = std::make_unique<grpc::GenericStub>(channel);
    if (transport == "stream") our_clients[c].stream = std::make_unique<PsStream>(channel, "ps:0");
    raw_stubs.push_back(ParameterServer::NewStub(NewChannel(raw_address)));
  }
  std::atomic<int64_t> step{0};
  std::printf("ps_bench: best of %d x %.2f s per figure; MB = 10^6 bytes of tensor content; ours over %s\n",
              repeats, seconds, transport.c_str());

  for (int64_t bytes : sizes) {
    Tensor grad(DT_FLOAT, TensorShape({bytes / 4}));
    grad.flat<float>().setConstant(1.0f);
    PushRequest raw_push;
    NamedTensor* nt = raw_push.add_gradient();
    nt->set_name(Ours::Name(bytes));
    grad.ToProto(nt->mutable_tensor());
    PullRequest raw_pull;
    raw_pull.add_variable(absl::StrCat(bytes));
    for (int clients : {1, 2}) {
      for (int window : {1, 16}) {
        auto label = [&](const char* op) {
          return absl::StrCat(op, " ", bytes >= (1 << 20) ? absl::StrCat(bytes >> 20, " MiB")
                                                          : absl::StrCat(bytes >> 10, " KiB"),
                              " x", window, " in flight, ", clients, " client", clients > 1 ? "s" : "");
        };
        auto push = [&] { return Drive(clients, window, seconds, bytes, [&](int c, std::function<void()> done) {
          pswire::PushArgs a;
          a.id.set_worker(c);
          a.id.set_worker_incarnation(1);
          a.id.set_step(step++);
          a.gradients.emplace_back(Ours::Name(bytes), grad);
          StartOurs(&our_clients[c], "/psrt.ParameterServer/Push", pswire::EncodePush(a),
                       [](const grpc::ByteBuffer& b) { return pswire::DecodePushResult(b).ok(); },
                       std::move(done));
        }); };
        auto raw_push_f = [&] { return Drive(clients, window, seconds, bytes, [&](int c, std::function<void()> done) {
          StartRaw(&ParameterServer::Stub::async_interface::Push, raw_stubs[c].get(), &raw_push, done);
        }); };
        auto tcp_push = [&] { return RawTcp(clients, window, seconds, bytes, 8, bytes); };
        Print(label("push"), Best(repeats, {push, raw_push_f, tcp_push}));

        auto pull = [&] { return Drive(clients, window, seconds, bytes, [&](int c, std::function<void()> done) {
          pswire::PullArgs a;
          a.variables = {Ours::Name(bytes)};
          StartOurs(&our_clients[c], "/psrt.ParameterServer/Pull", pswire::EncodePull(a),
                       [bytes, &client_pool](const grpc::ByteBuffer& b) {
                         auto r = pswire::DecodePullResult(b, client_pool->Allocator());
                         return r.ok() && r->tensors.size() == 1 &&
                                static_cast<int64_t>(r->tensors[0].second.TotalBytes()) == bytes;
                       },
                       std::move(done));
        }); };
        auto raw_pull_f = [&] { return Drive(clients, window, seconds, bytes, [&](int c, std::function<void()> done) {
          StartRaw(&ParameterServer::Stub::async_interface::Pull, raw_stubs[c].get(), &raw_pull, done);
        }); };
        auto tcp_pull = [&] { return RawTcp(clients, window, seconds, 8, bytes, bytes); };
        Print(label("pull"), Best(repeats, {pull, raw_pull_f, tcp_pull}));
      }
    }
  }

  // Sparse: 1,000 rows of 64 floats from a fixed table.
  const int64_t n = 1000, dim = 64;
  const size_t row_bytes = n * dim * 4;
  Tensor ids(DT_INT64, TensorShape({n}));
  for (int64_t i = 0; i < n; ++i) ids.data<int64_t>()[i] = i * 97;
  Tensor rows(DT_FLOAT, TensorShape({n, dim}));
  rows.flat<float>().setConstant(1.0f);
  PushRequest raw_rows_push;
  NamedTensor* rnt = raw_rows_push.add_gradient();
  rnt->set_name("emb");
  rows.ToProto(rnt->mutable_tensor());
  PullRequest raw_rows_pull;
  raw_rows_pull.add_variable(absl::StrCat(row_bytes));
  for (int window : {1, 16}) {
    std::string suffix = absl::StrCat(" x", window, " in flight, 1 client");
    auto push = [&] { return Drive(1, window, seconds, row_bytes, [&](int c, std::function<void()> done) {
      pswire::PushRowsArgs a;
      a.id.set_worker(c);
      a.id.set_worker_incarnation(2);
      a.id.set_step(step++);
      a.rows.push_back({"emb", ids, rows});
      StartOurs(&our_clients[c], "/psrt.ParameterServer/PushRows", pswire::EncodePushRows(a),
                   [](const grpc::ByteBuffer& b) { return pswire::DecodePushResult(b).ok(); },
                   std::move(done));
    }); };
    auto raw_push_f = [&] { return Drive(1, window, seconds, row_bytes, [&](int c, std::function<void()> done) {
          StartRaw(&ParameterServer::Stub::async_interface::Push, raw_stubs[c].get(), &raw_rows_push, done);
        }); };
    auto tcp_push = [&] { return RawTcp(1, window, seconds, row_bytes + n * 8, 8, row_bytes); };
    Print("push rows 1000x64" + suffix, Best(repeats, {push, raw_push_f, tcp_push}));
    auto pull = [&] { return Drive(1, window, seconds, row_bytes, [&](int c, std::function<void()> done) {
      pswire::PullRowsArgs a;
      a.ids.push_back({"emb", ids});
      StartOurs(&our_clients[c], "/psrt.ParameterServer/PullRows", pswire::EncodePullRows(a),
                   [&](const grpc::ByteBuffer& b) {
                     auto r = pswire::DecodePullResult(b, client_pool->Allocator());
                     return r.ok() && r->tensors.size() == 1 &&
                            r->tensors[0].second.TotalBytes() == row_bytes;
                   },
                   std::move(done));
    }); };
    auto raw_pull_f = [&] { return Drive(1, window, seconds, row_bytes, [&](int c, std::function<void()> done) {
          StartRaw(&ParameterServer::Stub::async_interface::Pull, raw_stubs[c].get(), &raw_rows_pull, done);
        }); };
    auto tcp_pull = [&] { return RawTcp(1, window, seconds, n * 8, row_bytes, row_bytes); };
    Print("pull rows 1000x64" + suffix, Best(repeats, {pull, raw_pull_f, tcp_pull}));
  }
  raw_server->Shutdown();
  return 0;
}

}  // namespace
}  // namespace psrt

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  return psrt::Main();
}
