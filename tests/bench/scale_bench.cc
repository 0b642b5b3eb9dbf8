// How cost grows (issue #26): curves, not points, each point with the
// bytes it moved, the physical limit those bytes imply and the ratio to it.
//
//   bazel run -c opt //tests/bench:scale_bench -- [--quick] [--curves=null,dense,sparse,memory,hotkeys]
//       [--out_dir=DIR]   (one CSV per curve; tests/bench/plot_scale.py draws them as SVG)
//   bazel run -c opt //tests/bench:scale_bench -- --netns [--rates=10gbit,1gbit] [--curves=null,dense]
//       (as root: the null and dense curves between two network namespaces)
//
// Everything is real: each point starts its own PS daemons (//ps:server,
// TCP data plane, as the workers' default) on loopback, and each worker is a
// process of its own (this binary again, --role=worker) that only pulls and
// pushes through PsClient, the worker's PS client.
//
//   null   a SYNC step of a tiny variable (4 bytes on each PS) against the
//          number of worker processes and of PS: what coordination costs.
//   dense  a SYNC step of a dense model (--dense_mb; rows split over the PS)
//          against the number of workers and PS.
//   sparse PullRows and a push of rows (Adam, ASYNC) of --read_rows draws
//          (deduplicated, as a worker does) from a fixed table of each
//          --table_rows x --table_dims, uniform or Zipf ids (--skews).
//   memory bytes per row of a hash table (Adam, rows made on first touch)
//          on one PS, from its RSS (/proc/PID/status VmRSS), against the raw
//          3 x dim x 4 bytes.
//   hotkeys 4 PS, Zipf ids: each PS's bytes (its own /metrics counters)
//          against the mean PS's.
//
// The limits are measured in the same run on the same machine: a plain TCP
// exchange on loopback (round trip of 8 bytes; exchanges per second with
// two connections; MB/s of 4 MiB messages with two connections) and a
// memcpy. A null step's limit is the larger of two round trips (its pull,
// then its push) and its 2 x workers x PS exchanges at the kernel's
// exchange rate; a dense step's, the larger of two round trips and its bytes
// at the loopback TCP rate; a sparse op's, one round trip plus its bytes at
// that rate. On a machine of few cores, many worker processes measure the
// cores more than the protocol: the limit counts exchanges for that reason.
//
// --netns runs the null and dense curves between two network namespaces
// joined by a veth pair under tc tbf (netns_pair.h), once per --rates: the
// PS daemons in one namespace, this binary's driver (--role=netns_driver)
// and its worker processes in the other. There the limits are the link's:
// a plain TCP exchange with an echo server across the link (--role=echo)
// for the round trip, and for a dense step its bytes at the tbf rate. A
// SYNC dense step moves its bytes one way after the other: the workers pull
// the model (PS -> workers), then push its gradient (workers -> PS), and no
// pull of step t+1 is answered before every push of step t is applied. So
// the limit is (bytes down + bytes up) x 8 / rate, both directions counted
// in series; the full-duplex floor (the larger direction alone, what an
// overlap of pulls and pushes could reach) is printed beside it. The bytes
// that really crossed are our veth end's counters (/proc/net/dev: with
// TCP/IP headers), per step.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "chief/cluster_clients.h"
#include "common/rpc/channel_cache.h"
#include "common/subprocess.h"
#include "common/transport/ps_client.h"
#include "glog/logging.h"
#include "httplib.h"
#include "proto/ps_service.grpc.pb.h"
#include "tests/bench/netns_pair.h"
#include "tests/bench/ps_bench_lib.h"
#include "tests/harness/process_harness.h"

ABSL_FLAG(bool, quick, false,
          "A small run of every curve (well under a minute): 1-4 workers, 1-2 PS, a 1 MB model, a 10^5-row "
          "table, 10^5 rows of memory. For a smoke test, not for figures.");
ABSL_FLAG(std::string, curves, "null,dense,sparse,memory,hotkeys", "Which curves to measure.");
ABSL_FLAG(std::string, workers, "1,2,4,8,16,32,64", "Worker process counts of the null and dense curves.");
ABSL_FLAG(std::string, ps_counts, "1,2,4,8", "PS counts of the null and dense curves.");
ABSL_FLAG(std::string, dense_ps_counts, "1,4", "PS counts of the dense curves.");
ABSL_FLAG(std::string, dense_mb, "1,100,1000", "Dense model sizes in MB (10^6 bytes).");
ABSL_FLAG(int, steps, 50, "Most measured SYNC steps per point (after 3 warm-up steps).");
ABSL_FLAG(double, point_seconds, 8, "A dense point's steps are cut to about this many seconds (at least 3).");
ABSL_FLAG(int64_t, worker_memory_mb, 4096,
          "Skip dense points whose workers together would hold more than this (each holds the pulled model "
          "and its gradient).");
ABSL_FLAG(std::string, table_rows, "1000000,10000000,100000000", "Table sizes of the sparse curve.");
ABSL_FLAG(std::string, table_dims, "16,64", "Row widths (floats) of the sparse curve.");
ABSL_FLAG(std::string, read_rows, "32,1024,65536", "Ids drawn per read or write (deduplicated before sending).");
ABSL_FLAG(std::string, skews, "0,1.05,1.1,1.2", "Id distributions: 0 = uniform, else Zipf with this exponent.");
ABSL_FLAG(int, sparse_ops, 20, "Reads and writes timed per sparse point (the median is reported).");
ABSL_FLAG(int64_t, keep_free_mb, 8192,
          "A table is made only if this much memory stays available beside it (MemAvailable); past that the "
          "largest multiple of 10^7 rows that fits is measured instead, and the line says so.");
ABSL_FLAG(int64_t, memory_rows, 20000000, "Rows touched in the memory curve (measured at each power of ten).");
ABSL_FLAG(int, memory_dim, 16, "Row width of the memory curve.");
ABSL_FLAG(int, hot_ps, 4, "PS of the hot-key curve.");
ABSL_FLAG(int, hot_steps, 100, "Steps (a pull of rows and a push of them) of the hot-key curve.");
ABSL_FLAG(std::string, out_dir, "", "Write each curve's points here as CSV (empty: print only).");
ABSL_FLAG(std::string, ps_binary, "ps/server", "The PS daemon (relative to the runfiles under bazel run).");
ABSL_FLAG(bool, netns, false,
          "Measure the null and dense curves between two network namespaces joined by a veth pair under tc tbf, "
          "once per --rates: the PS daemons in one, the worker processes in the other. Needs the rights of `ip "
          "netns add` (skipped with a message, exit 0, without them).");
ABSL_FLAG(std::string, rates, "10gbit,1gbit", "With --netns: the link rates (tc tbf on both veth ends).");
ABSL_FLAG(std::string, netns_workers, "1,2,4,8", "With --netns: worker process counts of the null and dense curves.");
ABSL_FLAG(std::string, netns_ps, "1", "With --netns: PS counts of the null and dense curves.");
// Internal: one lightweight worker; with --netns, the driver in the
// workers' namespace and the echo server in the PS's.
ABSL_FLAG(std::string, role, "",
          "Internal: 'worker' runs one lightweight worker; 'netns_driver' the curves of one --netns rate; 'echo' "
          "a plain TCP server (prints its port).");
ABSL_FLAG(std::string, server_ns, "", "Internal (netns_driver): the PS daemons' network namespace.");
ABSL_FLAG(int64_t, link_bits, 0, "Internal (netns_driver): the link's rate, bits/s.");
ABSL_FLAG(std::string, link_if, "", "Internal (netns_driver): our end of the link.");
ABSL_FLAG(std::string, ps_addresses, "", "Internal (worker): the PS, comma-separated.");
ABSL_FLAG(int, worker_index, 0, "Internal (worker).");
ABSL_FLAG(int64_t, model_rows, 0, "Internal (worker): rows of the model variable (split over the PS).");
ABSL_FLAG(int64_t, model_cols, 0, "Internal (worker): columns of the model variable.");
ABSL_FLAG(int, warmup, 2, "Internal (worker): steps before the timed ones.");
ABSL_FLAG(int, worker_steps, 0, "Internal (worker): timed steps.");

