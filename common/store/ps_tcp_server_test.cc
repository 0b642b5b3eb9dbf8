// The PS's TCP data plane in one process: a real core, service and server
// on a loopback port, raw sockets as hostile and honest clients.
#include "common/store/ps_tcp_server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <iostream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/net/socket.h"
#include "common/store/ps_service.h"
#include "common/store/server_core.h"
#include "common/transport/ps_wire.h"
#include "common/transport/tcp_frame.h"
#include "common/transport/tcp_frame_io.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;
constexpr absl::Duration kDeadline = absl::Seconds(10);

Caller Role(Role r, const std::string& name) {
  Caller c;
  c.roles = static_cast<uint8_t>(r);
  c.name = name;
  return c;
}

class PsTcpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerCoreOptions o;
    o.incarnation = 42;
    o.snapshot_root = absl::StrCat(std::getenv("TEST_TMPDIR"), "/snapshots");
    core_ = std::make_unique<ParameterServerCore>(o);
    CreateVariablesRequest req;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(R"(
        variable { name: "w" dtype: DT_FLOAT shape { dim: 2 } initializer { kind: ZEROS } }
        optimizer { sgd { learning_rate: 1 } }
        consistency { mode: SYNC } num_workers: 2)",
                                                              &req));
    ASSERT_TRUE(core_->CreateVariables(req).ok());
    service_ = std::make_unique<PsServiceImpl>(core_.get());
  }
  void StartServer(PsTcpServerOptions o = {}) {
    o.host = "127.0.0.1";
    auto s = PsTcpServer::Start(service_.get(), o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    service_->set_tcp_server(server_.get());
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  // A connection with `ticket` in its hello: the verdict's code and message.
  net::Fd Connect() {
    absl::StatusOr<net::Fd> fd = net::ConnectOnce("127.0.0.1", server_->port(), 0, absl::Now() + kDeadline, nullptr);
    EXPECT_TRUE(fd.ok()) << fd.status();
    if (!fd.ok()) return net::Fd();
    // Blocking, as the client's reader uses it.
    ::fcntl(fd->get(), F_SETFL, ::fcntl(fd->get(), F_GETFL, 0) & ~O_NONBLOCK);
    return *std::move(fd);
  }
  // A blocking connection from `source` (127.0.0.2 and the like: every
  // 127/8 address is this host's, and the PS sees each as its own source).
  net::Fd ConnectFrom(const std::string& source) {
    net::Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in from{};
    from.sin_family = AF_INET;
    ::inet_pton(AF_INET, source.c_str(), &from.sin_addr);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(server_->port()));
    ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&from), sizeof(from)), 0) << source;
    EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0) << source;
    return fd;
  }
  // Waits until the server counts `n` open connections; false at the deadline.
  bool AwaitConnections(int n) {
    for (absl::Time end = absl::Now() + kDeadline; absl::Now() < end; absl::SleepFor(absl::Milliseconds(5))) {
      if (server_->connections() == n) return true;
    }
    return false;
  }
  grpc::Status Hello(int fd, const std::string& ticket) {
    const std::string hello = tcpframe::EncodeHello(ticket);
    if (!net::IoExact(fd, const_cast<char*>(hello.data()), hello.size(), true, absl::Now() + kDeadline, nullptr, "ps")
             .ok()) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "hello not sent");
    }
    return Verdict(fd);
  }
  grpc::Status Verdict(int fd) {
    uint8_t v[tcpframe::kVerdictHeaderBytes];
    absl::Status s = net::IoExact(fd, v, sizeof(v), false, absl::Now() + kDeadline, nullptr, "ps");
    if (!s.ok()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, std::string(s.message()));
    grpc::StatusCode code;
    uint32_t n = 0;
    EXPECT_TRUE(tcpframe::DecodeVerdictHeader(v, &code, &n).ok());
    std::string message(n, '\0');
    EXPECT_TRUE(net::IoExact(fd, message.data(), n, false, absl::Now() + kDeadline, nullptr, "ps").ok());
    return grpc::Status(code, message);
  }
  // An admitted connection acting as `caller`.
  net::Fd Admitted(const Caller& caller) {
    absl::StatusOr<PsTcpServer::Ticket> t = server_->IssueTicket(caller);
    EXPECT_TRUE(t.ok()) << t.status();
    net::Fd fd = Connect();
    grpc::Status v = Hello(fd.get(), t->bytes);
    EXPECT_TRUE(v.ok()) << v.error_message();
    return fd;
  }
  static void SendFrame(int fd, psframe::Method m, uint64_t call, const grpc::ByteBuffer& payload,
                        uint32_t timeout_ms = 5000) {
    tcpframe::Header h;
    h.method = m;
    h.timeout_ms = timeout_ms;
    h.call_id = call;
    std::string wire;
    const std::unique_ptr<tcpframe::OutFrame> frame = tcpframe::Encode(h, "", payload);
    for (const iovec& v : frame->iov()) {
      wire.append(static_cast<const char*>(v.iov_base), v.iov_len);
    }
    ASSERT_TRUE(net::IoExact(fd, wire.data(), wire.size(), true, absl::Now() + kDeadline, nullptr, "ps").ok());
  }
  struct Answer {
    uint64_t call = 0;
    grpc::Status status;
    grpc::ByteBuffer payload;
  };
  // The next answer on `reader`; UNAVAILABLE status when the PS closed it.
  static absl::StatusOr<Answer> Read(tcpframe::FrameReader* reader) {
    std::shared_ptr<TensorBuffer> body;
    absl::StatusOr<tcpframe::Header> over = absl::UnknownError("");
    absl::Status s = reader->Next(&body, &over, /*response=*/true);
    if (!s.ok()) return s;
    tcpframe::Header h;
    std::string message;
    Answer a;
    absl::Status d = tcpframe::DecodeBody(body, true, &h, &message, &a.payload);
    if (!d.ok()) return d;
    a.call = h.call_id;
    a.status = grpc::Status(h.code, message);
    return a;
  }
  static grpc::ByteBuffer Push(int worker, int64_t step) {
    pswire::PushArgs a;
    a.id.set_worker(worker);
    a.id.set_worker_incarnation(1);
    a.id.set_step(step);
    a.gradients.emplace_back("w", Tensor::FromVector<float>({1, 2}, TensorShape({2})));
    return pswire::EncodePush(a);
  }
  static grpc::ByteBuffer Pull(int worker, int64_t step) {
    pswire::PullArgs a;
    a.variables = {"w"};
    a.worker = worker;
    a.step = step;
    return pswire::EncodePull(a);
  }

  std::unique_ptr<ParameterServerCore> core_;
  std::unique_ptr<PsServiceImpl> service_;
  std::unique_ptr<PsTcpServer> server_;
};

