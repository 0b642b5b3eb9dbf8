#include "common/transport/tcp_frame.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <iostream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/net/socket.h"
#include "common/tensor_wire.h"
#include "common/transport/ps_wire.h"
#include "common/transport/tcp_frame_io.h"
#include "gtest/gtest.h"

namespace psrt {
namespace tcpframe {
namespace {

// The frame's bytes as they go on the wire.
std::string Flatten(const OutFrame& f) {
  std::string s;
  for (const iovec& v : f.iov()) s.append(static_cast<const char*>(v.iov_base), v.iov_len);
  EXPECT_EQ(s.size(), f.bytes());
  return s;
}

// The body of `wire` (after its prefix) in a 64-byte-aligned buffer.
std::shared_ptr<TensorBuffer> Body(const std::string& wire) {
  EXPECT_GE(wire.size(), kPrefixBytes);
  EXPECT_EQ(DecodePrefix(reinterpret_cast<const uint8_t*>(wire.data())), wire.size() - kPrefixBytes);
  auto b = TensorBuffer::Allocate(wire.size() - kPrefixBytes);
  std::memcpy(b->data(), wire.data() + kPrefixBytes, wire.size() - kPrefixBytes);
  return b;
}

pswire::PushArgs SamplePush() {
  pswire::PushArgs a;
  a.id.set_worker(3);
  a.id.set_step(17);
  Tensor small(DT_FLOAT, TensorShape({10}));
  Tensor large(DT_FLOAT, TensorShape({256, 64}));  // 64 KiB: aligned and adopted
  for (int i = 0; i < 10; ++i) small.data<float>()[i] = i;
  for (int i = 0; i < 256 * 64; ++i) large.data<float>()[i] = 0.5f * i;
  a.gradients.emplace_back("bias", small);
  a.gradients.emplace_back("dense/kernel", large);
  a.gradients.emplace_back("odd", Tensor(DT_FLOAT, TensorShape({5000})));  // 20000 bytes
  return a;
}

TEST(TcpFrameTest, ARequestCarriesThePushBytesAndItsLargeTensorsArriveAlignedAndUncopied) {
  pswire::PushArgs push = SamplePush();
  const grpc::ByteBuffer bytes = pswire::EncodePush(push);
  Header h;
  h.method = psframe::Method::kPush;
  h.timeout_ms = 30000;
  h.call_id = 0x1234567890abcdefULL;
  h.store = 3;
  h.epoch = 7;
  h.replica = true;
  std::unique_ptr<OutFrame> f = Encode(h, "", bytes);
  std::shared_ptr<TensorBuffer> body = Body(Flatten(*f));

  Header got;
  std::string message;
  grpc::ByteBuffer payload;
  ASSERT_TRUE(DecodeBody(body, /*response=*/false, &got, &message, &payload).ok());
  EXPECT_FALSE(got.response);
  EXPECT_EQ(got.method, psframe::Method::kPush);
  EXPECT_EQ(got.timeout_ms, 30000u);
  EXPECT_EQ(got.call_id, h.call_id);
  EXPECT_EQ(got.store, 3);
  EXPECT_EQ(got.epoch, 7);
  EXPECT_TRUE(got.replica);
  EXPECT_EQ(message, "");
  EXPECT_EQ(wire::ToString(payload), wire::ToString(bytes));  // exactly the ps_wire bytes

  const uint64_t copied = wire::TensorBytesCopied();
  const uint64_t adopted = wire::TensorBytesAdopted();
  absl::StatusOr<pswire::PushArgs> back = pswire::DecodePush(payload, nullptr, /*adopt_aligned=*/true);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->gradients.size(), 3u);
  EXPECT_EQ(back->id.step(), 17);
  const Tensor& large = back->gradients[1].second;
  for (int i = 0; i < 256 * 64; i += 97) EXPECT_EQ(large.data<float>()[i], 0.5f * i);
  // The large tensors lie in the body itself, 64-byte aligned; the small
  // one was copied.
  const auto* lo = static_cast<const uint8_t*>(body->data());
  const auto* p = reinterpret_cast<const uint8_t*>(large.data<float>());
  EXPECT_TRUE(p >= lo && p < lo + body->size());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kAlignment, 0u);
  EXPECT_EQ(wire::TensorBytesAdopted() - adopted, 256u * 64 * 4 + 5000 * 4);
  EXPECT_EQ(wire::TensorBytesCopied() - copied, 10u * 4);
  // Without adoption (the default) everything is copied, as before.
  ASSERT_TRUE(pswire::DecodePush(payload).ok());
  EXPECT_EQ(wire::TensorBytesCopied() - copied, 10u * 4 + 10 * 4 + 256 * 64 * 4 + 5000 * 4);
}

TEST(TcpFrameTest, AResponseCarriesItsStatusMessageAndAnEmptyPayload) {
  Header h;
  h.response = true;
  h.code = grpc::StatusCode::FAILED_PRECONDITION;
  h.call_id = 7;
  std::shared_ptr<TensorBuffer> body = Body(Flatten(*Encode(h, "generation 3, want 4", grpc::ByteBuffer())));
  Header got;
  std::string message;
  grpc::ByteBuffer payload;
  ASSERT_TRUE(DecodeBody(body, /*response=*/true, &got, &message, &payload).ok());
  EXPECT_EQ(got.code, grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(got.call_id, 7u);
  EXPECT_EQ(message, "generation 3, want 4");
  EXPECT_EQ(payload.Length(), 0u);
  // A request decoder refuses a response, and the other way round.
  EXPECT_FALSE(DecodeBody(body, /*response=*/false, &got, &message, &payload).ok());
}

// Every malformed body is refused with INVALID_ARGUMENT naming what is
// wrong, and nothing is built from it.
TEST(TcpFrameTest, MalformedBodiesAreRefusedNamingTheField) {
  pswire::PushArgs push = SamplePush();
  Header h;
  h.method = psframe::Method::kPush;
  h.timeout_ms = 1000;
  const std::string good = Flatten(*Encode(h, "", pswire::EncodePush(push))).substr(kPrefixBytes);
  auto refused = [](std::string body, const std::string& words, bool response = false) {
    auto b = TensorBuffer::Allocate(body.size());
    std::memcpy(b->data(), body.data(), body.size());
    Header got;
    std::string message;
    grpc::ByteBuffer payload;
    absl::Status s = DecodeBody(b, response, &got, &message, &payload);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << words << ": " << s;
    EXPECT_NE(std::string(s.message()).find(words), std::string::npos) << s;
  };
  refused(good.substr(0, 31), "shorter than its 32-byte header");
  std::string b = good;
  b[0] = 2;
  refused(b, "version 2");
  b = good;
  b[1] = 9;
  refused(b, "unknown method 9");
  b = good;
  b[1] = static_cast<char>(0x80 | 17);
  refused(b, "response frame of kind", /*response=*/true);
  b = good;
  b[4] = b[5] = b[6] = b[7] = 0;
  refused(b, "timeout of 0 ms");
  b = good;
  b[21] = 1;  // flags 256: no such flag
  refused(b, "flags 256");
  b = good;
  b[2] = static_cast<char>(0xff);  // 255 pad entries: more than the body holds
  b[3] = static_cast<char>(0xff);
  refused(b, "cannot hold its 65535 pad entries");
  // The first pad entry (bytes 32..39): an offset inside the table, past
  // the end, and a pad of 64 bytes or more.
  for (uint32_t bad_offset : {uint32_t{3}, static_cast<uint32_t>(good.size() + 1)}) {
    b = good;
    std::memcpy(&b[32], &bad_offset, 4);
    refused(b, "pad entry 0");
  }
  b = good;
  const uint32_t big_pad = 64;
  std::memcpy(&b[36], &big_pad, 4);
  refused(b, "pad entry 0");
  // A second entry before the first (out of order).
  b = good;
  uint32_t first = 0;
  std::memcpy(&first, &b[32], 4);
  std::memcpy(&b[40], &first, 4);
  refused(b, "pad entry 1");
}

TEST(TcpFrameTest, HelloAndVerdict) {
  const std::string ticket(kTicketBytes, 'k');
  const std::string hello = EncodeHello(ticket);
  ASSERT_EQ(hello.size(), kHelloBytes);
  absl::StatusOr<std::string> t = DecodeHello(reinterpret_cast<const uint8_t*>(hello.data()));
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, ticket);
  std::string http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n" + std::string(kHelloBytes, ' ');
  EXPECT_FALSE(DecodeHello(reinterpret_cast<const uint8_t*>(http.data())).ok());

  const std::string v = EncodeVerdict(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "expired ticket"));
  grpc::StatusCode code;
  uint32_t n = 0;
  ASSERT_TRUE(DecodeVerdictHeader(reinterpret_cast<const uint8_t*>(v.data()), &code, &n).ok());
  EXPECT_EQ(code, grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(v.substr(kVerdictHeaderBytes, n), "expired ticket");
  std::string long_one = v;
  long_one[kMagicBytes + 5] = 0x10;  // 4 KiB of message
  EXPECT_FALSE(DecodeVerdictHeader(reinterpret_cast<const uint8_t*>(long_one.data()), &code, &n).ok());
}

// The reader and writer over a real socket pair: small frames batched, a
// large one (over the socket's buffer, so the writer's thread finishes it)
// in a buffer of its own, an oversized one skipped with its header
// reported, and the end of the connection.
TEST(TcpFrameIoTest, FramesOfEverySizeCrossASocketAndAnOversizedOneIsSkipped) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  net::Fd a(sv[0]), b(sv[1]);
  auto pool = BufferPool::Create();
  FrameWriter writer(a.get(), "peer b");
  constexpr int kSmall = 100;
  Tensor big(DT_FLOAT, TensorShape({4 << 20}));  // 16 MiB
  for (int64_t i = 0; i < big.NumElements(); i += 4096) big.data<float>()[i] = static_cast<float>(i);
  std::thread send([&] {
    writer.Cork();
    for (int i = 0; i < kSmall; ++i) {
      Header h;
      h.method = psframe::Method::kPull;
      h.timeout_ms = 5;
      h.call_id = i;
      pswire::PullArgs p;
      p.variables = {absl::StrCat("v", i)};
      ASSERT_TRUE(writer.Send(Encode(h, "", pswire::EncodePull(p))));
    }
    writer.Uncork();
    pswire::PushArgs push;
    push.gradients.emplace_back("big", big);
    Header h;
    h.method = psframe::Method::kPush;
    h.timeout_ms = 5;
    h.call_id = 1000;
    ASSERT_TRUE(writer.Send(Encode(h, "", pswire::EncodePush(push))));
    pswire::PushArgs over;
    over.gradients.emplace_back("over", Tensor(DT_FLOAT, TensorShape({(24 << 20) / 4})));  // 24 MiB
    h.call_id = 1001;
    ASSERT_TRUE(writer.Send(Encode(h, "", pswire::EncodePush(over))));
    h.method = psframe::Method::kPull;
    h.call_id = 1002;
    ASSERT_TRUE(writer.Send(Encode(h, "", pswire::EncodePull(pswire::PullArgs{}))));
  });
  FrameReader reader(b.get(), pool, 20 << 20, "peer a");
  for (int i = 0; i < kSmall; ++i) {
    std::shared_ptr<TensorBuffer> body;
    absl::StatusOr<Header> over = absl::UnknownError("");
    ASSERT_TRUE(reader.Next(&body, &over, false).ok());
    Header h;
    std::string m;
    grpc::ByteBuffer payload;
    ASSERT_TRUE(DecodeBody(body, false, &h, &m, &payload).ok());
    EXPECT_EQ(h.call_id, static_cast<uint64_t>(i));
    absl::StatusOr<pswire::PullArgs> p = pswire::DecodePull(payload);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->variables[0], absl::StrCat("v", i));
  }
  std::shared_ptr<TensorBuffer> body;
  absl::StatusOr<Header> over = absl::UnknownError("");
  ASSERT_TRUE(reader.Next(&body, &over, false).ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(body->data()) % kAlignment, 0u);  // its own buffer
  Header h;
  std::string m;
  grpc::ByteBuffer payload;
  ASSERT_TRUE(DecodeBody(body, false, &h, &m, &payload).ok());
  EXPECT_EQ(h.call_id, 1000u);
  absl::StatusOr<pswire::PushArgs> push = pswire::DecodePush(payload, nullptr, /*adopt_aligned=*/true);
  ASSERT_TRUE(push.ok());
  const Tensor& got = push->gradients[0].second;
  const auto* lo = static_cast<const uint8_t*>(body->data());
  const auto* p = reinterpret_cast<const uint8_t*>(got.data<float>());
  EXPECT_TRUE(p >= lo && p < lo + body->size()) << "the 16 MiB tensor was copied, not adopted";
  for (int64_t i = 0; i < big.NumElements(); i += 4096) ASSERT_EQ(got.data<float>()[i], static_cast<float>(i));

  absl::Status s = reader.Next(&body, &over, false);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  ASSERT_TRUE(over.ok()) << over.status();
  EXPECT_EQ(over->call_id, 1001u);  // the caller can answer it
  ASSERT_TRUE(reader.Next(&body, &over, false).ok());  // and the stream goes on after it
  ASSERT_TRUE(DecodeBody(body, false, &h, &m, &payload).ok());
  EXPECT_EQ(h.call_id, 1002u);
  send.join();

  writer.Close();  // the peer sees the end
  s = reader.Next(&body, &over, false);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_FALSE(writer.Send(Encode(h, "", grpc::ByteBuffer())));  // closed: dropped
}