namespace psrt {
namespace scale {
namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "scale_bench: %s\n", what.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}
void Check(const absl::Status& s, const std::string& what) {
  if (!s.ok()) Die(absl::StrCat(what, ": ", s.ToString()));
}

template <typename T>
std::vector<T> List(const std::string& flag, const std::string& text) {
  std::vector<T> out;
  for (absl::string_view s : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    T v{};
    bool ok;
    if constexpr (std::is_same_v<T, double>) {
      ok = absl::SimpleAtod(s, &v);
    } else {
      ok = absl::SimpleAtoi(s, &v);
    }
    if (!ok) Die(absl::StrCat("--", flag, ": '", s, "' is not a number"));
    out.push_back(v);
  }
  return out;
}

// Where the PS daemons run: on loopback beside us (the default), or in
// another network namespace across a rate-limited veth link (--netns).
struct Link {
  std::string server_ns;           // empty: loopback, this namespace
  std::string host = "127.0.0.1";  // the PS daemons' and the echo server's address
  int64_t bits_per_s = 0;
  std::string interface;  // our end of the link
  int echo_port = 0;      // the plain TCP server across the link
  bool netns() const { return !server_ns.empty(); }
};
Link* net = new Link();  // set once by NetnsDriverMain before any curve

// Bytes our end of the link has received (the PS's answers) and sent
// (requests), from this namespace's /proc/net/dev.
struct LinkBytes {
  int64_t down = 0, up = 0;
};
LinkBytes ReadLinkBytes() {
  std::ifstream in("/proc/net/dev");
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view v = absl::StripLeadingAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&v, net->interface + ":")) continue;
    const std::vector<std::string> f = absl::StrSplit(v, ' ', absl::SkipEmpty());
    LinkBytes b;
    if (f.size() < 9 || !absl::SimpleAtoi(f[0], &b.down) || !absl::SimpleAtoi(f[8], &b.up)) break;
    return b;
  }
  Die(absl::StrCat("no counters of ", net->interface, " in /proc/net/dev"));
}

// What a process's time went to: CPU seconds (user + system, from
// /proc/PID/stat, exited threads included) and seconds its threads waited
// runnable for a CPU (the sum of /proc/PID/task/*/schedstat's second field,
// living threads only): on a shared machine the wait is the other
// processes' share of the cores.
struct ProcTimes {
  double cpu = 0, wait = 0;
};
ProcTimes ReadProcTimes(pid_t pid) {
  ProcTimes t;
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');  // the command may hold spaces
  if (paren == std::string::npos || paren + 2 > stat.size()) return t;
  const std::vector<std::string> f = absl::StrSplit(stat.substr(paren + 2), ' ');
  int64_t utime = 0, stime = 0;  // fields 14 and 15 of proc(5); f[0] is field 3
  if (f.size() > 12 && absl::SimpleAtoi(f[11], &utime) && absl::SimpleAtoi(f[12], &stime)) {
    t.cpu = static_cast<double>(utime + stime) / ::sysconf(_SC_CLK_TCK);
  }
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/task"), ec)) {
    std::ifstream sched(task.path() / "schedstat");
    int64_t run_ns = 0, wait_ns = 0;
    if (sched >> run_ns >> wait_ns) t.wait += wait_ns / 1e9;
  }
  return t;
}
ProcTimes operator+(ProcTimes a, const ProcTimes& b) {
  a.cpu += b.cpu;
  a.wait += b.wait;
  return a;
}
ProcTimes operator-(ProcTimes a, const ProcTimes& b) {
  a.cpu -= b.cpu;
  a.wait -= b.wait;
  return a;
}

// "10gbit" for 10^10 bits/s, "1gbit", "500mbit".
std::string RateName(int64_t bits) {
  if (bits % 1000000000 == 0) return absl::StrCat(bits / 1000000000, "gbit");
  if (bits % 1000000 == 0) return absl::StrCat(bits / 1000000, "mbit");
  return absl::StrCat(bits, "bit");
}

// ---- The model every worker and the PS agree on ------------------------

// One dense variable "w" [rows, cols], its rows split as evenly as they go
// over the PS (a null step: rows = PS, cols = 1, 4 bytes on each).
PlacementMap DensePlacement(int64_t rows, int64_t cols, int ps) {
  PlacementMap p;
  VariablePlacement* vp = p.add_variable();
  VariableDef* v = vp->mutable_variable();
  v->set_name("w");
  v->set_dtype(DT_FLOAT);
  v->mutable_shape()->add_dim(rows);
  v->mutable_shape()->add_dim(cols);
  v->mutable_initializer()->set_kind(InitializerDef::ZEROS);
  for (int i = 0; i < ps; ++i) {
    VariablePlacement::Shard* s = vp->add_shard();
    s->set_ps_task(i);
    s->set_row_begin(rows * i / ps);
    s->set_row_end(rows * (i + 1) / ps);
  }
  return p;
}

// A table "emb" [rows, dim]: FIXED_TABLE split by row range, or HASH_TABLE
// (rows made on first touch) split by id mod PS.
PlacementMap TablePlacement(int64_t rows, int64_t dim, int ps, bool hash) {
  PlacementMap p;
  VariablePlacement* vp = p.add_variable();
  VariableDef* v = vp->mutable_variable();
  v->set_name("emb");
  v->set_kind(hash ? VariableDef::HASH_TABLE : VariableDef::FIXED_TABLE);
  v->set_dtype(DT_FLOAT);
  v->mutable_shape()->add_dim(hash ? 0 : rows);
  v->mutable_shape()->add_dim(dim);
  v->mutable_initializer()->set_kind(InitializerDef::ZEROS);
  for (int i = 0; i < ps; ++i) {
    VariablePlacement::Shard* s = vp->add_shard();
    s->set_ps_task(i);
    if (!hash) {
      s->set_row_begin(rows * i / ps);
      s->set_row_end(rows * (i + 1) / ps);
    }
  }
  return p;
}

// What PS task i is sent: its slices of every variable.
CreateVariablesRequest CreateFor(const PlacementMap& placement, int task, const std::string& optimizer,
                                 ConsistencyDef::Mode mode, int workers) {
  CreateVariablesRequest req;
  for (const VariablePlacement& vp : placement.variable()) {
    const int shards = vp.shard_size();
    for (int s = 0; s < shards; ++s) {
      if (vp.shard(s).ps_task() != task) continue;
      VariableDef* v = req.add_variable();
      *v = vp.variable();
      v->set_row_begin(vp.shard(s).row_begin());
      v->set_row_end(vp.shard(s).row_end());
      if (v->kind() == VariableDef::HASH_TABLE && shards > 1) {
        v->set_hash_shard(s);
        v->set_hash_shards(shards);
      }
    }
  }
  if (optimizer == "adam") {
    req.mutable_optimizer()->mutable_adam()->set_learning_rate(1e-6);
  } else {
    req.mutable_optimizer()->mutable_sgd()->set_learning_rate(1e-6);
  }
  req.mutable_consistency()->set_mode(mode);
  req.set_num_workers(workers);
  return req;
}

// ---- A cluster of real PS daemons ---------------------------------------