TEST_F(PsTcpServerTest, ATicketAdmitsOneConnectionOnceAndOthersAreRefused) {
  StartServer();
  absl::StatusOr<PsTcpServer::Ticket> t = server_->IssueTicket(Role(Role::kWorker, "worker token"));
  ASSERT_TRUE(t.ok());
  net::Fd a = Connect();
  EXPECT_TRUE(Hello(a.get(), t->bytes).ok());
  net::Fd again = Connect();  // the same ticket twice
  grpc::Status v = Hello(again.get(), t->bytes);
  EXPECT_EQ(v.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(v.error_message(), HasSubstr("unknown data-plane ticket"));
  net::Fd forged = Connect();
  v = Hello(forged.get(), std::string(tcpframe::kTicketBytes, 'x'));
  EXPECT_EQ(v.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // Not a hello at all: refused, and the connection is closed.
  net::Fd http = Connect();
  const std::string get = "GET / HTTP/1.1\r\nHost: ps\r\n\r\n" + std::string(tcpframe::kHelloBytes, ' ');
  ASSERT_TRUE(
      net::IoExact(http.get(), const_cast<char*>(get.data()), get.size(), true, absl::Now() + kDeadline, nullptr, "ps")
          .ok());
  v = Verdict(http.get());
  EXPECT_EQ(v.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(v.error_message(), HasSubstr("bad magic"));
  char byte;
  // Closed: an end of stream, or a reset (it closed with our extra bytes unread).
  const ssize_t n = ::recv(http.get(), &byte, 1, 0);
  EXPECT_TRUE(n == 0 || (n < 0 && errno == ECONNRESET)) << "the PS must close a refused connection: " << n;
  // The admitted one still works.
  tcpframe::FrameReader reader(a.get(), BufferPool::Create(), 1 << 20, "ps");
  SendFrame(a.get(), psframe::Method::kPush, 9, Push(0, 0));
  absl::StatusOr<Answer> r = Read(&reader);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->call, 9u);
  EXPECT_TRUE(r->status.ok()) << r->status.error_message();
}

TEST_F(PsTcpServerTest, ExpiredTicketsAndSilentConnectionsAreRefused) {
  PsTcpServerOptions o;
  o.ticket_ttl = absl::ZeroDuration();  // expired as soon as issued
  o.hello_timeout = absl::Milliseconds(300);
  StartServer(o);
  absl::StatusOr<PsTcpServer::Ticket> t = server_->IssueTicket(Role(Role::kWorker, "w"));
  ASSERT_TRUE(t.ok());
  net::Fd late = Connect();
  grpc::Status v = Hello(late.get(), t->bytes);
  EXPECT_EQ(v.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(v.error_message(), HasSubstr("expired"));
  // Connected, and silent: refused after the hello timeout and closed.
  net::Fd silent = Connect();
  const absl::Time start = absl::Now();
  v = Verdict(silent.get());
  EXPECT_EQ(v.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(v.error_message(), HasSubstr("no data-plane hello"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // Trickling: one byte of a hello every 50 ms. The deadline is the whole
  // hello's, not each read's (a byte every few seconds held a slot for
  // good, and 1,100 such connections locked out every worker).
  net::Fd trickle = Connect();
  const absl::Time trickle_start = absl::Now();
  bool closed = false;
  for (int i = 0; i < 200 && !closed; ++i) {
    const char byte = 0;
    closed = ::send(trickle.get(), &byte, 1, MSG_NOSIGNAL) != 1;
    if (!closed) {
      pollfd p{trickle.get(), POLLIN, 0};
      closed = ::poll(&p, 1, 50) == 1;  // the pacing: the verdict (or the close) ends it
    }
  }
  EXPECT_TRUE(closed) << "a trickled hello kept its connection for 10 s";
  EXPECT_LT(absl::Now() - trickle_start, absl::Seconds(5));
  // The silent connections did not stay: none is open now.
  for (absl::Time end = absl::Now() + kDeadline; server_->connections() > 0 && absl::Now() < end;) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(server_->connections(), 0);
}

TEST_F(PsTcpServerTest, EachFrameIsCheckedAsItsMethodWithTheTicketsRoles) {
  StartServer();
  // The chief may pull (evaluation) but not push.
  net::Fd chief = Admitted(Role(Role::kChief, "the chief token"));
  tcpframe::FrameReader reader(chief.get(), BufferPool::Create(), 1 << 20, "ps");
  SendFrame(chief.get(), psframe::Method::kPush, 1, Push(0, 0));
  absl::StatusOr<Answer> r = Read(&reader);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(r->status.error_message(), HasSubstr("the chief token (role chief) may not call ParameterServer/Push"));
  // Nothing was applied: a read-only pull (step 0 is ready) sees zeros.
  SendFrame(chief.get(), psframe::Method::kPull, 2, Pull(-1, 0));
  r = Read(&reader);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->status.ok()) << r->status.error_message();
  absl::StatusOr<pswire::PullResult> w = pswire::DecodePullResult(r->payload);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->tensors[0].second.data<float>()[0], 0.0f);
  // A malformed push is refused naming the message, and the connection goes on.
  net::Fd worker = Admitted(Role(Role::kWorker, "the worker token"));
  tcpframe::FrameReader wreader(worker.get(), BufferPool::Create(), 1 << 20, "ps");
  grpc::Slice junk(std::string("\xff\xff\xff", 3));
  SendFrame(worker.get(), psframe::Method::kPush, 3, grpc::ByteBuffer(&junk, 1));
  r = Read(&wreader);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r->status.error_message(), HasSubstr("PushRequest"));
  // A store without an epoch (or the other way round) is refused as the
  // same pair in gRPC metadata is, and the connection goes on.
  for (auto [store, epoch] : {std::pair<int32_t, int64_t>{3, 0}, {-1, 5}, {-7, 2}}) {
    tcpframe::Header h;
    h.method = psframe::Method::kPush;
    h.timeout_ms = 5000;
    h.call_id = 30;
    h.store = store;
    h.epoch = epoch;
    std::string wire;
    const std::unique_ptr<tcpframe::OutFrame> frame = tcpframe::Encode(h, "", Push(0, 9));
    for (const iovec& v : frame->iov()) wire.append(static_cast<const char*>(v.iov_base), v.iov_len);
    ASSERT_TRUE(
        net::IoExact(worker.get(), wire.data(), wire.size(), true, absl::Now() + kDeadline, nullptr, "ps").ok());
    r = Read(&wreader);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << store << " " << epoch;
    EXPECT_THAT(r->status.error_message(), HasSubstr("want a store of 0 or more and an epoch of 1 or more"));
  }
  SendFrame(worker.get(), psframe::Method::kPush, 4, Push(0, 0));
  r = Read(&wreader);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->status.ok()) << r->status.error_message();
}

// A SYNC pull parks until its step is whole; the pushes behind it on the
// same connection are served meanwhile (else the step never completes).
TEST_F(PsTcpServerTest, AParkedPullDoesNotHoldUpThePushesBehindIt) {
  StartServer();
  net::Fd a = Admitted(Role(Role::kWorker, "worker 0"));
  net::Fd b = Admitted(Role(Role::kWorker, "worker 1"));
  tcpframe::FrameReader ra(a.get(), BufferPool::Create(), 1 << 20, "ps");
  tcpframe::FrameReader rb(b.get(), BufferPool::Create(), 1 << 20, "ps");
  SendFrame(a.get(), psframe::Method::kPull, 10, Pull(0, 1));  // waits for step 0 of both
  SendFrame(a.get(), psframe::Method::kPush, 11, Push(0, 0));
  absl::StatusOr<Answer> r = Read(&ra);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->call, 11u) << "the push behind the parked pull is answered first";
  SendFrame(b.get(), psframe::Method::kPush, 20, Push(1, 0));  // completes the step: the pull is released
  r = Read(&rb);
  ASSERT_TRUE(r.ok() && r->status.ok());
  r = Read(&ra);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->call, 10u);
  ASSERT_TRUE(r->status.ok()) << r->status.error_message();
  absl::StatusOr<pswire::PullResult> w = pswire::DecodePullResult(r->payload);
  ASSERT_TRUE(w.ok());
  EXPECT_FLOAT_EQ(w->tensors[0].second.data<float>()[0], -1.0f);  // the mean of 2 x 1, at rate 1
}

