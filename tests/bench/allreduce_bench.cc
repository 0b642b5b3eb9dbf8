// All-reduce bus bandwidth on loopback: psrt's TcpRingCollective against
// Gloo's ring all-reduce (gloo::AllreduceRingChunked and AllreduceRing over
// gloo::transport::tcp) and against raw TCP moving the same bytes.
//
// For each process count P, each implementation runs in P fresh forked
// processes (one per rank, all on 127.0.0.1). Each rank runs `warmup`
// untimed calls then `iters` timed ones per size; rank 0 reports the median
// seconds per call. Each implementation gets `repeats` fresh groups,
// interleaved with the others, and keeps its best median. Bus bandwidth as NCCL-tests defines it:
//   busbw = 2 * (P-1) / P * bytes / seconds.
// The raw-TCP baseline is the ring's data movement without any reduction:
// each rank streams 2*(P-1)/P * bytes to rank+1 while receiving the same
// from rank-1 (non-blocking sockets + poll, same buffer sizes as ours;
// `tcp_thread` does the same with a sender thread and blocking calls).
//
//   bazel build //tests/bench:allreduce_bench
//   bazel-bin/tests/bench/allreduce_bench --procs=2,3,4 --sizes_mib=1,4,16,64
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/collective/tcp_ring.h"
#include "gloo/allreduce_ring.h"
#include "gloo/allreduce_ring_chunked.h"
#include "gloo/barrier_all_to_all.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"

ABSL_FLAG(std::string, procs, "2,3,4", "Process counts.");
ABSL_FLAG(std::string, sizes_mib, "1,4,16,64", "All-reduce sizes in MiB of float32.");
ABSL_FLAG(std::string, impls, "ours,gloo_ring,gloo_chunked,tcp",
          "Implementations to run: ours, gloo_ring, gloo_chunked, tcp (one thread + poll), "
          "tcp_thread (a sender thread + blocking receive).");
ABSL_FLAG(int, warmup, 2, "Untimed calls per size.");
ABSL_FLAG(int, iters, 9, "Timed calls per size (the median is reported).");
ABSL_FLAG(int, repeats, 3,
          "Fresh process groups per implementation, interleaved; the best median is kept "
          "(this machine is shared, so the best run is the least disturbed one).");
ABSL_FLAG(int, chunk_kib, 512, "Our pipelining chunk (TcpRingOptions::chunk_bytes).");
ABSL_FLAG(int, sockbuf_kib, 4096, "SO_SNDBUF/SO_RCVBUF for ours and raw TCP; 0 = autotuning.");

namespace psrt {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<int> ParseInts(const std::string& s) {
  std::vector<int> out;
  for (absl::string_view p : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    int v = 0;
    if (absl::SimpleAtoi(p, &v)) out.push_back(v);
  }
  return out;
}

// CPU seconds used by this process, all threads (Gloo's included).
double CpuNow() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Times `call(floats)` for each size; returns the median seconds per size,
// then the mean CPU seconds per call per size.
std::vector<double> TimeSizes(const std::vector<size_t>& floats, const std::function<void(size_t, int)>& call) {
  std::vector<double> out, cpu;
  for (size_t si = 0; si < floats.size(); ++si) {
    for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) call(si, -1);
    std::vector<double> t;
    const double cpu_start = CpuNow();
    for (int i = 0; i < absl::GetFlag(FLAGS_iters); ++i) {
      double start = Now();
      call(si, i);
      t.push_back(Now() - start);
    }
    out.push_back(Median(t));
    cpu.push_back((CpuNow() - cpu_start) / std::max(1, absl::GetFlag(FLAGS_iters)));
  }
  out.insert(out.end(), cpu.begin(), cpu.end());
  return out;
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "allreduce_bench: %s\n", what.c_str());
  std::fflush(stderr);
  _exit(1);
}

// ---------------------------------------------------------------- ours
std::vector<double> RunOurs(int rank, int P, CollectiveListener* listener, const std::vector<std::string>& peers,
                            const std::vector<size_t>& floats) {
  TcpRingOptions o;
  o.rank = rank;
  o.size = P;
  o.peers = peers;
  o.group_id = 1;
  o.token = "benchmark-token-0123456789";
  o.chunk_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_chunk_kib)) << 10;
  o.socket_buffer_bytes = absl::GetFlag(FLAGS_sockbuf_kib) << 10;
  auto ring = TcpRingCollective::Create(listener, o);
  if (!ring.ok()) Die(ring.status().ToString());
  std::vector<float> data(*std::max_element(floats.begin(), floats.end()), 1.0f);
  return TimeSizes(floats, [&](size_t si, int) {
    absl::Status st = (*ring)->AllReduceSum(data.data(), floats[si]);
    if (!st.ok()) Die(st.ToString());
  });
}