class Cluster {
 public:
  // `ps` daemons on free loopback ports, each with a /metrics page.
  Cluster(int ps, int workers) {
    absl::StatusOr<testing::TestCluster> c =
        testing::MakeTestCluster(ps, std::max(1, workers), absl::StrCat("scale_bench_", ::getpid()), net->host);
    Check(c.status(), "cluster spec");
    spec_ = *c;
    dir_ = absl::StrCat(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp", "/scale_bench_",
                        ::getpid());
    std::filesystem::create_directories(dir_);
    for (int i = 0; i < ps; ++i) {
      absl::StatusOr<int> http = PickFreePort();
      Check(http.status(), "free port");
      http_ports_.push_back(*http);
      std::vector<std::string> argv = {absl::GetFlag(FLAGS_ps_binary), "--cluster_spec=" + spec_.spec_path,
                                       absl::StrCat("--task=ps:", i), "--snapshot_dir=" + dir_,
                                       "--max_request_mb=4096", "--max_pull_response_mb=4096",
                                       "--max_unread_answer_mb=65536", "--max_data_plane_mb=65536",
                                       absl::StrCat("--http_port=", *http)};
      if (net->netns()) argv = bench::NetnsPair::In(net->server_ns, argv);
      absl::StatusOr<std::unique_ptr<testing::Daemon>> d = StartQuiet(absl::StrCat("ps:", i), argv);
      Check(d.status(), "starting ps");
      daemons_.push_back(*std::move(d));
    }
    for (int i = 0; i < ps; ++i) {
      if (!daemons_[i]->WaitForLine("serving at", absl::Seconds(60))) Die(absl::StrCat("ps:", i, " did not start"));
      admins_.push_back(std::make_unique<PsAdmin>(channels_.Get(spec_.ps[i]), absl::StrCat("ps:", i)));
    }
  }
  ~Cluster() {
    for (auto& d : daemons_) d->Kill(SIGKILL);
    daemons_.clear();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  void Create(const PlacementMap& placement, const std::string& optimizer, ConsistencyDef::Mode mode,
              int workers) {
    // Straight through the stub with a long deadline: PsAdmin's 30 s (the
    // chief's control timeout) is too short for a 10^7-row table's zeros and
    // Adam slots on a machine at load 30 (measured: DEADLINE_EXCEEDED).
    for (size_t i = 0; i < admins_.size(); ++i) {
      std::unique_ptr<ParameterServer::Stub> stub = ParameterServer::NewStub(channels_.Get(spec_.ps[i]));
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
      CreateVariablesResponse resp;
      const grpc::Status st =
          stub->CreateVariables(&ctx, CreateFor(placement, static_cast<int>(i), optimizer, mode, workers), &resp);
      if (!st.ok()) Die(absl::StrCat("CreateVariables on ps:", i, ": ", st.error_message()));
    }
  }
  std::unique_ptr<PsClient> Client(const PlacementMap& placement, int worker) {
    PsClientOptions o;
    o.worker = worker;
    o.timeout = absl::Minutes(5);
    return std::make_unique<PsClient>(placement, spec_.ps, &channels_, o);
  }
  const std::vector<std::string>& addresses() const { return spec_.ps; }
  pid_t pid(int ps) const { return daemons_[ps]->process()->pid(); }
  PsAdmin* admin(int ps) { return admins_[ps].get(); }
  // Bytes of tensors the PS served and took (every method), from its /metrics.
  int64_t BytesServed(int ps) const {
    httplib::Client http("127.0.0.1", http_ports_[ps]);
    http.set_read_timeout(10);
    auto r = http.Get("/metrics");
    if (!r || r->status != 200) Die(absl::StrCat("ps:", ps, ": no /metrics"));
    int64_t total = 0;
    std::istringstream in(r->body);
    std::string line;
    while (std::getline(in, line)) {
      if (!absl::StartsWith(line, "psrt_ps_request_bytes_total{")) continue;
      double v = 0;
      if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) total += static_cast<int64_t>(v);
    }
    return total;
  }

 private:
  // A daemon whose lines are kept (for WaitForLine) but not echoed.
  static absl::StatusOr<std::unique_ptr<testing::Daemon>> StartQuiet(const std::string& name,
                                                                     std::vector<std::string> argv) {
    return testing::Daemon::Start(name, std::move(argv));
  }

  testing::TestCluster spec_;
  std::string dir_;
  std::vector<int> http_ports_;
  ChannelCache channels_;
  std::vector<std::unique_ptr<testing::Daemon>> daemons_;
  std::vector<std::unique_ptr<PsAdmin>> admins_;
};

// Resident bytes of a process (VmRSS of /proc/PID/status).
int64_t ResidentBytes(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view v = line;
    if (!absl::ConsumePrefix(&v, "VmRSS:")) continue;
    v = absl::StripAsciiWhitespace(v);
    absl::ConsumeSuffix(&v, " kB");
    int64_t kb = 0;
    if (absl::SimpleAtoi(v, &kb)) return kb * 1024;
  }
  return -1;
}

// MemAvailable of /proc/meminfo, in bytes.
int64_t AvailableBytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view v = line;
    if (!absl::ConsumePrefix(&v, "MemAvailable:")) continue;
    v = absl::StripAsciiWhitespace(v);
    absl::ConsumeSuffix(&v, " kB");
    int64_t kb = 0;
    if (absl::SimpleAtoi(v, &kb)) return kb * 1024;
  }
  return 0;
}

// ---- The limits, measured in this run -----------------------------------

struct Limits {
  double rtt_s = 0;           // one 8-byte exchange, one connection
  double exchanges_per_s = 0;  // 8-byte exchanges, two connections x 16 in flight
  double tcp_bytes_per_s = 0;  // 4 MiB messages, two connections x 4 in flight
  double memcpy_bytes_per_s = 0;
};

// 8-byte exchanges per second on `clients` loopback connections to a
// bench::TcpServer, each a blocking write then read on one thread (no
// helper thread spinning beside it): the kernel's floor for a round trip.
// A TCP connection to a bench::TcpServer at net->host (loopback, or across
// the link) that answers each `up`-byte request with `down` bytes.
int Connect(int port, uint64_t up, uint64_t down) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (::inet_pton(AF_INET, net->host.c_str(), &a.sin_addr) != 1) Die(absl::StrCat("bad address ", net->host));
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    Die(absl::StrCat("connect to ", net->host, ":", port));
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const uint64_t sizes[2] = {up, down};
  if (::write(fd, sizes, sizeof(sizes)) != sizeof(sizes)) Die("loopback header");
  return fd;
}

double PingPong(int port, int clients, double seconds) {
  std::atomic<int64_t> done{0};
  const absl::Time end = absl::Now() + absl::Seconds(seconds);
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      const int fd = Connect(port, 8, 8);
      char buf[8] = {};
      int64_t n = 0;
      while (absl::Now() < end) {
        if (::write(fd, buf, 8) != 8) Die("ping-pong write");
        for (size_t got = 0; got < 8;) {
          const ssize_t r = ::read(fd, buf + got, 8 - got);
          if (r <= 0) Die("ping-pong read");
          got += r;
        }
        ++n;
      }
      done += n;
      ::close(fd);
    });
  }
  for (std::thread& t : threads) t.join();
  return done / seconds;
}

// Bytes per second that `clients` loopback connections to a
// bench::TcpServer carry one way, each thread writing `message`-byte
// requests with blocking writes (the server answers 8 bytes each, left
// unread until the end): the kernel's line rate, with no thread spinning.
double Stream(int port, int clients, double seconds, size_t message) {
  std::atomic<int64_t> bytes{0};
  const absl::Time end = absl::Now() + absl::Seconds(seconds);
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      const int fd = Connect(port, message, 8);
      std::vector<char> out(message, 1);
      int64_t n = 0;
      while (absl::Now() < end) {
        for (size_t put = 0; put < message;) {
          const ssize_t w = ::write(fd, out.data() + put, message - put);
          if (w <= 0) Die("stream write");
          put += w;
        }
        n += message;
      }
      bytes += n;
      ::close(fd);
    });
  }
  for (std::thread& t : threads) t.join();
  return bytes / seconds;
}

