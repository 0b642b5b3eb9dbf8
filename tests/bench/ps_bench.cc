// Parameter-server throughput, beside two baselines carrying the same
// bytes: a plain gRPC service whose messages hold a protobuf `bytes` field
// (what a straightforward implementation would do), and a plain TCP stream
// (the kernel's ceiling).
//
//   bazel run //tests/bench:ps_bench -- [--seconds=0.25] [--sizes=4096,1048576,16777216]
//   bazel run //tests/bench:ps_bench -- --netns [--rates=10gbit,1gbit]   (as root)
//
// Ours is the real server: ParameterServerCore behind PsServiceImpl,
// applying the optimizer (--optimizer, SGD by default) to an ASYNC
// variable on every push, and a client on the generic stub with ps_wire
// (what PsClient sends). Each figure is requests per second and MB/s (10^6
// bytes of tensor content) with 1 or 16 requests in flight per client, and
// 1 or 2 clients (each its own TCP connection). On loopback it also
// measures, each against its alternative in the same run: the PS applying
// with one thread against --apply_threads=0 (every core), and a coalesced
// push (the MLP's variables, and rows, in one Push) against one call each.
//
// --netns measures across two network namespaces joined by a veth pair
// (netns_pair.h) under a tc tbf rate limit: the servers run in one
// namespace (this binary again, --netns_role=server), the clients in the
// other (--netns_role=client).
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "common/buffer_pool.h"
#include "common/subprocess.h"
#include "common/transport/ps_client.h"
#include "common/transport/ps_stream.h"
#include "common/transport/ps_tcp_channel.h"
#include "common/transport/ps_wire.h"
#include "glog/logging.h"
#include "google/protobuf/text_format.h"
#include "tests/bench/netns_pair.h"
#include "tests/bench/ps_bench_lib.h"

ABSL_FLAG(double, seconds, 0.25, "Seconds per measurement.");
ABSL_FLAG(std::string, transport, "tcp",
          "How ours travels, as PsClient sends it (--ps_transport of the worker): 'tcp' (frames of one "
          "connection per client to the PS's TCP data plane, every size), 'stream' (requests up to 1 MiB "
          "as frames of one ParameterServer/Exchange stream per client, larger ones unary) or 'unary' "
          "(one call each).");
ABSL_FLAG(std::string, channel_args, "",
          "Experiment: integer gRPC channel arguments NAME=VALUE,... set on the server and "
          "every client (e.g. grpc.http2.max_frame_size=1048576).");
ABSL_FLAG(int, repeats, 3,
          "Each figure is the best of this many measurements, ours and the baselines "
          "interleaved, so that load from other processes on a shared machine hurts less.");
ABSL_FLAG(std::string, sizes, "4096,1048576,16777216",
          "Dense tensor sizes in bytes (empty: sparse figures only).");
ABSL_FLAG(std::string, optimizer, "sgd { learning_rate: 1e-6 }",
          "The PS's optimizer (an OptimizerDef in text format), e.g. 'adam { learning_rate: 1e-6 }'.");
ABSL_FLAG(std::string, sections, "dense,sparse,coalesced,apply",
          "Which figures to measure on loopback: dense, sparse, coalesced, apply.");
ABSL_FLAG(bool, netns, false,
          "Measure across two network namespaces joined by a veth pair, under each of --rates "
          "(needs the rights of `ip netns add`; skipped with a message without them).");
ABSL_FLAG(std::string, rates, "10gbit,1gbit", "With --netns: tc tbf rates, one measurement each.");
ABSL_FLAG(std::string, netns_role, "", "Internal (--netns): server or client.");
ABSL_FLAG(std::string, server_host, "", "Internal (--netns_role=client): the servers' address.");
ABSL_FLAG(std::string, ports, "", "Internal (--netns_role=client): ours,raw gRPC,TCP ports.");