TEST(TcpFrameIoTest, AConnectionCutMidFrameIsUnavailable) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  net::Fd a(sv[0]), b(sv[1]);
  Header h;
  h.method = psframe::Method::kPush;
  h.timeout_ms = 5;
  pswire::PushArgs push;
  push.gradients.emplace_back("w", Tensor(DT_FLOAT, TensorShape({100000})));
  const std::string wire = Flatten(*Encode(h, "", pswire::EncodePush(push)));
  ASSERT_EQ(::write(a.get(), wire.data(), wire.size() / 2), static_cast<ssize_t>(wire.size() / 2));
  a.Reset();
  FrameReader reader(b.get(), BufferPool::Create(), 1 << 30, "peer a");
  std::shared_ptr<TensorBuffer> body;
  absl::StatusOr<Header> over = absl::UnknownError("");
  absl::Status s = reader.Next(&body, &over, false);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
}

// A peer that reads a little now and then (16 KiB every 100 ms, as a
// hostile client trickles) kept a connection, and every answer queued on
// it, for ever: the send deadline was only between bytes. Now a frame must
// be taken whole within the deadline and a second per MiB of it: this 2 MiB
// frame within 1 + 2 s, where the trickle needs more than 3 s.
TEST(TcpFrameIoTest, APeerThatTricklesIsGivenUpWhenAFrameIsNotTakenWholeInTime) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  net::Fd a(sv[0]), b(sv[1]);
  FrameWriter writer(a.get(), "peer b", absl::Seconds(1));
  Header h;
  h.response = true;
  pswire::PushArgs push;
  push.gradients.emplace_back("w", Tensor(DT_FLOAT, TensorShape({512 << 10})));  // 2 MiB
  const absl::Time start = absl::Now();
  ASSERT_TRUE(writer.Send(Encode(h, "", pswire::EncodePush(push))));
  std::atomic<bool> stop{false};
  std::thread trickler([&] {
    std::string buf(16 << 10, '\0');
    while (!stop.load() && ::read(b.get(), buf.data(), buf.size()) > 0) {
      absl::SleepFor(absl::Milliseconds(100));  // the attacker's pace, not synchronisation
    }
  });
  absl::Status broken;
  while ((broken = writer.broken()).ok() && absl::Now() - start < absl::Seconds(20)) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  const absl::Duration took = absl::Now() - start;
  stop = true;
  writer.Close();
  trickler.join();
  EXPECT_EQ(broken.code(), absl::StatusCode::kDeadlineExceeded) << broken;
  EXPECT_NE(broken.message().find("did not take a whole frame of"), absl::string_view::npos) << broken;
  EXPECT_LT(took, absl::Seconds(6)) << "given up after " << took;
}