// The limits, each the best of `repeats` short measurements (alternated).
Limits MeasureLimits(double seconds, int repeats, bool memcpy) {
  static const int port = net->netns() ? net->echo_port : (new bench::TcpServer("127.0.0.1"))->port();
  Limits l;
  double one = 0, two = 0, rate = 0;
  for (int r = 0; r < repeats; ++r) {
    one = std::max(one, PingPong(port, 1, seconds));
    two = std::max(two, PingPong(port, 2, seconds));
    rate = std::max(rate, Stream(port, 2, seconds, 4 << 20));
  }
  l.rtt_s = 1.0 / one;
  l.exchanges_per_s = two;
  l.tcp_bytes_per_s = rate;
  if (!memcpy) return l;
  const size_t n = 256 << 20;
  std::vector<char> a(n, 1), b(n, 0);
  double best = 1e9;
  for (int i = 0; i < 3; ++i) {
    const absl::Time t = absl::Now();
    std::memcpy(b.data(), a.data(), n);
    best = std::min(best, absl::ToDoubleSeconds(absl::Now() - t));
  }
  l.memcpy_bytes_per_s = n / best;
  return l;
}

void PrintLimits(const Limits& l) {
  std::printf(
      "limits (%s, measured now): TCP round trip %.1f us; %.0f exchanges/s (2 connections); "
      "TCP %.0f MB/s (2 connections, 4 MiB writes); memcpy %.0f MB/s\n",
      net->netns() ? absl::StrCat("across the link at ", RateName(net->bits_per_s)).c_str() : "loopback", l.rtt_s * 1e6,
      l.exchanges_per_s, l.tcp_bytes_per_s / 1e6, l.memcpy_bytes_per_s / 1e6);
  std::fflush(stdout);
}

// Before each point the limits are measured again, briefly, and each
// point's limit is the best the kernel did in this run so far: the load of
// a shared machine only ever makes a measured floor higher than it is.
Limits* best_limits = nullptr;
Limits PointLimits() {
  const Limits now = MeasureLimits(0.15, 2, /*memcpy=*/false);
  Limits& b = *best_limits;
  b.rtt_s = std::min(b.rtt_s, now.rtt_s);
  b.exchanges_per_s = std::max(b.exchanges_per_s, now.exchanges_per_s);
  b.tcp_bytes_per_s = std::max(b.tcp_bytes_per_s, now.tcp_bytes_per_s);
  return b;
}

// ---- Output --------------------------------------------------------------

// One curve: a table on stdout and, with --out_dir, a CSV.
class Curve {
 public:
  Curve(std::string name, std::string title, std::vector<std::string> columns)
      : name_(std::move(name)), columns_(std::move(columns)) {
    std::printf("\n== %s: %s\n", name_.c_str(), title.c_str());
    std::string head;
    for (const std::string& c : columns_) {
      widths_.push_back(std::max<int>(12, static_cast<int>(c.size()) + 2));
      absl::StrAppend(&head, absl::StrFormat("%*s", widths_.back(), c));
    }
    std::printf("%s\n", head.c_str());
    std::fflush(stdout);
    const std::string dir = absl::GetFlag(FLAGS_out_dir);
    if (!dir.empty()) {
      std::filesystem::create_directories(dir);
      csv_.open(absl::StrCat(dir, "/", name_, ".csv"));
      csv_ << "# " << title << "\n" << absl::StrJoin(columns_, ",") << "\n";
    }
  }
  void Row(const std::vector<std::string>& cells) {
    std::string line;
    for (size_t i = 0; i < cells.size(); ++i) {
      absl::StrAppend(&line, absl::StrFormat("%*s", i < widths_.size() ? widths_[i] : 12, cells[i]));
    }
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    if (csv_.is_open()) csv_ << absl::StrJoin(cells, ",") << "\n" << std::flush;
  }
  void Note(const std::string& text) {
    std::printf("   %s\n", text.c_str());
    std::fflush(stdout);
    if (csv_.is_open()) csv_ << "# " << text << "\n" << std::flush;
  }

 private:
  std::string name_;
  std::vector<std::string> columns_;
  std::vector<int> widths_;
  std::ofstream csv_;
};

std::string F(double v, int digits = 2) { return absl::StrFormat("%.*f", digits, v); }

// ---- Lightweight workers -------------------------------------------------

// --role=worker: pulls "w" and pushes a gradient of it, SYNC, warmup +
// worker_steps times; prints "result STEP CPU WAIT PULL PUSH": seconds per
// timed step of the step, this process's CPU and wait for a CPU
// (ProcTimes), and the pull and the push in it.
int WorkerMain() {
  const std::vector<std::string> ps = absl::StrSplit(absl::GetFlag(FLAGS_ps_addresses), ',');
  const int64_t rows = absl::GetFlag(FLAGS_model_rows), cols = absl::GetFlag(FLAGS_model_cols);
  const int worker = absl::GetFlag(FLAGS_worker_index);
  const PlacementMap placement = DensePlacement(rows, cols, static_cast<int>(ps.size()));
  ChannelCache channels;
  PsClientOptions o;
  o.worker = worker;
  o.timeout = absl::Minutes(5);
  // Every PS's channel connected first (on a machine running dozens of
  // processes a handshake can take seconds); after a call refused for want
  // of a connection, the same wait before it is tried again.
  auto connected = [&] {
    for (const std::string& a : ps) {
      if (!channels.Get(a)->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(60))) {
        Die(absl::StrCat("worker ", worker, ": no connection to ", a, " within 60 s"));
      }
    }
  };
  connected();
  PsClient client(placement, ps, &channels, o);
  Tensor grad(DT_FLOAT, TensorShape({rows, cols}));
  grad.flat<float>().setConstant(1.0f);
  const TensorMap dense = {{"w", grad}};
  const int warmup = absl::GetFlag(FLAGS_warmup), steps = absl::GetFlag(FLAGS_worker_steps);
  absl::Time start;
  ProcTimes times;
  absl::Duration pulls, pushes;
  for (int step = 0; step < warmup + steps; ++step) {
    if (step == warmup) {
      start = absl::Now();
      times = ReadProcTimes(::getpid());
      pulls = pushes = absl::ZeroDuration();
    }
    const absl::Time pull_start = absl::Now();
    // As the worker runtime does, a call refused for want of a connection
    // (the PS or the machine too busy to finish a handshake) is tried again.
    absl::StatusOr<TensorMap> w = client.Pull({"w"}, step);
    for (int again = 0; again < 5 && w.status().code() == absl::StatusCode::kUnavailable; ++again) {
      connected();
      w = client.Pull({"w"}, step);
    }
    Check(w.status(), absl::StrCat("worker ", worker, ": pull of step ", step));
    const absl::Time push_start = absl::Now();
    pulls += push_start - pull_start;
    RequestId id;
    id.set_worker(worker);
    id.set_worker_incarnation(1);
    id.set_step(step);
    absl::Status pushed = client.Push(id, dense, {});  // a retry is applied once (the id says so)
    for (int again = 0; again < 5 && pushed.code() == absl::StatusCode::kUnavailable; ++again) {
      connected();
      pushed = client.Push(id, dense, {});
    }
    Check(pushed, absl::StrCat("worker ", worker, ": push of step ", step));
    pushes += absl::Now() - push_start;
  }
  const double took = absl::ToDoubleSeconds(absl::Now() - start);
  times = ReadProcTimes(::getpid()) - times;
  std::printf("result %.9f %.9f %.9f %.9f %.9f\n", took / steps, times.cpu / steps, times.wait / steps,
              absl::ToDoubleSeconds(pulls) / steps, absl::ToDoubleSeconds(pushes) / steps);
  std::fflush(stdout);
  return 0;
}

std::string Self() {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) Die("cannot find this binary (/proc/self/exe)");
  self[n] = 0;
  return self;
}

// One point of a SYNC curve, per step.
struct StepResult {
  double seconds = 0;         // the mean over the workers
  double pull = 0, push = 0;  // of which the pull and the push (the mean)
  ProcTimes worker;           // of one worker (the mean)
  ProcTimes ps;               // of all PS together (warm-up steps counted in)
  LinkBytes link;             // --netns: bytes over the link each way (warm-up steps counted in)
};