// ---------------------------------------------------------------- Gloo
std::vector<double> RunGloo(int rank, int P, const std::string& dir, bool chunked,
                            const std::vector<size_t>& floats) {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(dir);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, P);
  ctx->connectFullMesh(store, dev);
  std::vector<float> data(*std::max_element(floats.begin(), floats.end()), 1.0f);
  std::vector<std::unique_ptr<gloo::Algorithm>> algos;
  for (size_t n : floats) {
    if (chunked) {
      algos.push_back(std::make_unique<gloo::AllreduceRingChunked<float>>(
          ctx, std::vector<float*>{data.data()}, static_cast<int>(n)));
    } else {
      algos.push_back(std::make_unique<gloo::AllreduceRing<float>>(
          ctx, std::vector<float*>{data.data()}, static_cast<int>(n)));
    }
  }
  std::vector<double> t = TimeSizes(floats, [&](size_t si, int) { algos[si]->run(); });
  // Gloo's pairs throw when a peer closes first: leave together.
  gloo::BarrierAllToAll(ctx).run();
  return t;
}

// ---------------------------------------------------------------- raw TCP
int Tune(int fd) {
  int one = 1, buf = absl::GetFlag(FLAGS_sockbuf_kib) << 10;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (buf > 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
  }
  return fd;
}

// `threaded`: blocking sockets, a sender thread per call and the receive
// loop on the calling thread (the design alternative to one thread + poll).
std::vector<double> RunTcp(int rank, int P, CollectiveListener* listener, const std::vector<int>& ports,
                           bool threaded, const std::vector<size_t>& floats) {
  // Connect to rank+1 (retrying until it listens: the listeners were bound
  // before fork, so connect succeeds at once) and accept rank-1.
  int out = Tune(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(ports[(rank + 1) % P]);
  if (::connect(out, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) Die("connect");
  int flags = ::fcntl(listener->fd(), F_GETFL, 0);
  ::fcntl(listener->fd(), F_SETFL, flags & ~O_NONBLOCK);
  int in = ::accept(listener->fd(), nullptr, nullptr);
  if (in < 0) Die("accept");
  Tune(in);
  const size_t max_bytes = *std::max_element(floats.begin(), floats.end()) * sizeof(float);
  std::vector<char> src(max_bytes, 1), dst(max_bytes);
  const size_t piece = 1 << 20;
  if (threaded) {
    return TimeSizes(floats, [&](size_t si, int) {
      const size_t total = 2 * (P - 1) * (floats[si] * sizeof(float) / P);
      std::thread sender([&] {
        for (size_t sent = 0; sent < total;) {
          ssize_t k = ::send(out, src.data() + sent % max_bytes,
                             std::min({piece, total - sent, max_bytes - sent % max_bytes}), MSG_NOSIGNAL);
          if (k <= 0) Die("send");
          sent += k;
        }
      });
      for (size_t got = 0; got < total;) {
        ssize_t k = ::recv(in, dst.data() + got % max_bytes, std::min({piece, total - got, max_bytes - got % max_bytes}), 0);
        if (k <= 0) Die("recv");
        got += k;
      }
      sender.join();
    });
  }
  ::fcntl(out, F_SETFL, ::fcntl(out, F_GETFL, 0) | O_NONBLOCK);
  ::fcntl(in, F_SETFL, ::fcntl(in, F_GETFL, 0) | O_NONBLOCK);
  return TimeSizes(floats, [&](size_t si, int) {
    const size_t total = 2 * (P - 1) * (floats[si] * sizeof(float) / P);
    size_t sent = 0, got = 0;
    while (sent < total || got < total) {
      bool progress = false;
      if (sent < total) {
        ssize_t k = ::send(out, src.data() + sent % max_bytes, std::min({piece, total - sent, max_bytes - sent % max_bytes}),
                           MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) sent += k, progress = true;
        else if (k < 0 && errno != EAGAIN) Die("send");
      }
      if (got < total) {
        ssize_t k = ::recv(in, dst.data() + got % max_bytes, std::min({piece, total - got, max_bytes - got % max_bytes}),
                           MSG_DONTWAIT);
        if (k > 0) got += k, progress = true;
        else if (k == 0 || (k < 0 && errno != EAGAIN)) Die("recv");
      }
      if (!progress) {
        pollfd p[2] = {{out, static_cast<short>(sent < total ? POLLOUT : 0), 0},
                       {in, static_cast<short>(got < total ? POLLIN : 0), 0}};
        ::poll(p, 2, 1000);
      }
    }
  });
}

// Forks P ranks running `impl`; returns rank 0's TimeSizes.
std::vector<double> RunGroup(const std::string& impl, int P, const std::vector<size_t>& floats) {
  std::vector<std::unique_ptr<CollectiveListener>> listeners;
  std::vector<std::string> peers;
  std::vector<int> ports;
  for (int r = 0; r < P; ++r) {
    auto l = CollectiveListener::Bind("127.0.0.1", 0);
    if (!l.ok()) Die(l.status().ToString());
    ports.push_back((*l)->port());
    peers.push_back(absl::StrCat("127.0.0.1:", (*l)->port()));
    listeners.push_back(std::move(*l));
  }
  char dir_template[] = "/tmp/allreduce_bench_XXXXXX";
  std::string dir = impl.rfind("gloo", 0) == 0 ? ::mkdtemp(dir_template) : "";
  int fds[2];
  if (::pipe(fds) != 0) Die("pipe");
  std::vector<pid_t> pids;
  for (int r = 0; r < P; ++r) {
    pid_t pid = ::fork();
    if (pid < 0) Die("fork");
    if (pid == 0) {
      ::close(fds[0]);
      std::vector<double> t;
      if (impl == "ours") t = RunOurs(r, P, listeners[r].get(), peers, floats);
      else if (impl == "gloo_ring") t = RunGloo(r, P, dir, false, floats);
      else if (impl == "gloo_chunked") t = RunGloo(r, P, dir, true, floats);
      else if (impl == "tcp") t = RunTcp(r, P, listeners[r].get(), ports, false, floats);
      else if (impl == "tcp_thread") t = RunTcp(r, P, listeners[r].get(), ports, true, floats);
      else Die(absl::StrCat("unknown implementation ", impl));
      if (r == 0 && ::write(fds[1], t.data(), t.size() * sizeof(double)) < 0) Die("write");
      _exit(0);
    }
    pids.push_back(pid);
  }
  ::close(fds[1]);
  std::vector<double> t(2 * floats.size(), 0);
  size_t got = 0;
  char* p = reinterpret_cast<char*>(t.data());
  for (ssize_t k; got < t.size() * sizeof(double) && (k = ::read(fds[0], p + got, t.size() * sizeof(double) - got)) > 0;) got += k;
  ::close(fds[0]);
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      Die(absl::StrCat(impl, " rank failed: ", WIFSIGNALED(status) ? absl::StrCat("signal ", WTERMSIG(status)) : absl::StrCat("exit ", WEXITSTATUS(status))));
    }
  }
  if (!dir.empty()) (void)!std::system(absl::StrCat("rm -rf ", dir).c_str());
  return t;
}