// ------------------------------------------------ stalled and trickled frames

constexpr uint64_t kMiB = 1 << 20;
constexpr absl::Duration kWait = absl::Seconds(20);  // a bound on waits for a condition

// The first bytes of a frame announcing a body of `n` bytes: its prefix and
// a push's header (call `call`), as a client that then stalls sends them.
std::string FrameHead(uint64_t n, uint64_t call) {
  Header h;
  h.method = psframe::Method::kPush;
  h.timeout_ms = 5000;
  h.call_id = call;
  std::string wire = Flatten(*Encode(h, "", grpc::ByteBuffer()));
  EXPECT_EQ(wire.size(), kPrefixBytes + kHeaderBytes);
  for (int i = 0; i < 8; ++i) wire[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return wire;
}

std::string PushWire(uint64_t call, size_t bytes) {
  pswire::PushArgs push;
  push.gradients.emplace_back("w", Tensor(DT_FLOAT, TensorShape({static_cast<int64_t>(bytes / 4)})));
  Header h;
  h.method = psframe::Method::kPush;
  h.timeout_ms = 5000;
  h.call_id = call;
  return Flatten(*Encode(h, "", pswire::EncodePush(push)));
}

bool WriteAll(int fd, const std::string& bytes) {
  return net::IoExact(fd, const_cast<char*>(bytes.data()), bytes.size(), true, absl::Now() + kWait, nullptr, "peer")
      .ok();
}

// Waits (bounded) until `budget` holds `bytes`.
bool AwaitHeld(const ByteBudget& budget, uint64_t bytes) {
  for (const absl::Time end = absl::Now() + kWait; budget.held() != bytes && absl::Now() < end;) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  return budget.held() == bytes;
}

struct Pair {
  Pair() {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    peer = net::Fd(sv[0]);
    mine = net::Fd(sv[1]);
  }
  net::Fd peer, mine;
};

// Issue #28: a frame announcing 1 GiB was charged whole to the budget the
// moment its prefix came, and then waited for its body for ever: two such
// frames held the PS's whole default budget (2 GiB) and every push was
// refused. Now each holds one step (1 MiB); a stall announcing all of an
// 8 MiB budget holds 1 MiB of it, and a 6 MiB push fits beside it; every
// stall is given up at its idle deadline and gives its MiB back.
TEST(TcpFrameIoTest, AStalledFrameHoldsOneStepOfTheBudgetUntilItsIdleDeadline) {
  FrameDeadlines d;
  d.idle = absl::Seconds(2);
  auto whole = std::make_shared<ByteBudget>(uint64_t{2} << 30);  // the PS's default
  auto small = std::make_shared<ByteBudget>(8 * kMiB);
  struct Stall {
    std::shared_ptr<ByteBudget> budget;
    uint64_t announced;
    Pair pair;
    absl::Status ended;
    absl::Duration took;
  };
  Stall stalls[3] = {{whole, uint64_t{1} << 30}, {whole, uint64_t{1} << 30}, {small, 8 * kMiB}};
  std::shared_ptr<BufferPool> pool = BufferPool::Create();
  std::vector<std::thread> readers;
  for (int i = 0; i < 3; ++i) {
    Stall& st = stalls[i];
    // Its prefix, its header and a little of its body; then nothing.
    ASSERT_TRUE(WriteAll(st.pair.peer.get(), FrameHead(st.announced, i) + std::string(1000, 'x')));
    readers.emplace_back([&st, &d, pool, i] {
      FrameReader reader(st.pair.mine.get(), pool, uint64_t{1} << 30, absl::StrCat("staller ", i), st.budget, d);
      std::shared_ptr<TensorBuffer> body;
      absl::StatusOr<Header> over = absl::UnknownError("");
      const absl::Time start = absl::Now();
      st.ended = reader.Next(&body, &over, false);
      st.took = absl::Now() - start;
    });
  }
  EXPECT_TRUE(AwaitHeld(*whole, 2 * kMiB)) << whole->held();
  EXPECT_TRUE(AwaitHeld(*small, kMiB)) << small->held();
  const uint64_t held_whole = whole->held(), held_small = small->held();

  // A 6 MiB push beside them, under each budget.
  const std::string push = PushWire(7, 6 * kMiB);
  for (const std::shared_ptr<ByteBudget>& budget : {small, whole}) {
    const uint64_t before = budget->held();
    Pair legit;
    std::thread sender([&] { EXPECT_TRUE(WriteAll(legit.peer.get(), push)); });
    FrameReader reader(legit.mine.get(), pool, uint64_t{1} << 30, "legit", budget, d);
    std::shared_ptr<TensorBuffer> body;
    absl::StatusOr<Header> over = absl::UnknownError("");
    absl::Status s = reader.Next(&body, &over, false);
    sender.join();
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(budget->held(), before + body->size());
    body.reset();
    EXPECT_EQ(budget->held(), before);
  }

  for (std::thread& t : readers) t.join();
  for (const Stall& st : stalls) {
    EXPECT_EQ(st.ended.code(), absl::StatusCode::kDeadlineExceeded) << st.ended;
    EXPECT_NE(st.ended.message().find("sent nothing for 2s in the middle of a frame"), absl::string_view::npos)
        << st.ended;
    EXPECT_GE(st.took, d.idle);
    EXPECT_LT(st.took, d.idle + absl::Seconds(5));
  }
  EXPECT_EQ(whole->held(), 0u) << "a stalled frame kept its charge";
  EXPECT_EQ(small->held(), 0u) << "a stalled frame kept its charge";
  std::cout << "two stalled frames announcing 1 GiB held " << held_whole << " bytes of a " << whole->limit()
            << "-byte budget, one announcing 8 MiB held " << held_small << " of " << small->limit()
            << "; given up after " << stalls[0].took << ", " << stalls[1].took << ", " << stalls[2].took
            << "; held after: " << whole->held() << " and " << small->held() << "\n";
}

// With 3 MiB of the budget held by others, a 6 MiB frame outgrows it on
// the way (after 5 MiB): it is refused RESOURCE_EXHAUSTED
// naming the limit and its flag, with its header for the answer; the rest
// of it is dropped, its charge given back, and the frames behind it on the
// connection are read.
TEST(TcpFrameIoTest, AFrameThatOutgrowsTheBudgetOnTheWayIsRefusedAndTheNextFrameIsRead) {
  auto budget = std::make_shared<ByteBudget>(8 * kMiB);
  ASSERT_TRUE(budget->TryAcquire(3 * kMiB));  // other connections' requests
  Pair p;
  Header small;
  small.method = psframe::Method::kPull;
  small.timeout_ms = 5;
  small.call_id = 2;
  const std::string wire = PushWire(1, 6 * kMiB) + Flatten(*Encode(small, "", pswire::EncodePull({}))) +
                           PushWire(3, 3 * kMiB);
  std::thread sender([&] { EXPECT_TRUE(WriteAll(p.peer.get(), wire)); });
  FrameReader reader(p.mine.get(), BufferPool::Create(), uint64_t{1} << 30, "peer a", budget);
  std::shared_ptr<TensorBuffer> body;
  absl::StatusOr<Header> over = absl::UnknownError("");
  absl::Status s = reader.Next(&body, &over, false);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("refused after 5242880 bytes"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("the budget is 8388608 (--max_data_plane_mb)"), absl::string_view::npos) << s;
  ASSERT_TRUE(over.ok()) << over.status();
  EXPECT_EQ(over->call_id, 1u);
  EXPECT_EQ(budget->held(), 3 * kMiB) << "the refused frame kept its charge";
  budget->Release(3 * kMiB);
  ASSERT_TRUE(reader.Next(&body, &over, false).ok());
  Header h;
  std::string m;
  grpc::ByteBuffer payload;
  ASSERT_TRUE(DecodeBody(body, false, &h, &m, &payload).ok());
  EXPECT_EQ(h.call_id, 2u);
  s = reader.Next(&body, &over, false);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(budget->held(), body->size());  // charged in steps, to its size exactly
  ASSERT_TRUE(DecodeBody(body, false, &h, &m, &payload).ok());
  EXPECT_EQ(h.call_id, 3u);
  absl::StatusOr<pswire::PushArgs> push = pswire::DecodePush(payload, nullptr, /*adopt_aligned=*/true);
  ASSERT_TRUE(push.ok()) << push.status();
  const auto* lo = static_cast<const uint8_t*>(body->data());
  const auto* t = static_cast<const uint8_t*>(push->gradients[0].second.raw_data());
  EXPECT_TRUE(t >= lo && t < lo + body->size()) << "the tensor was copied, not adopted";
  push = absl::UnknownError("");
  payload.Clear();
  body.reset();
  EXPECT_EQ(budget->held(), 0u);
  sender.join();
}

// A frame that could never fit the budget is refused before its body is
// read or allocated; one whose bytes then stall ends its connection at the
// idle deadline all the same.
TEST(TcpFrameIoTest, AFrameLargerThanTheWholeBudgetIsRefusedAtOnce) {
  FrameDeadlines d;
  d.idle = absl::Milliseconds(300);
  auto budget = std::make_shared<ByteBudget>(8 * kMiB);
  Pair p;
  ASSERT_TRUE(WriteAll(p.peer.get(), FrameHead(uint64_t{1} << 30, 9) + std::string(1000, 'x')));
  FrameReader reader(p.mine.get(), BufferPool::Create(), uint64_t{1} << 30, "peer a", budget, d);
  std::shared_ptr<TensorBuffer> body;
  absl::StatusOr<Header> over = absl::UnknownError("");
  absl::Status s = reader.Next(&body, &over, false);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;  // dropping its bytes stalled
  EXPECT_EQ(budget->held(), 0u);
}

// A frame kept alive a byte at a time is never idle; it is given up once
// it is older than its grace and has come slower than the rate, and gives
// its charge back.
TEST(TcpFrameIoTest, AFrameTrickledAByteAtATimeIsGivenUpAfterItsGrace) {
  FrameDeadlines d;
  d.idle = absl::Seconds(5);
  d.slow_grace = absl::Milliseconds(500);
  auto budget = std::make_shared<ByteBudget>(uint64_t{2} << 30);
  Pair p;
  ASSERT_TRUE(WriteAll(p.peer.get(), FrameHead(uint64_t{1} << 30, 4)));
  std::atomic<bool> stop{false};
  std::thread trickler([&] {
    const char byte = 'x';
    while (!stop.load() && ::send(p.peer.get(), &byte, 1, MSG_NOSIGNAL) == 1) {
      absl::SleepFor(absl::Milliseconds(20));  // the attacker's pace, not synchronisation
    }
  });
  FrameReader reader(p.mine.get(), BufferPool::Create(), uint64_t{1} << 30, "peer a", budget, d);
  std::shared_ptr<TensorBuffer> body;
  absl::StatusOr<Header> over = absl::UnknownError("");
  const absl::Time start = absl::Now();
  absl::Status s = reader.Next(&body, &over, false);
  const absl::Duration took = absl::Now() - start;
  stop = true;
  p.mine.Reset();
  trickler.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("slower than 64 KiB/s"), absl::string_view::npos) << s;
  EXPECT_GE(took, d.slow_grace);
  EXPECT_LT(took, d.idle) << "given up only by the idle deadline";
  EXPECT_EQ(budget->held(), 0u);
  std::cout << "a frame trickled a byte per 20 ms was given up after " << took << ": " << s.message() << "\n";
}

}  // namespace
}  // namespace tcpframe
}  // namespace psrt