// Starts `workers` worker processes against a fresh cluster of `ps` PS
// holding w [rows, cols] (SYNC, SGD); what a step cost, per step.
absl::StatusOr<StepResult> SyncStep(int ps, int workers, int64_t rows, int64_t cols, int steps) {
  Cluster cluster(ps, workers);
  const PlacementMap placement = DensePlacement(rows, cols, ps);
  cluster.Create(placement, "sgd", ConsistencyDef::SYNC, workers);
  const LinkBytes link_before = net->netns() ? ReadLinkBytes() : LinkBytes();
  ProcTimes ps_before;
  for (int i = 0; i < ps; ++i) ps_before = ps_before + ReadProcTimes(cluster.pid(i));
  absl::Mutex mu;
  std::vector<std::vector<double>> results;  // each worker's "result" line
  std::vector<std::string> errors;
  std::vector<std::unique_ptr<Subprocess>> procs;
  const std::string self = Self();
  for (int w = 0; w < workers; ++w) {
    SubprocessOptions so;
    so.argv = {self,
               "--role=worker",
               "--ps_addresses=" + absl::StrJoin(cluster.addresses(), ","),
               absl::StrCat("--worker_index=", w),
               absl::StrCat("--model_rows=", rows),
               absl::StrCat("--model_cols=", cols),
               absl::StrCat("--worker_steps=", steps),
               absl::StrCat("--warmup=", absl::GetFlag(FLAGS_warmup))};
    so.on_line = [&, w](absl::string_view line) {
      absl::MutexLock lock(&mu);
      const std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
      std::vector<double> v(f.size() - 1);
      bool ok = f.size() == 6 && f[0] == "result";
      for (size_t i = 1; ok && i < f.size(); ++i) ok = absl::SimpleAtod(f[i], &v[i - 1]);
      if (ok) {
        results.push_back(v);
      } else if (!line.empty()) {
        errors.push_back(absl::StrCat("worker ", w, ": ", line));
      }
    };
    absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(so);
    Check(p.status(), "starting a worker");
    procs.push_back(*std::move(p));
  }
  for (int w = 0; w < workers; ++w) {
    absl::StatusOr<int> st = procs[w]->Wait(absl::Minutes(10));
    if (!st.ok() || *st != 0) {
      for (auto& p : procs) p->Signal(SIGKILL);
      procs.clear();
      absl::MutexLock lock(&mu);
      return absl::InternalError(absl::StrCat("worker ", w, " failed (",
                                              st.ok() ? DescribeWaitStatus(*st) : st.status().ToString(), "): ",
                                              errors.empty() ? "" : errors[0]));
    }
  }
  procs.clear();  // readers joined: every line is in
  const double all_steps = absl::GetFlag(FLAGS_warmup) + steps;
  StepResult r;
  for (int i = 0; i < ps; ++i) r.ps = r.ps + ReadProcTimes(cluster.pid(i));
  r.ps = r.ps - ps_before;
  r.ps.cpu /= all_steps;
  r.ps.wait /= all_steps;
  if (net->netns()) {
    const LinkBytes after = ReadLinkBytes();
    r.link.down = static_cast<int64_t>((after.down - link_before.down) / all_steps);
    r.link.up = static_cast<int64_t>((after.up - link_before.up) / all_steps);
  }
  absl::MutexLock lock(&mu);
  if (static_cast<int>(results.size()) != workers) return absl::InternalError("a worker printed no result");
  for (const std::vector<double>& v : results) {
    r.seconds += v[0] / workers;
    r.worker.cpu += v[1] / workers;
    r.worker.wait += v[2] / workers;
    r.pull += v[3] / workers;
    r.push += v[4] / workers;
  }
  return r;
}

// ---- Curves --------------------------------------------------------------

// A curve's name: with --netns, which link it crossed ("dense_step_netns_10gbit").
std::string CurveName(const std::string& name) {
  return net->netns() ? absl::StrCat(name, "_netns_", RateName(net->bits_per_s)) : name;
}
std::string Where() {
  return net->netns()
             ? absl::StrCat("PS and workers in two network namespaces, veth under tc tbf ", RateName(net->bits_per_s))
             : "loopback";
}

void NullCurve(const std::vector<int>& workers, const std::vector<int>& ps_counts) {
  std::vector<std::string> columns = {"ps", "workers", "step_ms", "bytes", "limit_ms", "ratio", "vs_1_worker"};
  if (net->netns()) columns.insert(columns.end(), {"wire_B_down", "wire_B_up"});
  Curve c(CurveName("null_step"),
          absl::StrCat("SYNC null step (4 bytes on each PS, pull then push) against worker processes and PS (", Where(),
                       "); limit = max(2 round trips, 2 x workers x PS exchanges at the kernel's "
                       "exchange rate)"),
          columns);
  const int steps = absl::GetFlag(FLAGS_steps);
  for (int ps : ps_counts) {
    double first = 0;
    for (int n : workers) {
      const Limits l = PointLimits();
      const absl::StatusOr<StepResult> step = SyncStep(ps, n, ps, 1, steps);
      if (!step.ok()) {
        c.Row({absl::StrCat(ps), absl::StrCat(n), "failed"});
        c.Note(std::string(step.status().message()).substr(0, 400));
        continue;
      }
      const double t = step->seconds;
      if (first == 0) first = t;
      const double limit = std::max(2 * l.rtt_s, 2.0 * n * ps / l.exchanges_per_s);
      const int64_t bytes = 2LL * n * ps * 4;
      std::vector<std::string> row = {absl::StrCat(ps),  absl::StrCat(n), F(t * 1e3, 3), absl::StrCat(bytes),
                                      F(limit * 1e3, 3), F(t / limit),    F(t / first)};
      if (net->netns()) row.insert(row.end(), {absl::StrCat(step->link.down), absl::StrCat(step->link.up)});
      c.Row(row);
    }
  }
  c.Note("TensorFlow (OSDI 2016, Fig. 7, synchronous null step): 1.8 ms at 1 worker, 8.8 ms at 100 (4.9x).");
  c.Note(absl::StrCat("This machine has ", std::thread::hardware_concurrency(),
                      " cores: past that many worker processes the step measures the cores' time-sharing "
                      "as much as the protocol."));
  if (net->netns()) {
    c.Note(
        "wire_B_*: bytes per step through our veth end (TCP/IP and gRPC framing included; warm-up steps and "
        "connection set-up averaged in).");
  }
}