int Main() {
  const std::vector<int> procs = ParseInts(absl::GetFlag(FLAGS_procs));
  std::vector<size_t> floats;
  for (int mib : ParseInts(absl::GetFlag(FLAGS_sizes_mib))) floats.push_back((size_t{1} << 20) * mib / 4);
  std::vector<std::string> impls = absl::StrSplit(absl::GetFlag(FLAGS_impls), ',', absl::SkipEmpty());
  std::printf("busbw GB/s = 2(P-1)/P * bytes / best of %d groups' median seconds; %d timed calls after %d warm-up; chunk %d KiB, sockbuf %d KiB\n",
              absl::GetFlag(FLAGS_repeats), absl::GetFlag(FLAGS_iters), absl::GetFlag(FLAGS_warmup), absl::GetFlag(FLAGS_chunk_kib),
              absl::GetFlag(FLAGS_sockbuf_kib));
  std::printf("%2s %6s", "P", "MiB");
  for (const auto& impl : impls) std::printf(" %12s", impl.c_str());
  std::printf(" %10s %9s\n", "ours/gloo", "ours/tcp");  // against the better of each
  for (int P : procs) {
    std::map<std::string, std::vector<double>> t;
    for (int rep = 0; rep < absl::GetFlag(FLAGS_repeats); ++rep) {
      for (const auto& impl : impls) {
        std::vector<double> run = RunGroup(impl, P, floats);
        auto [it, fresh] = t.emplace(impl, run);
        for (size_t si = 0; !fresh && si < run.size(); ++si) it->second[si] = std::min(it->second[si], run[si]);
      }
    }
    for (size_t si = 0; si < floats.size(); ++si) {
      const double bytes = floats[si] * 4.0;
      auto busbw = [&](const std::string& impl) {
        auto it = t.find(impl);
        return it == t.end() || it->second[si] <= 0 ? 0.0 : 2.0 * (P - 1) / P * bytes / it->second[si] / 1e9;
      };
      std::printf("%2d %6.0f", P, bytes / (1 << 20));
      for (const auto& impl : impls) std::printf(" %12.2f", busbw(impl));
      const double gloo = std::max(busbw("gloo_ring"), busbw("gloo_chunked"));
      const double ours = busbw("ours"), tcp = std::max(busbw("tcp"), busbw("tcp_thread"));
      std::printf(" %10.2f %9.2f\n", gloo > 0 ? ours / gloo : 0.0, tcp > 0 ? ours / tcp : 0.0);
      std::fflush(stdout);
    }
    // The same bytes per CPU-second of rank 0: what the bandwidth would be
    // if the CPU were the only limit; much less sensitive to other load.
    for (size_t si = 0; si < floats.size(); ++si) {
      const double bytes = floats[si] * 4.0;
      std::printf("%2d %6.0f", P, bytes / (1 << 20));
      for (const auto& impl : impls) {
        const double cpu = t[impl][floats.size() + si];
        std::printf(" %12.2f", cpu > 0 ? 2.0 * (P - 1) / P * bytes / cpu / 1e9 : 0.0);
      }
      std::printf("   (GB per CPU-second, rank 0)\n");
    }
  }
  return 0;
}

}  // namespace
}  // namespace psrt

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return psrt::Main();
}