TEST_F(PsTcpServerTest, AnOversizedFrameIsAnsweredAndSkippedAMalformedOneEndsTheConnection) {
  PsTcpServerOptions o;
  o.max_request_bytes = 4096;
  StartServer(o);
  net::Fd a = Admitted(Role(Role::kWorker, "w"));
  tcpframe::FrameReader reader(a.get(), BufferPool::Create(), 1 << 20, "ps");
  pswire::PushArgs big;
  big.id.set_step(0);
  big.gradients.emplace_back("w", Tensor(DT_FLOAT, TensorShape({10000})));
  SendFrame(a.get(), psframe::Method::kPush, 5, pswire::EncodePush(big));
  SendFrame(a.get(), psframe::Method::kPush, 6, Push(0, 0));
  absl::StatusOr<Answer> r = Read(&reader);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->call, 5u);
  EXPECT_EQ(r->status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(r->status.error_message(), HasSubstr("over the limit of 4096"));
  r = Read(&reader);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->call, 6u);
  EXPECT_TRUE(r->status.ok());
  // A frame with a bad pad table: the PS cannot trust what follows.
  std::string bad(tcpframe::kPrefixBytes + tcpframe::kHeaderBytes + 8, '\0');
  bad[0] = static_cast<char>(tcpframe::kHeaderBytes + 8);
  bad[8] = 1;                                                       // version
  bad[9] = 3;                                                       // push
  bad[10] = 1;                                                      // one pad entry...
  bad[12] = 100;                                                    // timeout
  bad[24] = bad[25] = bad[26] = bad[27] = static_cast<char>(0xff);  // store -1
  bad[40] = 2;                                                      // ...at offset 2: inside the header
  ASSERT_TRUE(net::IoExact(a.get(), bad.data(), bad.size(), true, absl::Now() + kDeadline, nullptr, "ps").ok());
  r = Read(&reader);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << "the PS closes the connection";
}