// With --netns, a dense point's limit is the link's: its bytes down (the
// pulls) then up (the pushes) at the tbf rate, in series as a SYNC step
// moves them (see the file comment); `duplex` is the larger direction alone.
void DenseCurve(const std::vector<int>& workers) {
  std::vector<std::string> columns =
      absl::StrSplit("model_MB,ps,workers,step_ms,MB_moved,limit_ms,ratio,vs_1_worker", ',');
  std::string limit_text = "limit = max(2 round trips, bytes at the loopback TCP rate)";
  if (net->netns()) {
    columns = absl::StrSplit(
        "model_MB,ps,workers,step_ms,pull_ms,push_ms,MB_down,MB_up,wire_MB_down,wire_MB_up,limit_ms,ratio,duplex_ms,"
        "tcp_ms,ratio_tcp,ps_cpu_ms,ps_wait_ms,wk_cpu_ms,wk_wait_ms,vs_1_worker",
        ',');
    limit_text = absl::StrCat(
        "limit = (MB_down + MB_up) x 8 / ", RateName(net->bits_per_s),
        " (a SYNC step's pulls then pushes, in series); duplex = max(MB_down, MB_up) x 8 / rate; tcp = the bytes "
        "at the best rate a plain TCP stream reached across the same link in this run; cpu / wait = CPU ms per "
        "step of all PS / of one worker, and ms their threads waited runnable for a core");
  }
  Curve c(CurveName("dense_step"),
          absl::StrCat("SYNC dense step (pull the whole model, push its gradient; SGD on the PS) against worker "
                       "processes (",
                       Where(), "); ", limit_text),
          columns);
  const int64_t budget = absl::GetFlag(FLAGS_worker_memory_mb) << 20;
  for (int64_t mb : List<int64_t>("dense_mb", absl::GetFlag(FLAGS_dense_mb))) {
    const int64_t cols = 256, rows = mb * 1000000 / (cols * 4);
    const double model = rows * cols * 4.0;
    for (int ps : List<int>("dense_ps_counts", absl::GetFlag(FLAGS_dense_ps_counts))) {
      double first = 0;
      for (int n : workers) {
        if (2.0 * n * model > budget) {
          c.Note(absl::StrCat(mb, " MB x ", n, " workers skipped: they would hold ", F(2.0 * n * model / 1e9, 1),
                              " GB (--worker_memory_mb=", budget >> 20, ")"));
          continue;
        }
        // The workers' model and gradient, and the PS's model, gradient sum
        // and a request being read: past --keep_free_mb, skipped.
        const double need = (2.0 * n + 3) * model;
        if (AvailableBytes() - need < (absl::GetFlag(FLAGS_keep_free_mb) << 20)) {
          c.Note(absl::StrCat(mb, " MB x ", n, " workers skipped: about ", F(need / 1e9, 1),
                              " GB would leave less "
                              "than --keep_free_mb=",
                              absl::GetFlag(FLAGS_keep_free_mb), " MiB available"));
          continue;
        }
        const Limits l = PointLimits();
        const double moved = 2.0 * n * model;
        const double limit =
            net->netns() ? moved * 8 / net->bits_per_s : std::max(2 * l.rtt_s, moved / l.tcp_bytes_per_s);
        const int steps = std::clamp(static_cast<int>(absl::GetFlag(FLAGS_point_seconds) / (3 * limit)), 3,
                                     absl::GetFlag(FLAGS_steps));
        const absl::StatusOr<StepResult> step = SyncStep(ps, n, rows, cols, steps);
        if (!step.ok()) {
          c.Row({absl::StrCat(mb), absl::StrCat(ps), absl::StrCat(n), "failed"});
          c.Note(std::string(step.status().message()).substr(0, 400));
          continue;
        }
        const double t = step->seconds;
        if (first == 0) first = t;
        if (!net->netns()) {
          c.Row({absl::StrCat(mb), absl::StrCat(ps), absl::StrCat(n), F(t * 1e3, 1), F(moved / 1e6, 0),
                 F(limit * 1e3, 1), F(t / limit), F(t / first)});
          continue;
        }
        const double duplex = moved / 2 * 8 / net->bits_per_s, tcp = moved / l.tcp_bytes_per_s;
        c.Row({absl::StrCat(mb),
               absl::StrCat(ps),
               absl::StrCat(n),
               F(t * 1e3, 1),
               F(step->pull * 1e3, 1),
               F(step->push * 1e3, 1),
               F(moved / 2e6, 0),
               F(moved / 2e6, 0),
               F(step->link.down / 1e6, 1),
               F(step->link.up / 1e6, 1),
               F(limit * 1e3, 1),
               F(t / limit),
               F(duplex * 1e3, 1),
               F(tcp * 1e3, 1),
               F(t / tcp),
               F(step->ps.cpu * 1e3, 0),
               F(step->ps.wait * 1e3, 0),
               F(step->worker.cpu * 1e3, 0),
               F(step->worker.wait * 1e3, 0),
               F(t / first)});
      }
    }
  }
  c.Note("TensorFlow (OSDI 2016, Fig. 7, synchronous): 100 MB 147 ms at 1 worker -> 613 ms at 100; 1 GB 1.01 s -> "
         "7.16 s (over a real network, 16 PS).");
}

// Ids of a table of `rows`: uniform, or Zipf(s) ranks (inverse CDF of the
// continuous power law on [1, rows + 1)) scattered over the table by a
// multiplicative hash, so hot rows are not neighbours, as hashed ids are not.
class IdSource {
 public:
  IdSource(int64_t rows, double s, uint64_t seed, bool scatter = true)
      : rows_(rows), s_(s), scatter_(scatter), rng_(seed) {}
  int64_t Next() {
    std::uniform_real_distribution<double> u(0.0, 1.0);
    uint64_t rank;
    if (s_ == 0) {
      rank = static_cast<uint64_t>(u(rng_) * rows_);
    } else {
      const double a = 1 - s_;
      const double x = std::pow(1 + u(rng_) * (std::pow(rows_ + 1.0, a) - 1), 1 / a);
      rank = static_cast<uint64_t>(x) - 1;
    }
    rank = std::min<uint64_t>(rank, rows_ - 1);
    return static_cast<int64_t>(scatter_ ? (rank * 2654435761ULL) % rows_ : rank);
  }
  // `draws` ids, deduplicated (as a worker sends a batch's unique ids).
  Tensor Batch(int draws) {
    std::set<int64_t> ids;
    for (int i = 0; i < draws; ++i) ids.insert(Next());
    Tensor t(DT_INT64, TensorShape({static_cast<int64_t>(ids.size())}));
    int64_t* p = t.data<int64_t>();
    for (int64_t id : ids) *p++ = id;
    return t;
  }

 private:
  int64_t rows_;
  double s_;
  bool scatter_;
  std::mt19937_64 rng_;
};

