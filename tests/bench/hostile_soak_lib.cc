#include "tests/bench/hostile_soak_lib.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/buffer_pool.h"
#include "common/net/socket.h"
#include "common/plan/job_planner.h"
#include "common/rpc/channel_cache.h"
#include "common/rpc/security.h"
#include "common/subprocess.h"
#include "common/transport/ps_frame.h"
#include "common/transport/ps_wire.h"
#include "common/transport/tcp_frame.h"
#include "common/transport/tcp_frame_io.h"
#include "grpcpp/generic/generic_stub.h"
#include "proto/chief_service.grpc.pb.h"
#include "proto/ps_service.grpc.pb.h"
#include "tests/harness/training_cluster.h"

namespace psrt {
namespace soak {
namespace {

using testing::Daemon;

using testing::RssKb;

int64_t OpenFds(pid_t pid) {
  std::error_code ec;
  int64_t n = 0;
  for (auto it = std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/fd"), ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

RpcOptions TokenOptions(const std::string& certs, const std::string& role) {
  SecurityPaths p;
  p.token_file = certs + "/tokens/" + role;
  RpcOptions o;
  absl::StatusOr<TransportSecurity> s = LoadTransportSecurity(p);
  if (s.ok()) o.security = *s;
  return o;
}

// One unary call through the callback API (as the daemons make theirs):
// `start(ctx, done)` starts it.
grpc::Status Call(absl::Duration timeout,
                  const std::function<void(grpc::ClientContext*, std::function<void(grpc::Status)>)>& start) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::Status status;
  absl::Notification done;
  start(&ctx, [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

// A non-blocking socket from `source` (empty: the kernel's choice)
// connecting to 127.0.0.1:port; -1 on failure.
int ConnectFrom(const std::string& source, int port, bool blocking) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (blocking ? 0 : SOCK_NONBLOCK), 0);
  if (fd < 0) return -1;
  if (!source.empty()) {
    sockaddr_in from{};
    from.sin_family = AF_INET;
    ::inet_pton(AF_INET, source.c_str(), &from.sin_addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0) {
      ::close(fd);
      return -1;
    }
  }
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& bytes, absl::Time deadline) {
  return net::IoExact(fd, const_cast<char*>(bytes.data()), bytes.size(), true, deadline, nullptr, "soak").ok();
}

// Whether the peer has closed `fd` (or sent something, which for these
// clients means a refusal verdict that the close follows).
bool PeerSpoke(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

std::string Frame(const tcpframe::Header& h, const grpc::ByteBuffer& payload) {
  std::string wire;
  const std::unique_ptr<tcpframe::OutFrame> frame = tcpframe::Encode(h, "", payload);
  for (const iovec& v : frame->iov()) wire.append(static_cast<const char*>(v.iov_base), v.iov_len);
  return wire;
}

// Stranger connections (no credentials) held open at a daemon's ports:
// what Run's and MirroredRun's attacks share. Each of up to `connections`
// sockets (the descriptor limit, raised to its hard maximum, may cap them)
// comes from one of `sources` loopback addresses, 127.0.<subnet + k/254>.
// <2 + k%254>; the n-th one opened goes to targets[n % targets.size()],
// trickles one byte of its target's bytes every 2 s (none: silent) and is
// opened again when the daemon closes it or the connect fails.
struct StrangerPlan {
  struct Target {
    int port = 0;
    std::string bytes;  // trickled one byte every 2 s; empty: silent
  };
  // What the daemon saying anything means.
  enum class OnWord {
    // A refusal verdict the close follows: drop the socket at once.
    kDrop,
    // A hello the daemon sends first, then waits (the ring's acceptor):
    // read it and keep the socket until end of stream.
    kReadUntilEof,
  };
  std::vector<Target> targets;
  int connections = 0;
  int sources = 1;
  int subnet = 1;
  int open_per_tick = 200;  // at most ten times this a second: churn, not a CPU benchmark
  OnWord on_word = OnWord::kDrop;
};

// What one tick of RunStrangers saw: counts since the last tick, and the
// sockets open now.
struct StrangerTick {
  int64_t opened = 0, connect_failed = 0, closed_by_peer = 0, bytes_read = 0;
  int open = 0;
};

// Adds a tick's counts to a SoakRun's or RingRun's stranger figures.
template <typename Result>
void AddStrangerTick(const StrangerTick& t, Result& r) {
  r.stranger_opened += t.opened;
  r.stranger_connect_failed += t.connect_failed;
  r.stranger_closed_by_peer += t.closed_by_peer;
  r.stranger_open_peak = std::max<int64_t>(r.stranger_open_peak, t.open);
}

// Runs `plan` until `stop` says so; `report` hears every tick (100 ms).
void RunStrangers(const StrangerPlan& plan, const std::function<bool()>& stop,
                  const std::function<void(const StrangerTick&)>& report) {
  rlimit lim{};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &lim);
  // Headroom for the daemons' pipes, gRPC and the other clients.
  const int target = static_cast<int>(std::min<int64_t>(plan.connections, static_cast<int64_t>(lim.rlim_cur) - 512));
  struct Conn {
    int fd = -1;
    const StrangerPlan::Target* to = nullptr;
    size_t sent = 0;
    absl::Time next_byte;
  };
  std::vector<Conn> conns(std::max(target, 0));
  int64_t n = 0;
  char sink[256];
  while (!stop()) {
    const absl::Time now = absl::Now();
    int opened = 0;
    StrangerTick tick;
    for (Conn& c : conns) {
      if (c.fd >= 0 && PeerSpoke(c.fd)) {
        bool closed = true;
        if (plan.on_word == StrangerPlan::OnWord::kReadUntilEof) {
          const ssize_t got = ::recv(c.fd, sink, sizeof(sink), MSG_DONTWAIT);
          if (got > 0) tick.bytes_read += got;
          closed = got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
        }
        if (closed) {
          ::close(c.fd);
          c.fd = -1;
          ++tick.closed_by_peer;
        }
      }
      if (c.fd < 0 && opened < plan.open_per_tick) {
        ++n;
        const int64_t k = n % plan.sources;
        const std::string source = absl::StrCat("127.0.", plan.subnet + k / 254, ".", 2 + k % 254);
        c.to = &plan.targets[n % plan.targets.size()];
        c.fd = ConnectFrom(source, c.to->port, /*blocking=*/false);
        c.sent = 0;
        c.next_byte = now + absl::Seconds(2);
        ++opened;
        ++(c.fd >= 0 ? tick.opened : tick.connect_failed);
      }
      if (c.fd >= 0 && now >= c.next_byte) {
        const std::string& bytes = c.to->bytes;
        if (c.sent < bytes.size() && ::send(c.fd, bytes.data() + c.sent, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1) {
          ++c.sent;
        }
        c.next_byte = now + absl::Seconds(2);
      }
      tick.open += c.fd >= 0 ? 1 : 0;
    }
    report(tick);
    absl::SleepFor(absl::Milliseconds(100));  // the tick
  }
  for (Conn& c : conns) {
    if (c.fd >= 0) ::close(c.fd);
  }
}

// The cluster, its job and the clients around it.
class Run {
 public:
  Run(const SoakOptions& o, bool attack, const std::string& name) : o_(o), attack_(attack), name_(name) {
    result_.attacked = attack;
  }

  SoakRun Go() {
    if (!Start()) return result_;
    std::thread sampler([this] { Sample(); });
    std::thread probe([this] { Probe(); });
    const int64_t from = o_.steps / 5, until = o_.steps * 7 / 10;
    WaitForStep(from);
    phase_ = 1;
    std::vector<std::thread> attackers;
    if (attack_) {
      attackers.emplace_back([this] { Strangers(); });
      attackers.emplace_back([this] { HoardTickets(); });
      for (int i = 0; i < o_.stalled_frames; ++i) attackers.emplace_back([this] { StallFrame(); });
      for (int i = 0; i < o_.pull_flooders; ++i) attackers.emplace_back([this] { FloodPulls(); });
      for (int i = 0; i < o_.exchange_flooders; ++i) attackers.emplace_back([this] { FloodExchange(); });
    }
    WaitForStep(until);
    stop_attack_ = true;
    for (std::thread& t : attackers) t.join();
    phase_ = 2;
    after_from_ = absl::Now() + absl::Seconds(3);
    absl::StatusOr<int> exit = chief_->Wait(absl::Minutes(10));
    stop_ = true;
    sampler.join();
    probe.join();
    result_.finished = exit.ok() && WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0;
    std::ifstream in(dir_ + "/summary.json");
    std::stringstream ss;
    ss << in.rdbuf();
    result_.summary = ss.str();
    result_.accuracy = testing::SummaryNumber(result_.summary, "\"accuracy\": ([0-9.e+-]+)");
    result_.wall_seconds = testing::SummaryNumber(result_.summary, "\"wall_seconds\": ([0-9.e+-]+)");
    return result_;
  }

 private:
  bool Start() {
    dir_ = absl::StrCat(o_.dir, "/", name_);
    std::filesystem::create_directories(dir_);
    certs_ = dir_ + "/certs";
    const std::string make_certs = testing::RunfilePath("deploy/make_certs.sh");
    std::vector<std::string> names = {"chief", "ps-0"};
    for (int i = 0; i < o_.workers; ++i) names.push_back(absl::StrCat("worker-", i));
    std::string cmd = make_certs + " " + certs_;
    for (const std::string& n : names) cmd += " " + n;
    if (std::system((cmd + " >/dev/null 2>&1").c_str()) != 0) return Fail("make_certs.sh failed");
    absl::StatusOr<testing::TestCluster> c = testing::MakeTestCluster(1, o_.workers, name_);
    if (!c.ok()) return Fail(std::string(c.status().message()));
    cluster_ = *c;
    absl::StatusOr<TrainingJob> job = LoadJob(testing::RunfilePath("examples/fashion_mnist_mlp.pbtxt"));
    if (!job.ok()) return Fail(std::string(job.status().message()));
    job->set_steps(o_.steps);
    job->set_epochs(0);
    job->mutable_checkpoint()->set_dir(dir_ + "/ckpt");
    job->mutable_checkpoint()->set_every_steps(0);
    job->mutable_eval()->set_every_steps(0);
    job->clear_log_dir();
    job->set_summary_path(dir_ + "/summary.json");
    absl::StatusOr<JobPlan> plan = PlanJob(*job, 1);
    if (!plan.ok()) return Fail(std::string(plan.status().message()));
    for (const auto& [variable, node] : plan->gradient_node) variables_.push_back(variable);
    const std::string job_path = testing::WriteJobFile(*job, dir_ + "/job.pbtxt");
    auto start = [&](const std::string& binary, const std::string& task, const std::string& role,
                     std::vector<std::string> extra) -> std::unique_ptr<Daemon> {
      std::vector<std::string> argv = {testing::RunfilePath(binary), "--cluster_spec=" + cluster_.spec_path,
                                       "--task=" + task, "--auth_token_file=" + certs_ + "/tokens/" + role};
      argv.insert(argv.end(), extra.begin(), extra.end());
      absl::StatusOr<std::unique_ptr<Daemon>> d = Daemon::Start(absl::StrCat(name_, " ", task), argv);
      return d.ok() ? *std::move(d) : nullptr;
    };
    std::vector<std::string> ps_flags = {"--snapshot_dir=" + dir_};
    ps_flags.insert(ps_flags.end(), o_.ps_flags.begin(), o_.ps_flags.end());
    ps_ = start("ps/server", "ps:0", "ps", ps_flags);
    for (int i = 0; i < o_.workers; ++i) {
      workers_.push_back(start("worker/main", absl::StrCat("worker:", i), "worker", {"--threads=1"}));
    }
    chief_ = start("chief/main", "chief:0", "chief", {"--job=" + job_path, "--threads=1"});
    if (ps_ == nullptr || chief_ == nullptr) return Fail("a daemon did not start");
    const std::string line = ps_->WaitForMatch("TCP data plane on port [0-9]+", absl::Seconds(60));
    std::smatch m;
    if (!std::regex_search(line, m, std::regex("TCP data plane on port ([0-9]+)"))) {
      return Fail("the PS offers no TCP data plane");
    }
    data_port_ = std::stoi(m[1]);
    chief_port_ = std::stoi(cluster_.chief.substr(cluster_.chief.rfind(':') + 1));
    if (!chief_->WaitForLine("chief serving at", absl::Seconds(60))) return Fail("the chief did not serve");
    return true;
  }

  bool Fail(const std::string& why) {
    result_.probe_last_error = "setup: " + why;
    return false;
  }

  void WaitForStep(int64_t step) {
    std::shared_ptr<grpc::Channel> channel = MakeChannel(cluster_.chief, TokenOptions(certs_, "observer"));
    std::unique_ptr<Chief::Stub> stub = Chief::NewStub(channel);
    const absl::Time end = absl::Now() + absl::Minutes(10);
    while (absl::Now() < end) {
      JobStatusRequest req;
      JobStatusResponse st;
      grpc::Status s = Call(absl::Seconds(5), [&](grpc::ClientContext* ctx, std::function<void(grpc::Status)> done) {
        stub->async()->JobStatus(ctx, &req, &st, std::move(done));
      });
      if (s.ok() && (st.step() >= step || st.state() == JobStatusResponse::DONE)) return;
      // Polls the job's step; also sees the chief end (its status is kept).
      if (chief_->Wait(absl::Milliseconds(200)).ok()) return;
    }
  }

  // The PS's and chief's RSS and the PS's descriptors, every 250 ms.
  void Sample() {
    while (!stop_) {
      const int64_t ps = RssKb(ps_->process()->pid()), chief = RssKb(chief_->process()->pid());
      const int64_t fds = OpenFds(ps_->process()->pid());
      const int phase = phase_;
      {
        absl::MutexLock lock(&mu_);
        auto bump = [&](Rss* r, int64_t kb) {
          if (kb < 0 || (phase == 2 && absl::Now() < after_from_)) return;
          int64_t* slot = phase == 0 ? &r->before_kb : phase == 1 ? &r->during_kb : &r->after_kb;
          *slot = std::max(*slot, kb);
        };
        bump(&result_.ps, ps);
        bump(&result_.chief, chief);
        result_.ps_fds_peak = std::max(result_.ps_fds_peak, fds);
      }
      absl::SleepFor(absl::Milliseconds(250));  // the sampling period
    }
  }

  // A ticket for the worker token, or the status that refused it.
  absl::StatusOr<OpenDataPlaneResponse> Ticket(ParameterServer::Stub* stub) {
    OpenDataPlaneRequest req;
    OpenDataPlaneResponse r;
    grpc::Status s = Call(absl::Seconds(10), [&](grpc::ClientContext* ctx, std::function<void(grpc::Status)> done) {
      stub->async()->OpenDataPlane(ctx, &req, &r, std::move(done));
    });
    if (!s.ok()) return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
    return r;
  }

  // Connects from 127.0.0.1 and presents a ticket; the descriptor
  // (non-blocking) once admitted, else -1 with `why`.
  int Admitted(const std::string& ticket, std::string* why) {
    int fd = ConnectFrom("", data_port_, /*blocking=*/false);
    if (fd < 0) {
      *why = "connect failed";
      return -1;
    }
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    uint8_t verdict[tcpframe::kVerdictHeaderBytes];
    if (!SendAll(fd, tcpframe::EncodeHello(ticket), deadline) ||
        !net::IoExact(fd, verdict, sizeof(verdict), false, deadline, nullptr, "soak").ok()) {
      *why = "hello not answered";
      ::close(fd);
      return -1;
    }
    grpc::StatusCode code;
    uint32_t n = 0;
    if (!tcpframe::DecodeVerdictHeader(verdict, &code, &n).ok() || code != grpc::StatusCode::OK) {
      std::string message(std::min<uint32_t>(n, 1024), '\0');
      (void)net::IoExact(fd, message.data(), message.size(), false, deadline, nullptr, "soak");
      *why = absl::StrCat("refused: ", message);
      ::close(fd);
      return -1;
    }
    return fd;
  }

  grpc::ByteBuffer PullAll() const {
    pswire::PullArgs a;
    a.variables = variables_;
    a.worker = 0;
    a.step = 0;
    return pswire::EncodePull(a);
  }

  // Every 500 ms, as a worker would reconnect: ticket, connect, hello, one pull.
  void Probe() {
    std::shared_ptr<grpc::Channel> channel = MakeChannel(cluster_.ps[0], TokenOptions(certs_, "worker"));
    std::unique_ptr<ParameterServer::Stub> stub = ParameterServer::NewStub(channel);
    const std::string pull = [&] {
      tcpframe::Header h;
      h.method = psframe::Method::kPull;
      h.timeout_ms = 10000;
      h.call_id = 1;
      return Frame(h, PullAll());
    }();
    while (!stop_) {
      const absl::Time begin = absl::Now();
      if (phase_ == 1 || !attack_) {
        absl::StatusOr<OpenDataPlaneResponse> t = Ticket(stub.get());
        std::string why;
        int fd = -1;
        const absl::Time connect = absl::Now();
        if (t.ok()) fd = Admitted(t->ticket(), &why);
        const double slot_ms = absl::ToDoubleMilliseconds(absl::Now() - connect);
        bool pulled = false;
        double pull_ms = 0;
        if (fd >= 0) {
          // The reader blocks: for at most 10 s a read.
          ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) & ~O_NONBLOCK);
          timeval tv{10, 0};
          ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
          const absl::Time sent = absl::Now();
          tcpframe::FrameReader reader(fd, BufferPool::Create(), 64 << 20, "soak");
          std::shared_ptr<TensorBuffer> body;
          absl::StatusOr<tcpframe::Header> over = absl::UnknownError("");
          pulled = SendAll(fd, pull, sent + absl::Seconds(10)) && reader.Next(&body, &over, true).ok();
          pull_ms = absl::ToDoubleMilliseconds(absl::Now() - sent);
          if (!pulled) why = "the pull was not answered";
          ::close(fd);
        }
        absl::MutexLock lock(&mu_);
        ++result_.probes;
        if (!t.ok()) {
          ++result_.probe_ticket_refusals;
          why = absl::StrCat("no ticket: ", t.status().message());
        }
        if (t.ok() && fd >= 0) result_.probe_slot_wait_max_ms = std::max(result_.probe_slot_wait_max_ms, slot_ms);
        if (pulled) result_.probe_pull_max_ms = std::max(result_.probe_pull_max_ms, pull_ms);
        if (!pulled) {
          ++result_.probe_failures;
          result_.probe_last_error = why;
        }
      }
      absl::SleepFor(
          std::max(absl::ZeroDuration(), begin + absl::Milliseconds(500) - absl::Now()));  // the probe's period
    }
  }

  // Up to o_.connections sockets from o_.sources addresses, nine in ten to
  // the PS's data port trickling a hello, one in ten to the chief's gRPC
  // port trickling HTTP/2's preface; dropped as soon as a daemon speaks.
  void Strangers() {
    StrangerPlan plan{/*targets=*/{}, o_.connections, o_.sources, /*subnet=*/1, /*open_per_tick=*/500,
                      StrangerPlan::OnWord::kDrop};
    const std::string hello = tcpframe::EncodeHello(std::string(tcpframe::kTicketBytes, 'x'));
    plan.targets.push_back({chief_port_, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"});
    for (int i = 1; i < 10; ++i) plan.targets.push_back({data_port_, hello});
    RunStrangers(
        plan, [this] { return stop_attack_ || stop_; },
        [this](const StrangerTick& t) {
          absl::MutexLock lock(&mu_);
          AddStrangerTick(t, result_);
        });
  }

  // Takes every ticket the PS will give the worker token, and more, never
  // using one.
  void HoardTickets() {
    std::shared_ptr<grpc::Channel> channel = MakeChannel(cluster_.ps[0], TokenOptions(certs_, "worker"));
    std::unique_ptr<ParameterServer::Stub> stub = ParameterServer::NewStub(channel);
    while (!stop_attack_ && !stop_) {
      absl::StatusOr<OpenDataPlaneResponse> t = Ticket(stub.get());
      {
        absl::MutexLock lock(&mu_);
        ++(t.ok() ? result_.tickets_taken : result_.tickets_refused);
      }
      if (!t.ok()) absl::SleepFor(absl::Milliseconds(100));  // the hoarder's pace once refused
    }
  }

  // A connection with a frame announcing 512 MiB that stalls after 1 KiB;
  // reopened when the PS ends it.
  void StallFrame() {
    std::shared_ptr<grpc::Channel> channel = MakeChannel(cluster_.ps[0], TokenOptions(certs_, "worker"));
    std::unique_ptr<ParameterServer::Stub> stub = ParameterServer::NewStub(channel);
    tcpframe::Header h;
    h.method = psframe::Method::kPush;
    h.timeout_ms = 60000;
    std::string filler(1024, 'z');
    grpc::Slice slice(filler);
    std::string frame = Frame(h, grpc::ByteBuffer(&slice, 1));
    const uint64_t announced = uint64_t{512} << 20;
    for (int i = 0; i < 8; ++i) frame[i] = static_cast<char>(announced >> (8 * i));
    while (!stop_attack_ && !stop_) {
      absl::StatusOr<OpenDataPlaneResponse> t = Ticket(stub.get());
      std::string why;
      int fd = t.ok() ? Admitted(t->ticket(), &why) : -1;
      if (fd < 0 || !SendAll(fd, frame, absl::Now() + absl::Seconds(10))) {
        if (fd >= 0) ::close(fd);
        absl::SleepFor(absl::Milliseconds(200));  // the retry pace
        continue;
      }
      {
        absl::MutexLock lock(&mu_);
        ++result_.stalled_opened;
      }
      while (!stop_attack_ && !stop_ && !PeerSpoke(fd)) absl::SleepFor(absl::Milliseconds(100));  // the stall
      if (PeerSpoke(fd)) {
        absl::MutexLock lock(&mu_);
        ++result_.stalled_closed_by_peer;
      }
      ::close(fd);
    }
  }

  // Pulls of every variable, sent as fast as the PS takes them, never read.
  void FloodPulls() {
    std::shared_ptr<grpc::Channel> channel = MakeChannel(cluster_.ps[0], TokenOptions(certs_, "worker"));
    std::unique_ptr<ParameterServer::Stub> stub = ParameterServer::NewStub(channel);
    const grpc::ByteBuffer pull = PullAll();
    uint64_t call = 0;
    while (!stop_attack_ && !stop_) {
      absl::StatusOr<OpenDataPlaneResponse> t = Ticket(stub.get());
      std::string why;
      int fd = t.ok() ? Admitted(t->ticket(), &why) : -1;
      if (fd < 0) {
        absl::SleepFor(absl::Milliseconds(200));  // the retry pace
        continue;
      }
      while (!stop_attack_ && !stop_) {
        tcpframe::Header h;
        h.method = psframe::Method::kPull;
        h.timeout_ms = 60000;
        h.call_id = ++call;
        const std::string frame = Frame(h, pull);
        // Whole frames only (a frame cut short would be malformed): as long
        // as the PS takes a while to read on, until it disconnects us or
        // the attack ends.
        absl::Status s = net::IoExact(fd, const_cast<char*>(frame.data()), frame.size(), true,
                                      absl::Now() + absl::Minutes(10), &stop_attack_, "soak");
        if (!s.ok()) break;
        absl::MutexLock lock(&mu_);
        ++result_.pulls_sent;
      }
      ::close(fd);
      absl::MutexLock lock(&mu_);
      ++result_.flood_reconnects;
    }
  }

  // Pull frames of every variable over one Exchange stream of the worker
  // token, written as fast as gRPC takes them, no answer ever read; a new
  // stream (on a new channel: a new connection) when the PS ends one.
  void FloodExchange() {
    class Flood : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
     public:
      Flood(const std::atomic<bool>* stop, grpc::ByteBuffer frame) : stop_(stop), frame_(std::move(frame)) {}
      void Begin(grpc::GenericStub* stub) {
        stub->PrepareBidiStreamingCall(&ctx_, psframe::kExchangeMethod, grpc::StubOptions(), this);
        StartWrite(&frame_);
        StartCall();
      }
      void OnWriteDone(bool ok) override {
        if (!ok) return;  // the stream is over
        if (stop_->load()) {
          ctx_.TryCancel();
          return;
        }
        sent_.fetch_add(1);
        StartWrite(&frame_);
      }
      void OnDone(const grpc::Status&) override {
        absl::MutexLock lock(&mu_);
        done_ = true;
      }
      // Waits for the stream's end (the PS's, or the attack's: it cancels
      // the stream then): frames sent.
      int64_t Wait(const std::atomic<bool>* stop) {
        while (true) {
          {
            absl::MutexLock lock(&mu_);
            if (mu_.AwaitWithTimeout(absl::Condition(&done_), absl::Milliseconds(100))) break;
          }
          if (stop->load()) ctx_.TryCancel();
        }
        return sent_.load();
      }

     private:
      const std::atomic<bool>* const stop_;
      grpc::ByteBuffer frame_;
      grpc::ClientContext ctx_;
      std::atomic<int64_t> sent_{0};
      absl::Mutex mu_;
      bool done_ ABSL_GUARDED_BY(mu_) = false;
    };
    psframe::RequestHeader h;
    h.method = psframe::Method::kPull;
    h.timeout_ms = 60000;
    const grpc::ByteBuffer frame = psframe::EncodeRequest(h, PullAll());
    std::vector<std::unique_ptr<Flood>> floods;
    while (!stop_attack_ && !stop_) {
      std::shared_ptr<grpc::Channel> channel = MakeChannel(cluster_.ps[0], TokenOptions(certs_, "worker"));
      grpc::GenericStub stub(channel);
      // Kept to the end: OnDone may still be returning when Wait does.
      floods.push_back(std::make_unique<Flood>(&stop_attack_, frame));
      floods.back()->Begin(&stub);
      const int64_t sent = floods.back()->Wait(&stop_attack_);
      {
        absl::MutexLock lock(&mu_);
        result_.exchange_frames_sent += sent;
        ++result_.exchange_streams;
      }
      if (!stop_attack_) absl::SleepFor(absl::Milliseconds(200));  // the retry pace
    }
  }

  const SoakOptions o_;
  const bool attack_;
  const std::string name_;
  std::string dir_, certs_;
  testing::TestCluster cluster_;
  std::vector<std::string> variables_;
  std::unique_ptr<Daemon> ps_, chief_;
  std::vector<std::unique_ptr<Daemon>> workers_;
  int data_port_ = 0, chief_port_ = 0;
  std::atomic<int> phase_{0};  // 0 before the attack, 1 during, 2 after
  std::atomic<bool> stop_attack_{false}, stop_{false};
  absl::Time after_from_ = absl::InfiniteFuture();

  absl::Mutex mu_;
  SoakRun result_ ABSL_GUARDED_BY(mu_);
};

// The mirrored job, worker:1 killed and restarted mid-run, strangers at
// the collective ports (RingOptions).
class MirroredRun {
 public:
  MirroredRun(const RingOptions& o, bool attack, const std::string& name) : o_(o), attack_(attack), name_(name) {
    result_.attacked = attack;
  }

  RingRun Go() {
    if (!Start()) return Result();
    const int64_t from = o_.steps / 5, until = o_.steps * 7 / 10;
    if (!WaitForStep(from, absl::Minutes(10))) {
      Fail("the job never reached the attack's first step");
    } else {
      std::thread strangers;
      if (attack_) strangers = std::thread([this] { Strangers(); });
      if (attack_) {
        // The kill comes once the strangers have opened as many connections
        // as they hold at once (the ports' queues are full), or after
        // kill_after_seconds at most.
        absl::MutexLock lock(&mu_);
        auto opened = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return result_.stranger_opened >= o_.connections; };
        mu_.AwaitWithTimeout(absl::Condition(&opened), absl::Seconds(o_.kill_after_seconds));
      }
      KillAndRestart();
      WaitForStep(until, absl::Minutes(10));
      stop_attack_ = true;
      if (strangers.joinable()) strangers.join();
    }
    absl::StatusOr<int> exit = chief_->Wait(absl::Minutes(10));
    {
      absl::MutexLock lock(&mu_);
      result_.finished = exit.ok() && WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0;
      std::ifstream in(dir_ + "/summary.json");
      std::stringstream ss;
      ss << in.rdbuf();
      result_.summary = ss.str();
      result_.accuracy = testing::SummaryNumber(result_.summary, "\"accuracy\": ([0-9.e+-]+)");
      result_.wall_seconds = testing::SummaryNumber(result_.summary, "\"wall_seconds\": ([0-9.e+-]+)");
      result_.failures_survived =
          static_cast<int64_t>(testing::SummaryNumber(result_.summary, "\"failures_survived\": ([0-9]+)"));
    }
    for (std::unique_ptr<Daemon>& w : workers_) {
      if (w != nullptr) (void)w->Wait(absl::Seconds(30));
    }
    return Result();
  }

 private:
  RingRun Result() {
    absl::MutexLock lock(&mu_);
    return result_;
  }

  bool Fail(const std::string& why) {
    absl::MutexLock lock(&mu_);
    if (result_.error.empty()) result_.error = why;
    return false;
  }

  std::unique_ptr<Daemon> StartDaemon(const std::string& task, const std::vector<std::string>& argv) {
    absl::StatusOr<std::unique_ptr<Daemon>> d = Daemon::Start(absl::StrCat(name_, " ", task), argv);
    return d.ok() ? *std::move(d) : nullptr;
  }

  bool Start() {
    dir_ = absl::StrCat(o_.dir, "/", name_);
    std::filesystem::create_directories(dir_);
    certs_ = dir_ + "/certs";
    const std::string make_certs = testing::RunfilePath("deploy/make_certs.sh");
    if (std::system((make_certs + " " + certs_ + " chief worker-0 worker-1 >/dev/null 2>&1").c_str()) != 0) {
      return Fail("make_certs.sh failed");
    }
    absl::StatusOr<testing::TestCluster> c = testing::MakeTestCluster(0, 2, name_);
    if (!c.ok()) return Fail(std::string(c.status().message()));
    cluster_ = *c;
    absl::StatusOr<TrainingJob> job = LoadJob(testing::RunfilePath("examples/fashion_mnist_mlp_mirrored.pbtxt"));
    if (!job.ok()) return Fail(std::string(job.status().message()));
    job->set_steps(o_.steps);
    job->set_epochs(0);
    job->mutable_strategy()->mutable_multi_worker_mirrored()->set_collective_timeout_ms(2000);
    job->mutable_checkpoint()->set_dir(dir_ + "/ckpt");
    job->mutable_checkpoint()->set_every_steps(std::max<int64_t>(100, o_.steps / 20));
    job->mutable_eval()->set_every_steps(0);
    job->mutable_failure()->set_heartbeat_timeout_ms(2000);
    // The restarted worker is waited for, not dropped from the group.
    job->mutable_failure()->set_sync_wait_for_worker_ms(120000);
    job->clear_log_dir();
    job->set_summary_path(dir_ + "/summary.json");
    const std::string job_path = testing::WriteJobFile(*job, dir_ + "/job.pbtxt");
    for (int i = 0; i < 2; ++i) {
      absl::StatusOr<int> port = PickFreePort();
      if (!port.ok()) return Fail(std::string(port.status().message()));
      ring_ports_.push_back(*port);
      worker_argv_.push_back({testing::RunfilePath("worker/main"), "--cluster_spec=" + cluster_.spec_path,
                              absl::StrCat("--task=worker:", i), "--auth_token_file=" + certs_ + "/tokens/worker",
                              "--threads=1", "--snapshot_dir=" + dir_, absl::StrCat("--collective_port=", *port)});
      workers_.push_back(StartDaemon(absl::StrCat("worker:", i), worker_argv_.back()));
    }
    chief_ = StartDaemon("chief:0",
                         {testing::RunfilePath("chief/main"), "--cluster_spec=" + cluster_.spec_path, "--task=chief:0",
                          "--auth_token_file=" + certs_ + "/tokens/chief", "--job=" + job_path, "--threads=1"});
    if (chief_ == nullptr || workers_[0] == nullptr || workers_[1] == nullptr) return Fail("a daemon did not start");
    if (!chief_->WaitForLine("chief serving at", absl::Seconds(60))) return Fail("the chief did not serve");
    return true;
  }

  // The job's status now, or nullopt when the chief did not answer.
  std::optional<JobStatusResponse> Status(Chief::Stub* stub) {
    JobStatusRequest req;
    JobStatusResponse st;
    grpc::Status s = Call(absl::Seconds(5), [&](grpc::ClientContext* ctx, std::function<void(grpc::Status)> done) {
      stub->async()->JobStatus(ctx, &req, &st, std::move(done));
    });
    if (!s.ok()) return std::nullopt;
    return st;
  }

  Chief::Stub* Stub() {
    if (stub_ == nullptr) stub_ = Chief::NewStub(MakeChannel(cluster_.chief, TokenOptions(certs_, "observer")));
    return stub_.get();
  }

  // Polls the job's step every 100 ms until it reaches `step` (true), the
  // job ends or `timeout` passes (false); `seen` gets the last step read.
  bool WaitForStep(int64_t step, absl::Duration timeout, int64_t* seen = nullptr) {
    const absl::Time end = absl::Now() + timeout;
    while (absl::Now() < end) {
      std::optional<JobStatusResponse> st = Status(Stub());
      if (st.has_value() && seen != nullptr) *seen = st->step();
      if (st.has_value() && st->step() >= step) return true;
      if (st.has_value() && (st->state() == JobStatusResponse::DONE || st->state() == JobStatusResponse::FAILED)) {
        return false;
      }
      if (chief_->Wait(absl::Milliseconds(100)).ok()) return false;  // the poll's period; also sees the chief end
    }
    return false;
  }

  // How long the first TcpRingCollective::Create that `worker` logged from
  // line `from` on took; -1 if none.
  static double FormedSeconds(Daemon& worker, size_t from) {
    const std::string line =
        worker.WaitForMatch("collective group [0-9]+ formed: rank [0-9]+ of [0-9]+ in ", absl::Seconds(5), from);
    std::smatch m;
    absl::Duration d;
    if (!std::regex_search(line, m, std::regex(" in ([0-9.a-z]+)")) || !absl::ParseDuration(m[1].str(), &d)) {
      return -1;
    }
    return absl::ToDoubleSeconds(d);
  }

  // SIGKILLs worker:1, starts it again at once (same collective port), and
  // times the recovery and the group's re-formation.
  void KillAndRestart() {
    int64_t step = -1;
    WaitForStep(0, absl::Seconds(5), &step);
    const size_t from = chief_->lines();
    const size_t from0 = workers_[0]->lines();
    const absl::Time killed = absl::Now();
    workers_[1]->Kill(SIGKILL);
    (void)workers_[1]->Wait(absl::Seconds(30));
    workers_[1] = StartDaemon("worker:1 (restarted)", worker_argv_[1]);
    {
      absl::MutexLock lock(&mu_);
      result_.killed_at_step = step;
    }
    if (workers_[1] == nullptr) {
      Fail("worker:1 did not start again");
      return;
    }
    if (chief_->WaitForMatch("recovered to the checkpoint of step", absl::Minutes(5), from).empty()) {
      Fail("the chief never recovered from the kill");
      return;
    }
    const double recovered = absl::ToDoubleSeconds(absl::Now() - killed);
    int64_t after = -1;
    WaitForStep(0, absl::Seconds(5), &after);
    // Every step is an all-reduce: 20 more steps mean the ring is whole.
    const bool resumed = WaitForStep(after + 20, absl::Minutes(5));
    const double formed[2] = {FormedSeconds(*workers_[0], from0), FormedSeconds(*workers_[1], 0)};
    absl::MutexLock lock(&mu_);
    for (int w = 0; w < 2; ++w) result_.formed_seconds[w] = formed[w];
    result_.recovered_seconds = recovered;
    if (resumed) result_.resumed_seconds = absl::ToDoubleSeconds(absl::Now() - killed);
    if (!resumed) result_.error = "training did not resume after the kill";
  }

  // Up to o_.connections sockets to the two collective ports, half silent,
  // half trickling a ClientHello, reopened when a worker closes them. A
  // worker's acceptor sends its ServerHello first and then waits, so the
  // hello is read and the socket kept until end of stream.
  void Strangers() {
    // A ring ClientHello (version 2: magic, version, size, rank, group_id,
    // nonce, MAC; 92 bytes) starting "PSRTRING", version 2, size 2: never
    // finished, and its MAC would be wrong.
    std::string hello = "PSRTRING";
    hello += std::string("\x02\0\0\0\x02\0\0\0", 8);
    hello.resize(92, '\0');
    StrangerPlan plan{/*targets=*/{}, o_.connections, o_.sources, /*subnet=*/2, /*open_per_tick=*/200,
                      StrangerPlan::OnWord::kReadUntilEof};
    for (const std::string& bytes : {std::string(), hello}) {
      for (int port : ring_ports_) plan.targets.push_back({port, bytes});
    }
    RunStrangers(
        plan, [this] { return stop_attack_.load(); },
        [this](const StrangerTick& t) {
          absl::MutexLock lock(&mu_);
          AddStrangerTick(t, result_);
          result_.stranger_hello_bytes_read += t.bytes_read;
        });
  }

  const RingOptions o_;
  const bool attack_;
  const std::string name_;
  std::string dir_, certs_;
  testing::TestCluster cluster_;
  std::vector<int> ring_ports_;
  std::vector<std::vector<std::string>> worker_argv_;
  std::unique_ptr<Daemon> chief_;
  std::vector<std::unique_ptr<Daemon>> workers_;
  std::unique_ptr<Chief::Stub> stub_;  // used by the main thread only
  std::atomic<bool> stop_attack_{false};

  absl::Mutex mu_;
  RingRun result_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

SoakRun RunJob(const SoakOptions& options, bool attack, const std::string& name) {
  Run run(options, attack, name);
  return run.Go();
}

RingRun RunMirroredJob(const RingOptions& options, bool attack, const std::string& name) {
  MirroredRun run(options, attack, name);
  return run.Go();
}

std::string Describe(const RingRun& r) {
  const std::string who = r.attacked ? "ring_attacked" : "ring_unattacked";
  std::string out;
  absl::StrAppend(&out, "FIGURE: ", who, " finished=", r.finished, " accuracy=", r.accuracy,
                  " wall_seconds=", r.wall_seconds, " failures_survived=", r.failures_survived, "\n");
  absl::StrAppend(&out, "FIGURE: ", who, " worker:1 killed at step ", r.killed_at_step,
                  " recovered_s=", r.recovered_seconds, " group_reformed_and_20_steps_s=", r.resumed_seconds,
                  " ring_create_s worker:0=", r.formed_seconds[0], " worker:1=", r.formed_seconds[1],
                  " error=\"", r.error, "\"\n");
  if (r.attacked) {
    absl::StrAppend(&out, "FIGURE: ring_strangers opened=", r.stranger_opened, " open_peak=", r.stranger_open_peak,
                    " closed_by_worker=", r.stranger_closed_by_peer, " connect_failed=", r.stranger_connect_failed,
                    " server_hello_bytes_read=", r.stranger_hello_bytes_read, "\n");
  }
  return out;
}

std::string Describe(const SoakRun& r) {
  const std::string who = r.attacked ? "attacked" : "unattacked";
  auto mb = [](int64_t kb) { return kb < 0 ? std::string("-") : absl::StrCat(kb / 1024); };
  std::string out;
  absl::StrAppend(&out, "FIGURE: ", who, " finished=", r.finished, " accuracy=", r.accuracy,
                  " wall_seconds=", r.wall_seconds, "\n");
  absl::StrAppend(&out, "FIGURE: ", who, " ps_rss_mb before=", mb(r.ps.before_kb), " during=", mb(r.ps.during_kb),
                  " after=", mb(r.ps.after_kb), " ps_fds_peak=", r.ps_fds_peak, "\n");
  absl::StrAppend(&out, "FIGURE: ", who, " chief_rss_mb before=", mb(r.chief.before_kb),
                  " during=", mb(r.chief.during_kb), " after=", mb(r.chief.after_kb), "\n");
  absl::StrAppend(&out, "FIGURE: ", who, " probes=", r.probes, " failures=", r.probe_failures,
                  " ticket_refusals=", r.probe_ticket_refusals, " slot_wait_max_ms=", r.probe_slot_wait_max_ms,
                  " pull_max_ms=", r.probe_pull_max_ms, " last_error=\"", r.probe_last_error, "\"\n");
  if (r.attacked) {
    absl::StrAppend(&out, "FIGURE: strangers opened=", r.stranger_opened, " open_peak=", r.stranger_open_peak,
                    " closed_by_daemon=", r.stranger_closed_by_peer, " connect_failed=", r.stranger_connect_failed,
                    "\n");
    absl::StrAppend(&out, "FIGURE: worker_token tickets_taken=", r.tickets_taken,
                    " tickets_refused=", r.tickets_refused, " stalled_frames=", r.stalled_opened,
                    " stalled_ended_by_ps=", r.stalled_closed_by_peer, " pulls_sent_unread=", r.pulls_sent,
                    " flood_reconnects=", r.flood_reconnects, "\n");
    absl::StrAppend(&out, "FIGURE: exchange_flood frames_sent_unread=", r.exchange_frames_sent,
                    " streams=", r.exchange_streams, "\n");
  }
  return out;
}

}  // namespace soak
}  // namespace psrt