// Large requests held at once are bounded across connections: one that
// would pass the budget is answered RESOURCE_EXHAUSTED, skipped unallocated,
// and the connection goes on; once the held ones are gone it is served.
TEST_F(PsTcpServerTest, LargeRequestsBeyondTheBudgetAreRefusedUnallocated) {
  PsTcpServerOptions o;
  o.max_buffered_bytes = 100 << 10;  // one 80 KiB request fits, two do not
  StartServer(o);
  CreateVariablesRequest req;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(R"(
      variable { name: "big" dtype: DT_FLOAT shape { dim: 20000 } initializer { kind: ZEROS } }
      optimizer { sgd { learning_rate: 1 } } num_workers: 1)",
                                                            &req));
  ASSERT_TRUE(core_->CreateVariables(req).ok());
  auto big_push = [](int64_t step) {
    pswire::PushArgs a;
    a.id.set_worker(0);
    a.id.set_step(step);
    a.gradients.emplace_back("big", Tensor(DT_FLOAT, TensorShape({20000})));
    return pswire::EncodePush(a);
  };
  // A parked pull's frame is small; hold a large body instead by sending
  // half of a large frame on one connection (its body is allocated first).
  net::Fd holder = Admitted(Role(Role::kWorker, "w"));
  tcpframe::Header h;
  h.method = psframe::Method::kPush;
  h.timeout_ms = 5000;
  std::string wire;
  const std::unique_ptr<tcpframe::OutFrame> frame = tcpframe::Encode(h, "", big_push(0));
  for (const iovec& v : frame->iov()) wire.append(static_cast<const char*>(v.iov_base), v.iov_len);
  ASSERT_TRUE(
      net::IoExact(holder.get(), wire.data(), wire.size() / 2, true, absl::Now() + kDeadline, nullptr, "ps").ok());
  net::Fd other = Admitted(Role(Role::kWorker, "w"));
  tcpframe::FrameReader reader(other.get(), BufferPool::Create(), 1 << 20, "ps");
  absl::StatusOr<Answer> r = absl::UnknownError("");
  // The holder's body is allocated once its prefix is read: until then the
  // other's may still get through, so wait for a refusal (bounded).
  for (int64_t call = 1; call < 1000; ++call) {
    SendFrame(other.get(), psframe::Method::kPush, call, big_push(call));
    r = Read(&reader);
    ASSERT_TRUE(r.ok()) << r.status();
    if (!r->status.ok()) break;
  }
  ASSERT_EQ(r->status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << r->status.error_message();
  EXPECT_THAT(r->status.error_message(), HasSubstr("--max_data_plane_mb"));
  // The holder finishes its frame: its body is served and freed; the other
  // connection's next large push is served.
  ASSERT_TRUE(net::IoExact(holder.get(), wire.data() + wire.size() / 2, wire.size() - wire.size() / 2, true,
                           absl::Now() + kDeadline, nullptr, "ps")
                  .ok());
  tcpframe::FrameReader hreader(holder.get(), BufferPool::Create(), 1 << 20, "ps");
  r = Read(&hreader);
  const absl::Time start = absl::Now();
  ASSERT_TRUE(r.ok() && r->status.ok()) << (r.ok() ? r->status.error_message() : r.status().ToString());
  // The holder's body is released once its handler is done, which may be
  // just after its answer left: wait for that (bounded), as above.
  for (int64_t call = 5000; call < 6000; ++call) {
    SendFrame(other.get(), psframe::Method::kPush, call, big_push(call));
    r = Read(&reader);
    ASSERT_TRUE(r.ok()) << r.status();
    if (r->status.ok() || absl::Now() > start + kDeadline) break;
  }
  EXPECT_TRUE(r->status.ok()) << r->status.error_message();
}