std::string SkewName(double s) { return s == 0 ? "uniform" : absl::StrCat("zipf", s); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Table rows that fit beside --keep_free_mb (a multiple of 10^7, else of
// 10^6), or `rows` when it fits; 0 when not even 10^6 does.
int64_t RowsThatFit(int64_t rows, int64_t bytes_per_row) {
  const double avail = AvailableBytes() - (absl::GetFlag(FLAGS_keep_free_mb) << 20);
  const double per_row = bytes_per_row * 1.15;  // the table's own overhead, measured in the memory curve
  if (rows * per_row <= avail) return rows;
  for (int64_t unit : {10000000LL, 1000000LL}) {
    const int64_t fit = static_cast<int64_t>(avail / per_row) / unit * unit;
    if (fit >= unit) return fit;
  }
  return 0;
}

void SparseCurve(Curve* c, int64_t asked_rows, int64_t dim) {
  const int64_t raw_per_row = 3 * dim * 4;  // values + Adam's two slots
  const int64_t rows = RowsThatFit(asked_rows, raw_per_row);
  if (rows != asked_rows) {
    c->Note(absl::StrCat(asked_rows, " x ", dim, " (", F(asked_rows * raw_per_row / 1e9, 1),
                         " GB raw with Adam's slots) does not fit beside ", absl::GetFlag(FLAGS_keep_free_mb),
                         " MiB kept free (", F(AvailableBytes() / 1e9, 1), " GB available): ",
                         rows > 0 ? absl::StrCat("measuring ", rows, " rows instead") : "skipped"));
    if (rows == 0) return;
  }
  Cluster cluster(1, 1);
  const PlacementMap placement = TablePlacement(rows, dim, 1, /*hash=*/false);
  const absl::Time made = absl::Now();
  cluster.Create(placement, "adam", ConsistencyDef::ASYNC, 1);
  const double create_s = absl::ToDoubleSeconds(absl::Now() - made);
  std::unique_ptr<PsClient> client = cluster.Client(placement, 0);
  const int ops = absl::GetFlag(FLAGS_sparse_ops);
  int64_t step = 0;
  for (int draws : List<int>("read_rows", absl::GetFlag(FLAGS_read_rows))) {
    for (double s : List<double>("skews", absl::GetFlag(FLAGS_skews))) {
      const Limits l = PointLimits();
      IdSource src(rows, s, 1234 + draws);
      std::vector<double> reads, writes;
      double unique = 0;
      for (int i = 0; i < ops + 2; ++i) {
        Tensor ids = src.Batch(draws);
        unique += ids.shape().dim(0);
        absl::Time t = absl::Now();
        absl::StatusOr<TensorMap> got = client->PullRows({{"emb", ids}}, 0);
        Check(got.status(), "PullRows");
        if (i >= 2) reads.push_back(absl::ToDoubleSeconds(absl::Now() - t));
        Tensor g(DT_FLOAT, TensorShape({ids.shape().dim(0), dim}));
        g.flat<float>().setConstant(0.5f);
        RequestId id;
        id.set_worker(0);
        id.set_worker_incarnation(1);
        id.set_step(step++);
        t = absl::Now();
        Check(client->Push(id, {}, {{"emb", {ids, g}}}), "push of rows");
        if (i >= 2) writes.push_back(absl::ToDoubleSeconds(absl::Now() - t));
      }
      unique /= ops + 2;
      const double bytes = unique * (dim * 4 + 8);
      const double limit = l.rtt_s + bytes / l.tcp_bytes_per_s;
      const double r = Median(reads), w = Median(writes);
      c->Row({absl::StrCat(rows), absl::StrCat(dim), absl::StrCat(draws), SkewName(s), F(unique, 0),
              F(r * 1e3, 3), F(w * 1e3, 3), F(bytes / 1e3, 1), F(limit * 1e3, 3), F(r / limit), F(w / limit)});
    }
  }
  c->Note(absl::StrCat(rows, " x ", dim, ": made (zeros, Adam) in ", F(create_s, 1), " s; PS RSS ",
                       F(ResidentBytes(cluster.pid(0)) / 1e9, 2), " GB for ", F(rows * raw_per_row / 1e9, 2),
                       " GB raw"));
}

void SparseCurves() {
  Curve c("sparse",
          "PullRows and a push of rows (Adam, ASYNC) on one PS, median of --sparse_ops; ids drawn then "
          "deduplicated; limit = a round trip + bytes (rows and ids) at the loopback TCP rate",
          {"table_rows", "dim", "draws", "ids", "unique", "read_ms", "write_ms", "KB", "limit_ms", "read/limit",
           "write/limit"});
  for (int64_t dim : List<int64_t>("table_dims", absl::GetFlag(FLAGS_table_dims))) {
    for (int64_t rows : List<int64_t>("table_rows", absl::GetFlag(FLAGS_table_rows))) {
      SparseCurve(&c, rows, dim);
    }
  }
  c.Note("TensorFlow (OSDI 2016, Fig. 7): sparse reads of 32 rows 5-20 ms whether the table is 1 GB or 16 GB.");
}

// Bytes per row of a hash table on one PS (Adam, rows made on first
// touch by pushes), from the PS's RSS, at each power of ten of rows.
void MemoryCurve() {
  const int64_t dim = absl::GetFlag(FLAGS_memory_dim);
  const int64_t raw = 3 * dim * 4;
  int64_t target = absl::GetFlag(FLAGS_memory_rows);
  Curve c("memory",
          absl::StrCat("bytes per row of a hash table [*, ", dim, "] with Adam on one PS (rows made on first touch "
                       "by pushes): the PS's VmRSS growth over rows, against the raw 3 x dim x 4 = ",
                       raw, " bytes"),
          {"rows", "rss_MB", "bytes/row", "raw", "ratio", "ps_counted/row"});
  const int64_t fits = RowsThatFit(target, raw * 2);
  if (fits < target) {
    c.Note(absl::StrCat(target, " rows do not fit beside --keep_free_mb; measuring ", fits));
    target = fits;
  }
  Cluster cluster(1, 1);
  const PlacementMap placement = TablePlacement(0, dim, 1, /*hash=*/true);
  cluster.Create(placement, "adam", ConsistencyDef::ASYNC, 1);
  std::unique_ptr<PsClient> client = cluster.Client(placement, 0);
  const int64_t base = ResidentBytes(cluster.pid(0));
  const int64_t chunk = 65536;
  Tensor g(DT_FLOAT, TensorShape({chunk, dim}));
  g.flat<float>().setConstant(0.5f);
  int64_t made = 0, step = 0, next_report = 100000;
  while (made < target) {
    const int64_t n = std::min(chunk, target - made);
    Tensor ids(DT_INT64, TensorShape({n}));
    // Spread like hashed ids: distinct, far apart.
    for (int64_t i = 0; i < n; ++i) ids.data<int64_t>()[i] = (made + i) * 1000003LL + 7;
    Tensor gn = n == chunk ? g : Tensor(DT_FLOAT, TensorShape({n, dim}));
    if (n != chunk) gn.flat<float>().setConstant(0.5f);
    RequestId id;
    id.set_worker(0);
    id.set_worker_incarnation(1);
    id.set_step(step++);
    Check(client->Push(id, {}, {{"emb", {ids, gn}}}), "push of new rows");
    made += n;
    if (made >= next_report || made == target) {
      const int64_t rss = ResidentBytes(cluster.pid(0));
      absl::StatusOr<PsStatusResponse> st = cluster.admin(0)->Status();
      Check(st.status(), "Status");
      const double per_row = static_cast<double>(rss - base) / made;
      c.Row({absl::StrCat(made), F(rss / 1e6, 0), F(per_row, 1), absl::StrCat(raw), F(per_row / raw),
             F(static_cast<double>(st->bytes()) / made, 1)});
      while (next_report <= made) next_report *= 10;
    }
  }
  c.Note(absl::StrCat("base RSS (empty table) ", F(base / 1e6, 0), " MB"));
}

// 4 PS, Zipf ids: each PS's bytes (from its own /metrics) against the mean.
void HotKeyCurve() {
  const int ps = absl::GetFlag(FLAGS_hot_ps);
  const int steps = absl::GetFlag(FLAGS_hot_steps);
  Curve c("hotkeys",
          absl::StrCat("bytes each of ", ps, " PS served (its /metrics: pull answers + push requests) over ", steps,
                       " steps of a pull and a push of a batch's rows; busiest / mean PS (goal <= 1.5)"),
          {"table", "ids", "skew", "draws", "busiest_MB", "mean_MB", "max/mean"});
  const int64_t rows = absl::GetFlag(FLAGS_quick) ? 100000 : 10000000;
  const int64_t dim = 16;
  for (bool hash : {false, true}) {
    for (bool scatter : {true, false}) {
      for (double s : {0.0, 1.1}) {
        for (int draws : {1024, 65536}) {
          if (absl::GetFlag(FLAGS_quick) && draws > 1024) continue;
          Cluster cluster(ps, 1);
          const PlacementMap placement = TablePlacement(rows, dim, ps, hash);
          cluster.Create(placement, "adam", ConsistencyDef::ASYNC, 1);
          std::unique_ptr<PsClient> client = cluster.Client(placement, 0);
          std::vector<int64_t> before(ps);
          for (int p = 0; p < ps; ++p) before[p] = cluster.BytesServed(p);
          IdSource src(rows, s, 99, scatter);
          for (int step = 0; step < steps; ++step) {
            Tensor ids = src.Batch(draws);
            Check(client->PullRows({{"emb", ids}}, 0).status(), "PullRows");
            Tensor g(DT_FLOAT, TensorShape({ids.shape().dim(0), dim}));
            g.flat<float>().setConstant(0.5f);
            RequestId id;
            id.set_worker(0);
            id.set_worker_incarnation(1);
            id.set_step(step);
            Check(client->Push(id, {}, {{"emb", {ids, g}}}), "push of rows");
          }
          double busiest = 0, sum = 0;
          for (int p = 0; p < ps; ++p) {
            const double b = cluster.BytesServed(p) - before[p];
            busiest = std::max(busiest, b);
            sum += b;
          }
          const double mean = sum / ps;
          c.Row({hash ? "hash(id%ps)" : "fixed(range)", scatter ? "scattered" : "by-rank", SkewName(s),
                 absl::StrCat(draws), F(busiest / 1e6, 1), F(mean / 1e6, 1), F(busiest / mean)});
        }
      }
    }
  }
  c.Note("ids 'by-rank': id = the id's frequency rank (a vocabulary sorted by count); 'scattered': ranks spread "
         "over the table by a multiplicative hash.");
}

int Main() {
  const bool quick = absl::GetFlag(FLAGS_quick);
  if (quick) {
    absl::SetFlag(&FLAGS_workers, "1,2,4");
    absl::SetFlag(&FLAGS_ps_counts, "1,2");
    absl::SetFlag(&FLAGS_dense_ps_counts, "1,2");
    absl::SetFlag(&FLAGS_dense_mb, "1");
    absl::SetFlag(&FLAGS_steps, 10);
    absl::SetFlag(&FLAGS_table_rows, "100000");
    absl::SetFlag(&FLAGS_table_dims, "16");
    absl::SetFlag(&FLAGS_read_rows, "32,1024");
    absl::SetFlag(&FLAGS_skews, "0,1.1");
    absl::SetFlag(&FLAGS_sparse_ops, 5);
    absl::SetFlag(&FLAGS_memory_rows, 100000);
    absl::SetFlag(&FLAGS_hot_steps, 20);
    absl::SetFlag(&FLAGS_keep_free_mb, 1024);
  }
  const std::vector<std::string> curves = absl::StrSplit(absl::GetFlag(FLAGS_curves), ',', absl::SkipEmpty());
  auto wanted = [&](const char* s) { return std::find(curves.begin(), curves.end(), s) != curves.end(); };
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  std::printf("scale_bench%s: %u cores, load average %.2f %.2f %.2f, %.1f GB available; %s\n", quick ? " --quick" : "",
              std::thread::hardware_concurrency(), load[0], load[1], load[2], AvailableBytes() / 1e9, Where().c_str());
  best_limits = new Limits(MeasureLimits(absl::GetFlag(FLAGS_quick) ? 0.2 : 0.5, 3, /*memcpy=*/true));
  PrintLimits(*best_limits);
  const std::vector<int> workers = List<int>("workers", absl::GetFlag(FLAGS_workers));
  if (wanted("null")) NullCurve(workers, List<int>("ps_counts", absl::GetFlag(FLAGS_ps_counts)));
  if (wanted("dense")) DenseCurve(workers);
  for (const char* other : {"sparse", "memory", "hotkeys"}) {
    if (net->netns() && wanted(other)) std::printf("\n(--netns: the %s curve is measured on loopback only)\n", other);
  }
  if (!net->netns() && wanted("sparse")) SparseCurves();
  if (!net->netns() && wanted("memory")) MemoryCurve();
  if (!net->netns() && wanted("hotkeys")) HotKeyCurve();
  std::printf("\nthe best limits of the run (each point's limit used the best up to it):\n");
  PrintLimits(*best_limits);
  getloadavg(load, 3);
  std::printf("scale_bench: done; load average %.2f %.2f %.2f\n", load[0], load[1], load[2]);
  return 0;
}

// --role=echo (in the PS's namespace): a plain TCP server for the limits
// across the link; prints "port N" and serves until killed.
int EchoMain() {
  bench::TcpServer tcp("0.0.0.0");
  std::printf("port %d\n", tcp.port());
  std::fflush(stdout);
  while (true) ::pause();
}

// --role=netns_driver (in the workers' namespace): the curves of one rate,
// the PS daemons and the echo server in --server_ns.
int NetnsDriverMain() {
  net->server_ns = absl::GetFlag(FLAGS_server_ns);
  net->host = bench::NetnsPair::server_address();
  net->bits_per_s = absl::GetFlag(FLAGS_link_bits);
  net->interface = absl::GetFlag(FLAGS_link_if);
  if (net->server_ns.empty() || net->bits_per_s <= 0 || net->interface.empty()) {
    Die("--role=netns_driver wants --server_ns, --link_bits and --link_if");
  }
  absl::Mutex mu;
  int port = 0;
  SubprocessOptions so;
  so.argv = bench::NetnsPair::In(net->server_ns, {Self(), "--role=echo"});
  so.on_line = [&](absl::string_view line) {
    absl::MutexLock lock(&mu);
    if (port == 0 && absl::ConsumePrefix(&line, "port ") && absl::SimpleAtoi(line, &port)) return;
    std::fprintf(stderr, "[echo] %.*s\n", static_cast<int>(line.size()), line.data());
  };
  absl::StatusOr<std::unique_ptr<Subprocess>> echo = Subprocess::Start(so);
  Check(echo.status(), "starting the echo server");
  {
    absl::MutexLock lock(&mu);
    if (!mu.AwaitWithTimeout(absl::Condition(
                                 +[](int* p) { return *p != 0; }, &port),
                             absl::Seconds(60))) {
      Die("the echo server across the link did not start");
    }
    net->echo_port = port;
  }
  const int rc = Main();
  echo->reset();  // killed and reaped
  return rc;
}

// --netns: makes the namespaces, then for each --rates runs a driver in the
// workers' namespace (the PS daemons go in the other). Skips (exit 0) with
// a message when namespaces cannot be made; removes them on every way out.
int NetnsMain() {
  std::vector<int64_t> rates;
  for (absl::string_view r : absl::StrSplit(absl::GetFlag(FLAGS_rates), ',', absl::SkipEmpty())) {
    absl::StatusOr<int64_t> bits = bench::ParseRate(std::string(r));
    Check(bits.status(), "--rates");
    rates.push_back(*bits);
  }
  absl::StatusOr<std::unique_ptr<bench::NetnsPair>> pair = bench::NetnsPair::CreateRemovedOnSignals();
  if (!pair.ok()) {
    std::printf(
        "scale_bench --netns: skipped, cannot make network namespaces (run as root or with CAP_NET_ADMIN "
        "and CAP_SYS_ADMIN): %s\n",
        std::string(pair.status().message()).c_str());
    return pair.status().code() == absl::StatusCode::kPermissionDenied ? 0 : 1;
  }
  bench::NetnsPair* p = pair->get();
  std::vector<std::string> pass = {"--workers=" + absl::GetFlag(FLAGS_netns_workers),
                                   "--ps_counts=" + absl::GetFlag(FLAGS_netns_ps),
                                   "--dense_ps_counts=" + absl::GetFlag(FLAGS_netns_ps),
                                   "--ps_binary=" + std::filesystem::absolute(absl::GetFlag(FLAGS_ps_binary)).string()};
  for (const char* f : {"quick", "curves", "dense_mb", "steps", "point_seconds", "worker_memory_mb", "keep_free_mb",
                        "out_dir", "warmup"}) {
    pass.push_back(absl::StrCat("--", f, "=", absl::FindCommandLineFlag(f)->CurrentValue()));
  }
  std::printf(
      "scale_bench --netns: PS daemons in %s at %s, the driver and its workers in %s, a veth pair with tc "
      "tbf on both ends\n",
      p->server_ns().c_str(), bench::NetnsPair::server_address(), p->client_ns().c_str());
  std::fflush(stdout);
  for (int64_t bits : rates) {
    Check(p->SetRate(bits), "tc tbf");
    std::printf("\n-- rate %s\n", RateName(bits).c_str());
    std::fflush(stdout);
    std::vector<std::string> argv = {Self(), "--role=netns_driver", "--server_ns=" + p->server_ns(),
                                     absl::StrCat("--link_bits=", bits), "--link_if=" + p->client_if()};
    argv.insert(argv.end(), pass.begin(), pass.end());
    SubprocessOptions o;
    o.argv = bench::NetnsPair::In(p->client_ns(), argv);  // writes straight to our stdout
    absl::StatusOr<std::unique_ptr<Subprocess>> driver = Subprocess::Start(o);
    Check(driver.status(), "starting the driver");
    absl::StatusOr<int> st = (*driver)->Wait();
    if (!st.ok() || *st != 0) {
      std::fprintf(stderr, "scale_bench --netns: the driver at %s failed (%s)\n", RateName(bits).c_str(),
                   st.ok() ? DescribeWaitStatus(*st).c_str() : std::string(st.status().message()).c_str());
      return 1;
    }
  }
  return 0;  // `pair` removes the namespaces
}

}  // namespace
}  // namespace scale
}  // namespace psrt

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = 1;
  google::InitGoogleLogging(argv[0]);
  const std::string role = absl::GetFlag(FLAGS_role);
  if (role == "worker") return psrt::scale::WorkerMain();
  if (role == "echo") return psrt::scale::EchoMain();
  if (role == "netns_driver") return psrt::scale::NetnsDriverMain();
  if (absl::GetFlag(FLAGS_netns)) return psrt::scale::NetnsMain();
  return psrt::scale::Main();
}