namespace psrt {
namespace bench {
namespace {

ChannelArgs ExtraArgs() {
  ChannelArgs out;
  for (absl::string_view kv : absl::StrSplit(absl::GetFlag(FLAGS_channel_args), ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
    int v = 0;
    CHECK(absl::SimpleAtoi(p.second, &v)) << "bad --channel_args entry " << kv;
    out.emplace_back(p.first, v);
  }
  return out;
}

std::vector<int64_t> Sizes() {
  std::vector<int64_t> sizes;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_sizes), ',', absl::SkipEmpty())) {
    int64_t v;
    CHECK(absl::SimpleAtoi(s, &v)) << "bad --sizes entry " << s;
    sizes.push_back(v);
  }
  return sizes;
}

OptimizerDef Optimizer() {
  OptimizerDef d;
  CHECK(google::protobuf::TextFormat::ParseFromString(absl::GetFlag(FLAGS_optimizer), &d))
      << "bad --optimizer " << absl::GetFlag(FLAGS_optimizer);
  return d;
}

std::string SizeText(int64_t bytes) {
  return bytes >= (1 << 20) ? absl::StrCat(bytes >> 20, " MiB") : absl::StrCat(bytes >> 10, " KiB");
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

// Two ways of doing the same work, measured interleaved: a / b.
void PrintPair(const std::string& what, const std::string& a_name, const std::string& b_name,
               const std::vector<Figure>& f) {
  std::printf("%-40s %s %8.0f/s %8.1f MB/s | %s %8.0f/s %8.1f MB/s | ratio %.2f\n", what.c_str(),
              a_name.c_str(), f[0].ops_per_sec, f[0].mb_per_sec, b_name.c_str(), f[1].ops_per_sec,
              f[1].mb_per_sec, f[0].ops_per_sec / f[1].ops_per_sec);
  std::fflush(stdout);
}

// A client of ours as PsClient sends (--transport): requests up to
// max_framed bytes as frames of its TCP connection or stream, the rest
// (and everything without either) unary.
struct OurClient {
  grpc::GenericStub* stub = nullptr;
  PsCallChannel* stream = nullptr;
  size_t max_framed = 0;
};

void StartOurs(const OurClient& c, const std::string& method, grpc::ByteBuffer request,
               std::function<bool(const grpc::ByteBuffer&)> check, std::function<void()> done) {
  psframe::Method m;
  if (c.stream == nullptr || request.Length() > c.max_framed || !psframe::MethodFromPath(method, &m)) {
    return StartGeneric(c.stub, method, std::move(request), std::move(check), std::move(done));
  }
  c.stream->Start(m, request, absl::Seconds(60), CallRoute(),
                  [check = std::move(check), done = std::move(done)](absl::StatusOr<grpc::ByteBuffer> r) {
                    if (!r.ok() || !check(*r)) LOG(FATAL) << "benchmark call failed: " << r.status();
                    done();
                  });
}

// Where the three servers listen, and a client of each.
class Targets {
 public:
  Targets(const std::string& host, int ours, int raw, int tcp, const ChannelArgs& extra)
      : host_(host), tcp_port_(tcp) {
    const std::string transport = absl::GetFlag(FLAGS_transport);
    CHECK(transport == "tcp" || transport == "stream" || transport == "unary")
        << "--transport must be tcp, stream or unary";
    max_framed_ = transport == "tcp" ? kMaxTcpFramedBytes : kMaxStreamedBytes;
    for (int c = 0; c < 2; ++c) {
      std::shared_ptr<grpc::Channel> channel = NewChannel(absl::StrCat(host, ":", ours), extra);
      ours_.push_back(std::make_unique<grpc::GenericStub>(channel));
      const std::string address = absl::StrCat(host, ":", ours);
      if (transport == "stream") streams_.push_back(std::make_unique<PsStream>(channel, "ps:0"));
      if (transport == "tcp") streams_.push_back(std::make_unique<PsTcpChannel>(channel, address, "ps:0"));
      raw_.push_back(ParameterServer::NewStub(NewChannel(absl::StrCat(host, ":", raw), extra)));
    }
  }
  OurClient ours(int c) { return {ours_[c].get(), streams_.empty() ? nullptr : streams_[c].get(), max_framed_}; }
  ParameterServer::Stub* raw(int c) { return raw_[c].get(); }
  Figure Tcp(int clients, int window, double seconds, size_t up, size_t down, size_t payload) {
    return RawTcp(host_, tcp_port_, clients, window, seconds, up, down, payload);
  }

 private:
  const std::string host_;
  const int tcp_port_;
  std::vector<std::unique_ptr<grpc::GenericStub>> ours_;
  std::vector<std::unique_ptr<PsCallChannel>> streams_;
  size_t max_framed_ = 0;
  std::vector<std::unique_ptr<ParameterServer::Stub>> raw_;
};

std::atomic<int64_t> next_step{0};

// One Push of `a` (its id's step made unique) through stub c.
void PushOnce(const OurClient& via, int worker, pswire::PushArgs a, std::function<void()> done,
              bool want_rows = false) {
  a.id.set_worker(worker);
  a.id.set_worker_incarnation(1);
  a.id.set_step(next_step++);
  StartOurs(via, "/psrt.ParameterServer/Push", pswire::EncodePush(a),
               [want_rows](const grpc::ByteBuffer& b) {
                 absl::StatusOr<PushResponse> r = pswire::DecodePushResult(b);
                 return r.ok() && (!want_rows || r->rows_taken());
               },
               std::move(done));
}

// Push and pull of each size, against raw gRPC and TCP.
void DenseFigures(Targets* t, const std::vector<int64_t>& sizes, const std::vector<int>& client_counts,
                  BufferPool* client_pool) {
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  for (int64_t bytes : sizes) {
    Tensor grad(DT_FLOAT, TensorShape({bytes / 4}));
    grad.flat<float>().setConstant(1.0f);
    PushRequest raw_push;
    NamedTensor* nt = raw_push.add_gradient();
    nt->set_name(OursServer::Name(bytes));
    grad.ToProto(nt->mutable_tensor());
    PullRequest raw_pull;
    raw_pull.add_variable(absl::StrCat(bytes));
    for (int clients : client_counts) {
      for (int window : {1, 16}) {
        auto label = [&](const char* op) {
          return absl::StrCat(op, " ", SizeText(bytes), " x", window, " in flight, ", clients, " client",
                              clients > 1 ? "s" : "");
        };
        auto push = [&] { return Drive(clients, window, seconds, bytes, [&](int c, std::function<void()> done) {
          pswire::PushArgs a;
          a.gradients.emplace_back(OursServer::Name(bytes), grad);
          PushOnce(t->ours(c), c, std::move(a), std::move(done));
        }); };
        auto raw_push_f = [&] { return Drive(clients, window, seconds, bytes, [&](int c, std::function<void()> done) {
          StartRaw(&ParameterServer::Stub::async_interface::Push, t->raw(c), &raw_push, done);
        }); };
        auto tcp_push = [&] { return t->Tcp(clients, window, seconds, bytes, 8, bytes); };
        Print(label("push"), Best(repeats, {push, raw_push_f, tcp_push}));

        auto pull = [&] { return Drive(clients, window, seconds, bytes, [&](int c, std::function<void()> done) {
          pswire::PullArgs a;
          a.variables = {OursServer::Name(bytes)};
          StartOurs(t->ours(c), "/psrt.ParameterServer/Pull", pswire::EncodePull(a),
                       [bytes, client_pool](const grpc::ByteBuffer& b) {
                         auto r = pswire::DecodePullResult(b, client_pool->Allocator(), /*adopt_aligned=*/true);  // as PsClient
                         return r.ok() && r->tensors.size() == 1 &&
                                static_cast<int64_t>(r->tensors[0].second.TotalBytes()) == bytes;
                       },
                       std::move(done));
        }); };
        auto raw_pull_f = [&] { return Drive(clients, window, seconds, bytes, [&](int c, std::function<void()> done) {
          StartRaw(&ParameterServer::Stub::async_interface::Pull, t->raw(c), &raw_pull, done);
        }); };
        auto tcp_pull = [&] { return t->Tcp(clients, window, seconds, 8, bytes, bytes); };
        Print(label("pull"), Best(repeats, {pull, raw_pull_f, tcp_pull}));
      }
    }
  }
}

// 1,000 rows of 64 floats of a fixed table.
struct Rows {
  static constexpr int64_t kRows = 1000, kDim = 64;
  Tensor ids = Tensor(DT_INT64, TensorShape({kRows}));
  Tensor values = Tensor(DT_FLOAT, TensorShape({kRows, kDim}));
  size_t bytes() const { return values.TotalBytes(); }
  Rows() {
    for (int64_t i = 0; i < kRows; ++i) ids.data<int64_t>()[i] = i * 97;
    values.flat<float>().setConstant(1.0f);
  }
};

void SparseFigures(Targets* t, BufferPool* client_pool) {
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  const Rows rows;
  const size_t n = Rows::kRows, row_bytes = rows.bytes();
  PushRequest raw_rows_push;
  NamedTensor* rnt = raw_rows_push.add_gradient();
  rnt->set_name("emb");
  rows.values.ToProto(rnt->mutable_tensor());
  PullRequest raw_rows_pull;
  raw_rows_pull.add_variable(absl::StrCat(row_bytes));
  for (int window : {1, 16}) {
    std::string suffix = absl::StrCat(" x", window, " in flight, 1 client");
    auto push = [&] { return Drive(1, window, seconds, row_bytes, [&](int c, std::function<void()> done) {
      pswire::PushRowsArgs a;
      a.id.set_worker(c);
      a.id.set_worker_incarnation(2);
      a.id.set_step(next_step++);
      a.rows.push_back({"emb", rows.ids, rows.values});
      StartOurs(t->ours(c), "/psrt.ParameterServer/PushRows", pswire::EncodePushRows(a),
                   [](const grpc::ByteBuffer& b) { return pswire::DecodePushResult(b).ok(); },
                   std::move(done));
    }); };
    auto raw_push_f = [&] { return Drive(1, window, seconds, row_bytes, [&](int c, std::function<void()> done) {
          StartRaw(&ParameterServer::Stub::async_interface::Push, t->raw(c), &raw_rows_push, done);
        }); };
    auto tcp_push = [&] { return t->Tcp(1, window, seconds, row_bytes + n * 8, 8, row_bytes); };
    Print("push rows 1000x64" + suffix, Best(repeats, {push, raw_push_f, tcp_push}));
    auto pull = [&] { return Drive(1, window, seconds, row_bytes, [&](int c, std::function<void()> done) {
      pswire::PullRowsArgs a;
      a.ids.push_back({"emb", rows.ids});
      StartOurs(t->ours(c), "/psrt.ParameterServer/PullRows", pswire::EncodePullRows(a),
                   [&](const grpc::ByteBuffer& b) {
                     auto r = pswire::DecodePullResult(b, client_pool->Allocator(), /*adopt_aligned=*/true);  // as PsClient
                     return r.ok() && r->tensors.size() == 1 && r->tensors[0].second.TotalBytes() == row_bytes;
                   },
                   std::move(done));
    }); };
    auto raw_pull_f = [&] { return Drive(1, window, seconds, row_bytes, [&](int c, std::function<void()> done) {
          StartRaw(&ParameterServer::Stub::async_interface::Pull, t->raw(c), &raw_rows_pull, done);
        }); };
    auto tcp_pull = [&] { return t->Tcp(1, window, seconds, n * 8, row_bytes, row_bytes); };
    Print("pull rows 1000x64" + suffix, Best(repeats, {pull, raw_pull_f, tcp_pull}));
  }
}

// The MLP's gradients, one Tensor each.
NamedTensors MlpGradients() {
  NamedTensors out;
  for (const auto& [name, dims] : MlpVariables()) {
    Tensor g(DT_FLOAT, TensorShape(dims));
    g.flat<float>().setConstant(1.0f);
    out.emplace_back(name, g);
  }
  return out;
}

size_t Bytes(const NamedTensors& t) {
  size_t n = 0;
  for (const auto& [name, v] : t) n += v.TotalBytes();
  return n;
}

// A PS applying on one thread against one applying on every core, pushes
// of each size of at least 1 MiB and the MLP's six variables in one Push.
void ApplyFigures(const std::vector<int64_t>& sizes, const ChannelArgs& extra) {
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  OursServer serial(sizes, Optimizer(), 1, "127.0.0.1", extra);
  OursServer parallel(sizes, Optimizer(), 0, "127.0.0.1", extra);
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  grpc::GenericStub serial_stub(NewChannel(absl::StrCat("127.0.0.1:", serial.port()), extra));
  grpc::GenericStub parallel_stub(NewChannel(absl::StrCat("127.0.0.1:", parallel.port()), extra));
  auto measure = [&](const std::string& what, const NamedTensors& grads) {
    for (int window : {1, 16}) {
      auto via = [&](grpc::GenericStub* stub) {
        return [&, stub] { return Drive(1, window, seconds, Bytes(grads), [&, stub](int c, std::function<void()> done) {
          pswire::PushArgs a;
          a.gradients = grads;
          PushOnce(OurClient{stub, nullptr}, c, std::move(a), std::move(done));
        }); };
      };
      via(&parallel_stub)();  // connects both channels and touches the buffers
      via(&serial_stub)();
      PrintPair(absl::StrCat("apply: push ", what, " x", window, " in flight"),
                absl::StrCat("apply_threads=", threads), "apply_threads=1",
                Best(repeats, {via(&parallel_stub), via(&serial_stub)}));
    }
  };
  for (int64_t bytes : sizes) {
    if (bytes < (1 << 20)) continue;
    Tensor grad(DT_FLOAT, TensorShape({bytes / 4}));
    grad.flat<float>().setConstant(1.0f);
    measure(SizeText(bytes), {{OursServer::Name(bytes), grad}});
  }
  measure("MLP (6 variables, 0.94 MB)", MlpGradients());
}

// The MLP's variables in one Push against one Push per variable (all six
// in flight at once, a step done when all are answered); and a step's rows
// carried by its Push against a PushRows followed by the Push.
void CoalescedFigures(Targets* t) {
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  const NamedTensors grads = MlpGradients();
  const Rows rows;
  const size_t dense_bytes = Bytes(grads), all_bytes = dense_bytes + rows.bytes();
  for (int window : {1, 16}) {
    auto one = [&] { return Drive(1, window, seconds, dense_bytes, [&](int c, std::function<void()> done) {
      pswire::PushArgs a;
      a.gradients = grads;
      PushOnce(t->ours(c), c, std::move(a), std::move(done));
    }); };
    auto each = [&] { return Drive(1, window, seconds, dense_bytes, [&](int c, std::function<void()> done) {
      auto left = std::make_shared<std::atomic<int>>(static_cast<int>(grads.size()));
      for (const auto& g : grads) {
        pswire::PushArgs a;
        a.gradients = {g};
        PushOnce(t->ours(c), c, std::move(a), [left, done] {
          if (left->fetch_sub(1) == 1) done();
        });
      }
    }); };
    PrintPair(absl::StrCat("coalesced: MLP step x", window, " in flight"), "one Push", "a Push per variable",
              Best(repeats, {one, each}));
    auto with_rows = [&] { return Drive(1, window, seconds, all_bytes, [&](int c, std::function<void()> done) {
      pswire::PushArgs a;
      a.gradients = grads;
      a.rows.push_back({"emb", rows.ids, rows.values});
      PushOnce(t->ours(c), c, std::move(a), std::move(done), /*want_rows=*/true);
    }); };
    auto rows_then_push = [&] { return Drive(1, window, seconds, all_bytes, [&](int c, std::function<void()> done) {
      pswire::PushRowsArgs r;
      r.id.set_worker(c);
      r.id.set_worker_incarnation(1);
      r.id.set_step(next_step++);
      r.rows.push_back({"emb", rows.ids, rows.values});
      const OurClient via = t->ours(c);
      StartOurs(via, "/psrt.ParameterServer/PushRows", pswire::EncodePushRows(r),
                   [](const grpc::ByteBuffer& b) { return pswire::DecodePushResult(b).ok(); },
                   [&, via, c, done] {
                     pswire::PushArgs a;
                     a.gradients = grads;
                     PushOnce(via, c, std::move(a), done);
                   });
    }); };
    PrintPair(absl::StrCat("coalesced: MLP + 1000x64 rows x", window, " in flight"), "one Push",
              "PushRows then Push", Best(repeats, {with_rows, rows_then_push}));
  }
}

int Local() {
  const ChannelArgs extra = ExtraArgs();
  const std::vector<int64_t> sizes = Sizes();
  std::shared_ptr<BufferPool> client_pool = BufferPool::Create();  // pulled tensors, as in PsClient
  std::printf("ps_bench: best of %d x %.2f s per figure; MB = 10^6 bytes of tensor content; ours over %s; optimizer %s\n",
              absl::GetFlag(FLAGS_repeats), absl::GetFlag(FLAGS_seconds), absl::GetFlag(FLAGS_transport).c_str(),
              absl::GetFlag(FLAGS_optimizer).c_str());
  OursServer ours(sizes, Optimizer(), 0, "127.0.0.1", extra);
  RawGrpcService raw_service;
  int raw_port = 0;
  auto raw_server = StartServer(&raw_service, "127.0.0.1", &raw_port, extra);
  TcpServer tcp("127.0.0.1");
  Targets targets("127.0.0.1", ours.port(), raw_port, tcp.port(), extra);
  const std::vector<std::string> sections = absl::StrSplit(absl::GetFlag(FLAGS_sections), ',');
  auto wanted = [&](const char* s) { return std::find(sections.begin(), sections.end(), s) != sections.end(); };
  if (wanted("dense")) DenseFigures(&targets, sizes, {1, 2}, client_pool.get());
  if (wanted("sparse")) SparseFigures(&targets, client_pool.get());
  if (wanted("coalesced")) CoalescedFigures(&targets);
  if (wanted("apply")) ApplyFigures(sizes, extra);
  raw_server->Shutdown();
  return 0;
}

// --netns_role=server: the three servers on every address; prints their
// ports and serves until killed.
int Server() {
  const ChannelArgs extra = ExtraArgs();
  OursServer ours(Sizes(), Optimizer(), 0, "0.0.0.0", extra);
  RawGrpcService raw_service;
  int raw_port = 0;
  auto raw_server = StartServer(&raw_service, "0.0.0.0", &raw_port, extra);
  TcpServer tcp("0.0.0.0");
  std::printf("ports %d,%d,%d\n", ours.port(), raw_port, tcp.port());
  std::fflush(stdout);
  while (true) ::pause();
}

// --netns_role=client: the dense figures against --server_host.
int Client() {
  std::vector<int> ports;
  for (absl::string_view p : absl::StrSplit(absl::GetFlag(FLAGS_ports), ',')) {
    int v = 0;
    CHECK(absl::SimpleAtoi(p, &v)) << "bad --ports " << absl::GetFlag(FLAGS_ports);
    ports.push_back(v);
  }
  CHECK_EQ(ports.size(), 3u) << "--ports wants ours,raw gRPC,TCP";
  std::shared_ptr<BufferPool> client_pool = BufferPool::Create();
  Targets targets(absl::GetFlag(FLAGS_server_host), ports[0], ports[1], ports[2], ExtraArgs());
  DenseFigures(&targets, Sizes(), {1}, client_pool.get());
  SparseFigures(&targets, client_pool.get());
  return 0;
}


// --netns: the servers in one namespace, the clients in the other, under
// each of --rates. Skips (exit 0) with a message when namespaces cannot be
// made; removes the namespaces on every way out, SIGINT and SIGTERM too.
int Netns() {
  std::vector<int64_t> rates;
  for (absl::string_view r : absl::StrSplit(absl::GetFlag(FLAGS_rates), ',', absl::SkipEmpty())) {
    absl::StatusOr<int64_t> bits = ParseRate(std::string(r));
    CHECK(bits.ok()) << bits.status();
    rates.push_back(*bits);
  }
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  CHECK_GT(n, 0) << "cannot find this binary (/proc/self/exe)";
  self[n] = 0;
  absl::StatusOr<std::unique_ptr<NetnsPair>> pair = NetnsPair::CreateRemovedOnSignals();
  if (!pair.ok()) {
    std::printf("ps_bench --netns: skipped, cannot make network namespaces (run as root or with "
                "CAP_NET_ADMIN and CAP_SYS_ADMIN): %s\n",
                std::string(pair.status().message()).c_str());
    return pair.status().code() == absl::StatusCode::kPermissionDenied ? 0 : 1;
  }
  NetnsPair* p = pair->get();

  std::vector<std::string> pass;
  for (const std::string& f : {"seconds", "repeats", "sizes", "optimizer", "channel_args", "transport"}) {
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(f);
    pass.push_back(absl::StrCat("--", f, "=", flag->CurrentValue()));
  }
  std::vector<std::string> server_argv = {self, "--netns_role=server"};
  server_argv.insert(server_argv.end(), pass.begin(), pass.end());
  absl::Mutex mu;
  std::string ports;
  SubprocessOptions so;
  so.argv = NetnsPair::In(p->server_ns(), server_argv);
  so.on_line = [&](absl::string_view line) {
    absl::MutexLock lock(&mu);
    if (ports.empty() && absl::ConsumePrefix(&line, "ports ")) {
      ports = std::string(line);
    } else {
      std::fprintf(stderr, "[server] %.*s\n", static_cast<int>(line.size()), line.data());
    }
  };
  absl::StatusOr<std::unique_ptr<Subprocess>> server = Subprocess::Start(so);
  CHECK(server.ok()) << server.status();
  {
    absl::MutexLock lock(&mu);
    if (!mu.AwaitWithTimeout(absl::Condition(+[](std::string* s) { return !s->empty(); }, &ports),
                             absl::Seconds(60))) {
      std::fprintf(stderr, "ps_bench --netns: the server did not start\n");
      return 1;
    }
  }
  std::printf("ps_bench --netns: servers in %s at %s, clients in %s, veth pair with tc tbf on both ends; "
              "best of %d x %.2f s per figure; optimizer %s\n",
              p->server_ns().c_str(), NetnsPair::server_address(), p->client_ns().c_str(),
              absl::GetFlag(FLAGS_repeats), absl::GetFlag(FLAGS_seconds), absl::GetFlag(FLAGS_optimizer).c_str());
  std::fflush(stdout);
  int rc = 0;
  for (int64_t bits : rates) {
    absl::Status set = p->SetRate(bits);
    CHECK(set.ok()) << set;
    std::printf("-- rate %.3g Gbit/s\n", bits / 1e9);
    std::fflush(stdout);
    std::vector<std::string> client_argv = {self, "--netns_role=client",
                                            absl::StrCat("--server_host=", NetnsPair::server_address()),
                                            absl::StrCat("--ports=", ports)};
    client_argv.insert(client_argv.end(), pass.begin(), pass.end());
    SubprocessOptions co;
    co.argv = NetnsPair::In(p->client_ns(), client_argv);
    absl::StatusOr<std::unique_ptr<Subprocess>> client = Subprocess::Start(co);
    CHECK(client.ok()) << client.status();
    absl::StatusOr<int> status = (*client)->Wait();
    if (!status.ok() || *status != 0) {
      std::fprintf(stderr, "ps_bench --netns: the client failed (%s)\n",
                   status.ok() ? DescribeWaitStatus(*status).c_str() : std::string(status.status().message()).c_str());
      rc = 1;
      break;
    }
  }
  server->reset();  // killed and reaped before its namespace goes
  return rc;
}

}  // namespace
}  // namespace bench
}  // namespace psrt

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // As the daemons run (common/daemon.cc): no lock-order graph on every lock.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  const std::string role = absl::GetFlag(FLAGS_netns_role);
  if (role == "server") return psrt::bench::Server();
  if (role == "client") return psrt::bench::Client();
  if (absl::GetFlag(FLAGS_netns)) return psrt::bench::Netns();
  return psrt::bench::Local();
}