// Issue #28: a request that announces all of the budget and stalls holds
// one MiB of it, not the whole: a 6 MiB push is served beside it. The stall
// ends its connection at the idle deadline and gives the MiB back.
TEST_F(PsTcpServerTest, AStalledRequestHoldsOneMiBOfTheBudgetAndIsClosedAtItsIdleDeadline) {
  constexpr uint64_t kMiB = 1 << 20;
  PsTcpServerOptions o;
  o.max_buffered_bytes = 8 * kMiB;
  o.frame_deadlines.idle = absl::Seconds(1);
  StartServer(o);
  CreateVariablesRequest req;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(R"(
      variable { name: "big" dtype: DT_FLOAT shape { dim: 1572864 } initializer { kind: ZEROS } }
      optimizer { sgd { learning_rate: 1 } } num_workers: 1)",
                                                            &req));
  ASSERT_TRUE(core_->CreateVariables(req).ok());
  net::Fd stall = Admitted(Role(Role::kWorker, "w"));
  const absl::Time stall_start = absl::Now();
  {
    tcpframe::Header h;
    h.method = psframe::Method::kPush;
    h.timeout_ms = 5000;
    h.call_id = 1;
    std::string wire;
    const std::unique_ptr<tcpframe::OutFrame> frame = tcpframe::Encode(h, "", grpc::ByteBuffer());
    for (const iovec& v : frame->iov()) wire.append(static_cast<const char*>(v.iov_base), v.iov_len);
    const uint64_t announced = 8 * kMiB;  // all of the budget
    for (int i = 0; i < 8; ++i) wire[i] = static_cast<char>((announced >> (8 * i)) & 0xff);
    wire.append(1000, 'x');  // a little of its body; then nothing
    ASSERT_TRUE(net::IoExact(stall.get(), wire.data(), wire.size(), true, absl::Now() + kDeadline, nullptr, "ps").ok());
  }
  for (absl::Time end = absl::Now() + kDeadline; server_->buffered_bytes() == 0 && absl::Now() < end;) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  const uint64_t held = server_->buffered_bytes();
  EXPECT_EQ(held, kMiB);

  net::Fd legit = Admitted(Role(Role::kWorker, "w"));
  tcpframe::FrameReader reader(legit.get(), BufferPool::Create(), 1 << 20, "ps");
  pswire::PushArgs push;
  push.id.set_worker(0);
  push.id.set_step(0);
  push.gradients.emplace_back("big", Tensor::Zeros(DT_FLOAT, TensorShape({1572864})));  // 6 MiB
  SendFrame(legit.get(), psframe::Method::kPush, 2, pswire::EncodePush(push));
  absl::StatusOr<Answer> r = Read(&reader);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->call, 2u);
  EXPECT_TRUE(r->status.ok()) << r->status.error_message();

  // The stall is closed at its deadline, and its MiB comes back.
  for (absl::Time end = absl::Now() + kDeadline;
       (server_->connections() > 1 || server_->buffered_bytes() > 0) && absl::Now() < end;) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  const absl::Duration took = absl::Now() - stall_start;
  EXPECT_EQ(server_->connections(), 1);
  EXPECT_EQ(server_->buffered_bytes(), 0u);
  EXPECT_GE(took, o.frame_deadlines.idle);
  char byte;
  EXPECT_LE(::recv(stall.get(), &byte, 1, 0), 0) << "the stalled connection is still open";
  std::cout << "a request announcing all of an 8 MiB budget and stalling held " << held << " bytes of it; closed after "
            << took << "; held after: " << server_->buffered_bytes() << "\n";
}

TEST_F(PsTcpServerTest, ConnectionsBeyondTheLimitAreRefusedAndTicketsBeyondTheirsDropTheOldest) {
  PsTcpServerOptions o;
  o.max_connections = 2;
  o.max_tickets = 3;
  StartServer(o);
  net::Fd a = Admitted(Role(Role::kWorker, "w"));
  net::Fd b = Admitted(Role(Role::kWorker, "w"));
  net::Fd c = Connect();
  grpc::Status v = Verdict(c.get());
  EXPECT_EQ(v.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  a = net::Fd();
  b = net::Fd();
  ASSERT_TRUE(AwaitConnections(0));
  std::vector<std::string> tickets;
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<PsTcpServer::Ticket> t = server_->IssueTicket(Role(Role::kWorker, "w"), absl::StrCat("w", i));
    ASSERT_TRUE(t.ok()) << t.status();
    tickets.push_back(t->bytes);
  }
  // The fourth dropped the oldest, w0's; the newest still admits.
  net::Fd old = Connect();
  EXPECT_EQ(Hello(old.get(), tickets[0]).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  net::Fd fresh = Connect();
  EXPECT_TRUE(Hello(fresh.get(), tickets[3]).ok());
}

// Issue #28: a caller that sends calls and never reads is disconnected
// once max_queued_answers of its answers wait unsent, instead of having
// them (refusals, not counted against any budget) pile up until the send
// deadline: 840,000 unread pulls grew a PS by 300 MB in 12 s.
TEST_F(PsTcpServerTest, ACallerThatLeavesTooManyAnswersUnsentIsDisconnected) {
  PsTcpServerOptions o;
  o.max_queued_answers = 64;
  StartServer(o);
  absl::StatusOr<PsTcpServer::Ticket> t = server_->IssueTicket(Role(Role::kWorker, "w"));
  ASSERT_TRUE(t.ok());
  net::Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int small = 4096;  // the answers fill the socket soon
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(server_->port()));
  ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  ASSERT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
  ASSERT_TRUE(Hello(fd.get(), t->bytes).ok());
  // Pulls of a variable the PS does not hold: each answered at once with an
  // error, none read.
  pswire::PullArgs a;
  a.variables = {"no such variable"};
  tcpframe::Header h;
  h.method = psframe::Method::kPull;
  h.timeout_ms = 5000;
  std::string wire;
  for (int i = 0; i < 1000; ++i) {
    h.call_id = i;
    const grpc::ByteBuffer payload = pswire::EncodePull(a);
    const std::unique_ptr<tcpframe::OutFrame> frame = tcpframe::Encode(h, "", payload);
    for (const iovec& v : frame->iov()) wire.append(static_cast<const char*>(v.iov_base), v.iov_len);
  }
  bool closed = false;
  for (absl::Time end = absl::Now() + kDeadline; !closed && absl::Now() < end;) {
    closed = !net::IoExact(fd.get(), wire.data(), wire.size(), true, end, nullptr, "ps").ok();
  }
  EXPECT_TRUE(closed) << "the PS kept reading calls whose answers were not taken";
  EXPECT_TRUE(AwaitConnections(0));
}

// Issue #28: one caller's unused tickets cannot lock anyone out: past
// max_tickets_per_caller a new ticket drops that caller's oldest, so a
// hoarder holds at most that many, and a worker that shares its key (one
// role token from one host) still gets a ticket and connects at once (it
// used to be refused until the hoarded tickets expired, 30 s).
TEST_F(PsTcpServerTest, UnusedTicketsAreLimitedPerCaller) {
  PsTcpServerOptions o;
  o.max_tickets_per_caller = 4;
  StartServer(o);
  const Caller hoarder = Role(Role::kWorker, "the worker token");
  const std::string key = "the worker token from ipv4:10.0.0.9";
  std::vector<std::string> hoard;
  for (int i = 0; i < 6; ++i) {
    absl::StatusOr<PsTcpServer::Ticket> t = server_->IssueTicket(hoarder, key);
    ASSERT_TRUE(t.ok()) << t.status();
    hoard.push_back(t->bytes);
  }
  absl::StatusOr<PsTcpServer::Ticket> mine = server_->IssueTicket(hoarder, key);  // the worker's, same key
  ASSERT_TRUE(mine.ok()) << mine.status();
  net::Fd fd = Connect();
  EXPECT_TRUE(Hello(fd.get(), mine->bytes).ok());
  // Of the hoard only the newest three remain (four a key, the worker's
  // being the fourth).
  for (int i = 0; i < 6; ++i) {
    net::Fd h = Connect();
    EXPECT_EQ(Hello(h.get(), hoard[i]).ok(), i >= 3) << "ticket " << i;
  }
  // Another key is not touched by any of it.
  absl::StatusOr<PsTcpServer::Ticket> other = server_->IssueTicket(hoarder, "the worker token from ipv4:10.0.0.1");
  ASSERT_TRUE(other.ok()) << other.status();
  net::Fd o2 = Connect();
  EXPECT_TRUE(Hello(o2.get(), other->bytes).ok());
}

// Shutdown ends every connection, also one with a pull parked in the core,
// and returns; the client sees its connection end.
TEST_F(PsTcpServerTest, ShutdownEndsConnectionsWithParkedPulls) {
  StartServer();
  net::Fd a = Admitted(Role(Role::kWorker, "w"));
  SendFrame(a.get(), psframe::Method::kPull, 1, Pull(0, 5), /*timeout_ms=*/60000);
  for (absl::Time end = absl::Now() + kDeadline; server_->connections() < 1 && absl::Now() < end;) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  const absl::Time start = absl::Now();
  server_->Shutdown();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(server_->connections(), 0);
  tcpframe::FrameReader reader(a.get(), BufferPool::Create(), 1 << 20, "ps");
  EXPECT_EQ(Read(&reader).status().code(), absl::StatusCode::kUnavailable);
}

// Entries of a /proc directory of this process (the server runs in it) now.
int ProcEntries(const char* dir) {
  DIR* d = ::opendir(dir);
  if (d == nullptr) return -1;
  int n = 0;
  while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.' ? 1 : 0;
  ::closedir(d);
  return n;
}
int Threads() { return ProcEntries("/proc/self/task"); }

// Issue #28: nothing a caller has not authenticated holds a thread. 1,024
// connections that trickled their hellos held 1,024 thread stacks (~40 MB
// of a PS); now one poller thread holds every connection awaiting its hello.
TEST_F(PsTcpServerTest, ConnectionsAwaitingTheirHelloHoldNoThreadAndAWorkerIsStillServed) {
  StartServer();  // the default limits: 1,024 connections, 64 a source
  const int before = Threads();
  std::vector<net::Fd> silent;
  for (int i = 0; i < 500; ++i) silent.push_back(ConnectFrom(absl::StrCat("127.0.0.", 2 + i / 50)));
  ASSERT_TRUE(AwaitConnections(500)) << server_->connections();
  const int during = Threads();
  std::cout << "threads: " << before << " before, " << during << " with 500 connections awaiting their hello\n";
  EXPECT_LE(during - before, 4) << "connections awaiting their hello hold threads";
  const absl::Time start = absl::Now();
  net::Fd worker = Admitted(Role(Role::kWorker, "w"));
  tcpframe::FrameReader reader(worker.get(), BufferPool::Create(), 1 << 20, "ps");
  SendFrame(worker.get(), psframe::Method::kPush, 3, Push(0, 0));
  absl::StatusOr<Answer> r = Read(&reader);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->status.ok()) << r->status.error_message();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(server_->connections(), 501);
  EXPECT_EQ(server_->refused_per_source(), 0);
}

// The hello's deadline is its whole hello's, counted from the accept: a
// valid hello trickled a byte every 50 ms (1.8 s in all) is refused at
// 500 ms, though no byte comes more than 50 ms after the one before.
TEST_F(PsTcpServerTest, AValidHelloTrickledPastTheHelloTimeoutIsRefused) {
  PsTcpServerOptions o;
  o.hello_timeout = absl::Milliseconds(500);
  StartServer(o);
  absl::StatusOr<PsTcpServer::Ticket> t = server_->IssueTicket(Role(Role::kWorker, "w"));
  ASSERT_TRUE(t.ok());
  const std::string hello = tcpframe::EncodeHello(t->bytes);
  net::Fd fd = Connect();
  const absl::Time start = absl::Now();
  size_t sent = 0;
  for (bool answered = false; !answered && sent < hello.size();) {
    ASSERT_EQ(::send(fd.get(), hello.data() + sent, 1, MSG_NOSIGNAL), 1);
    ++sent;
    pollfd p{fd.get(), POLLIN, 0};
    answered = ::poll(&p, 1, 50) == 1;  // the pacing: the verdict ends it
  }
  EXPECT_LT(sent, hello.size()) << "the whole hello went in";
  grpc::Status v = Verdict(fd.get());
  EXPECT_EQ(v.error_code(), grpc::StatusCode::UNAUTHENTICATED) << v.error_message();
  EXPECT_THAT(v.error_message(), HasSubstr("no data-plane hello within 500ms"));
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(400));
  EXPECT_LT(took, absl::Seconds(3));
  ASSERT_TRUE(AwaitConnections(0));
}

TEST_F(PsTcpServerTest, ShutdownWithHundredsOfConnectionsAwaitingTheirHelloIsPrompt) {
  StartServer();
  std::vector<net::Fd> silent;
  for (int i = 0; i < 300; ++i) silent.push_back(ConnectFrom(absl::StrCat("127.0.0.", 2 + i / 50)));
  // One trickling, one admitted.
  silent.push_back(Connect());
  ASSERT_EQ(::send(silent.back().get(), "P", 1, MSG_NOSIGNAL), 1);
  net::Fd admitted = Admitted(Role(Role::kWorker, "w"));
  ASSERT_TRUE(AwaitConnections(302)) << server_->connections();
  const absl::Time start = absl::Now();
  server_->Shutdown();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(server_->connections(), 0);
  // Each was closed (an end of stream, or a reset), without a verdict.
  const absl::Time end = absl::Now() + kDeadline;
  for (const net::Fd& fd : silent) {
    pollfd p{fd.get(), POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(end - absl::Now()))), 1);
    char byte;
    const ssize_t n = ::recv(fd.get(), &byte, 1, MSG_DONTWAIT);
    EXPECT_TRUE(n == 0 || (n < 0 && errno == ECONNRESET)) << n;
  }
}

// This process's resident memory (the server runs in it), in KiB.
int64_t RssKb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return -1;
}

// A caller that sends pulls in bursts and never reads an answer, while
// training pushes between the bursts (each push leaves the answers queued
// before it their own copy of w, 4 MiB). The answers used to pile up
// without bound: the call's in-flight slots were freed when its answer was
// queued, and the send deadline was only between bytes. Now an answer
// counts against its caller until it is written: past the caller's bound
// (--max_unread_answer_mb) its pulls are refused, the connection is given
// up once an answer is not taken whole in time, and the memory comes back.
TEST_F(PsTcpServerTest, AnswersACallerDoesNotReadAreBoundedAndItIsDisconnected) {
  // glibc raises its mmap threshold to the size of any mmapped block freed
  // (up to 32 MiB): after an earlier test in this process freed a 6 or
  // 8 MiB request, the 4 MiB answers here came from the heap and their
  // pages stayed resident once freed, and RSS no longer told what the
  // server holds. A fixed threshold (the default) keeps them mmapped.
  ASSERT_EQ(::mallopt(M_MMAP_THRESHOLD, 128 << 10), 1);
  constexpr int64_t kFloats = 1 << 20;  // w: 4 MiB
  ServerCoreOptions co;
  co.incarnation = 7;
  co.snapshot_root = absl::StrCat(std::getenv("TEST_TMPDIR"), "/snapshots");
  service_.reset();
  core_ = std::make_unique<ParameterServerCore>(co);
  CreateVariablesRequest req;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(absl::StrCat(R"(
      variable { name: "w" dtype: DT_FLOAT shape { dim: )",
                                                                         kFloats, R"( } initializer { kind: ZEROS } }
      optimizer { sgd { learning_rate: 1 } }
      consistency { mode: ASYNC } num_workers: 2)"),
                                                            &req));
  ASSERT_TRUE(core_->CreateVariables(req).ok());
  service_ = std::make_unique<PsServiceImpl>(core_.get());
  service_->set_max_unread_answer_bytes(int64_t{32} << 20);
  PsTcpServerOptions o;
  o.send_timeout = absl::Seconds(2);  // and 4 s for a 4 MiB answer: 6 s
  StartServer(o);

  net::Fd hostile = Admitted(Role(Role::kWorker, "worker 0"));
  std::string burst;
  for (int i = 0; i < 8; ++i) {
    tcpframe::Header h;
    h.method = psframe::Method::kPull;
    h.timeout_ms = 5000;
    h.call_id = 100 + i;
    const std::unique_ptr<tcpframe::OutFrame> frame = tcpframe::Encode(h, "", Pull(0, 0));
    for (const iovec& v : frame->iov()) burst.append(static_cast<const char*>(v.iov_base), v.iov_len);
  }
  pswire::PushArgs push;
  push.id.set_worker(1);
  push.id.set_worker_incarnation(1);
  push.gradients.emplace_back("w", Tensor::Zeros(DT_FLOAT, TensorShape({kFloats})));
  const int64_t before_kb = RssKb();
  int64_t peak_kb = before_kb;
  int sent = 0;
  for (int b = 0; b < 100; ++b) {
    if (!net::IoExact(hostile.get(), burst.data(), burst.size(), true, absl::Now() + kDeadline, nullptr, "ps").ok()) {
      break;  // given up already
    }
    ++sent;
    push.id.set_step(b);
    ASSERT_TRUE(core_->Push(push.id, push.gradients).ok());  // training goes on
    peak_kb = std::max(peak_kb, RssKb());
  }
  // Given up: no answer was taken whole within its deadline.
  const absl::Time end = absl::Now() + absl::Seconds(30);
  while (server_->connections() > 0 && absl::Now() < end) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(server_->connections(), 0) << "a caller that reads nothing is still connected";
  const int64_t after_kb = RssKb();
  std::cout << "a caller reading none of its answers: " << sent << " bursts of 8 pulls of 4 MiB; RSS "
            << before_kb / 1024 << " MiB before, peak " << peak_kb / 1024 << " MiB, after it was disconnected "
            << after_kb / 1024 << " MiB\n";
  EXPECT_LT(peak_kb - before_kb, 96 * 1024) << "unread answers piled up";
  EXPECT_LT(after_kb - before_kb, 48 * 1024);

  // An honest caller is served all along.
  net::Fd honest = Admitted(Role(Role::kWorker, "worker 1"));
  tcpframe::FrameReader reader(honest.get(), BufferPool::Create(), 64 << 20, "ps");
  SendFrame(honest.get(), psframe::Method::kPull, 1, Pull(1, 0));
  absl::StatusOr<Answer> a = Read(&reader);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->status.ok()) << a->status.error_message();
}

// Issue #28: with the process out of descriptors, accept4 fails (EMFILE)
// and leaves the connection queued, so the listener stays readable: the
// loop spun on it. Now it sheds the oldest connection still awaiting its
// hello (or, with none, leaves the listener alone a while), the process
// stays nearly idle, and once descriptors are back a worker is admitted.
TEST_F(PsTcpServerTest, OutOfDescriptorsTheAcceptorShedsInsteadOfSpinning) {
  PsTcpServerOptions o;
  o.max_unauthenticated_per_source = 0;
  StartServer(o);
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  const int open_fds = ProcEntries("/proc/self/fd");
  ASSERT_GT(open_fds, 0);
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(open_fds + 24);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  // The strangers: a child process's 200 connections (its descriptors are
  // its own), held until the pipe closes.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::setrlimit(RLIMIT_NOFILE, &saved);
    ::close(go[1]);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(server_->port()));
    ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    for (int i = 0; i < 200; ++i) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) ::_exit(1);
    }
    char byte;
    (void)::read(go[0], &byte, 1);
    ::_exit(0);
  }
  ::close(go[0]);
  bool starved = false;
  for (absl::Time end = absl::Now() + kDeadline; !starved && absl::Now() < end; absl::SleepFor(absl::Milliseconds(5))) {
    starved = server_->out_of_descriptors() > 0;
  }
  EXPECT_TRUE(starved) << "no accept ran out of descriptors";
  // One second out of descriptors, strangers still queued: this process's
  // CPU (a spinning acceptor alone takes a core).
  auto cpu_seconds = [] {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return absl::ToDoubleSeconds(absl::DurationFromTimeval(u.ru_utime) + absl::DurationFromTimeval(u.ru_stime));
  };
  const double cpu_before = cpu_seconds();
  const absl::Time begin = absl::Now();
  absl::SleepFor(absl::Seconds(1));  // the window over which CPU is measured
  const double cpu = (cpu_seconds() - cpu_before) / absl::ToDoubleSeconds(absl::Now() - begin);
  std::cout << "out of descriptors: " << server_->out_of_descriptors() << " accepts failed, " << server_->evicted()
            << " shed, CPU " << cpu * 100 << "% of a core\n";
  EXPECT_LT(cpu, 0.5);
  EXPECT_GT(server_->evicted(), 0);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  ::close(go[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the strangers could not connect";
  net::Fd worker = Admitted(Role(Role::kWorker, "w"));
  EXPECT_TRUE(worker.valid());
}

TEST(DataPlaneConnectionCapTest, KeepsAQuarterOfTheDescriptorLimitAndAtLeast128ForTheRest) {
  EXPECT_EQ(DataPlaneConnectionCap(1024, 1024), 768);
  EXPECT_EQ(DataPlaneConnectionCap(1024, 256), 128);
  EXPECT_EQ(DataPlaneConnectionCap(1024, 1 << 20), 1024);
  EXPECT_EQ(DataPlaneConnectionCap(1024, 100), 8);
  EXPECT_EQ(DataPlaneConnectionCap(2, 1 << 20), 2);
}

}  // namespace
}  // namespace psrt
