// ParameterServer/Exchange in one process: a real core and service behind a
// gRPC server on loopback. A stream whose client sends pull frames and never
// reads an answer stops being read once kMaxUnwrittenAnswers answers wait
// (its own writes stall under HTTP/2 flow control) instead of making the PS
// make and keep an answer for every frame; another stream is served all
// along, and once no answer has been written for the write timeout the PS
// ends the flood's stream itself (before, it held it for good).
#include "common/store/ps_exchange.h"

#include <atomic>
#include <iostream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/store/ps_metrics.h"
#include "common/store/ps_service.h"
#include "common/store/server_core.h"
#include "common/transport/ps_frame.h"
#include "common/transport/ps_wire.h"
#include "google/protobuf/text_format.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

constexpr absl::Duration kDeadline = absl::Seconds(20);

grpc::ByteBuffer PullFrame(uint64_t call_id) {
  pswire::PullArgs a;
  a.variables = {"w"};
  a.worker = 0;
  a.step = 0;
  psframe::RequestHeader h;
  h.method = psframe::Method::kPull;
  h.timeout_ms = 10000;
  h.call_id = call_id;
  return psframe::EncodeRequest(h, pswire::EncodePull(a));
}

// Writes the same pull frame as fast as gRPC takes it; never reads.
class Flood : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit Flood(grpc::GenericStub* stub) : frame_(PullFrame(1)) {
    stub->PrepareBidiStreamingCall(&ctx_, psframe::kExchangeMethod, grpc::StubOptions(), this);
    StartWrite(&frame_);
    StartCall();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) return;
    written_.fetch_add(1);
    StartWrite(&frame_);
  }
  void OnDone(const grpc::Status&) override {
    absl::MutexLock lock(&mu_);
    done_ = true;
  }
  void Cancel() { ctx_.TryCancel(); }
  bool AwaitDone(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&done_), timeout);
  }
  int64_t written() const { return written_.load(); }

 private:
  grpc::ByteBuffer frame_;
  grpc::ClientContext ctx_;
  std::atomic<int64_t> written_{0};
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

// Polls `value` every 10 ms until `done(value)` or the deadline.
template <typename Value, typename Done>
bool AwaitValue(Value value, Done done, absl::Duration timeout) {
  for (const absl::Time end = absl::Now() + timeout; absl::Now() < end; absl::SleepFor(absl::Milliseconds(10))) {
    if (done(value())) return true;
  }
  return done(value());
}

TEST(PsExchangeTest, AStreamWhoseAnswersAreNotReadIsNoLongerReadAndOthersAreServed) {
  ServerCoreOptions co;
  co.incarnation = 7;
  co.snapshot_root = absl::StrCat(std::getenv("TEST_TMPDIR"), "/snapshots");
  ParameterServerCore core(co);
  CreateVariablesRequest req;
  // 16 KiB answers: a few fill the client's flow-control window.
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(R"(
      variable { name: "w" dtype: DT_FLOAT shape { dim: 4096 } initializer { kind: ZEROS } }
      optimizer { sgd { learning_rate: 1 } }
      consistency { mode: ASYNC } num_workers: 1)",
                                                            &req));
  ASSERT_TRUE(core.CreateVariables(req).ok());
  PsServiceImpl service(&core);
  service.set_exchange_write_timeout(absl::Seconds(3));
  auto metrics = std::make_shared<PsMetrics>();
  service.set_metrics(metrics);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_GT(port, 0);

  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  auto served = [&] { return metrics->pull.calls.load(); };
  auto flood = std::make_unique<Flood>(&stub);
  ASSERT_TRUE(AwaitValue(
      served, [](int64_t n) { return n >= 64; }, kDeadline))
      << served();
  // Served frames stop growing: no 100 more in any whole second once the
  // stream is held up (the server no longer reads it).
  int64_t last = served();
  const bool held = AwaitValue(
      [&] {
        absl::SleepFor(absl::Seconds(1));  // the window over which growth is measured
        const int64_t now = served(), grew = now - last;
        last = now;
        return grew;
      },
      [](int64_t grew) { return grew < 100; }, kDeadline);
  std::cout << "a stream that reads no answer: " << flood->written() << " frames written by the client, " << served()
            << " served\n";
  EXPECT_TRUE(held) << "the server still reads the flood: " << served() << " frames served";
  EXPECT_LT(served(), 20000);

  // Another stream (another caller: its own channel) is served meanwhile.
  grpc::ChannelArguments args;
  args.SetInt("psrt.test.other", 1);  // not the flood's subchannel
  std::shared_ptr<grpc::Channel> other_channel =
      grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials(), args);
  grpc::GenericStub other(other_channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kDeadline));
  grpc::CompletionQueue cq;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call = other.PrepareCall(&ctx, psframe::kExchangeMethod, &cq);
  void* tag = nullptr;
  bool ok = false;
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  call->Write(PullFrame(7), reinterpret_cast<void*>(2));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  grpc::ByteBuffer answer;
  call->Read(&answer, reinterpret_cast<void*>(3));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  uint64_t id = 0;
  grpc::Status status;
  grpc::ByteBuffer payload;
  ASSERT_TRUE(psframe::DecodeResponse(answer, &id, &status, &payload).ok());
  EXPECT_EQ(id, 7u);
  EXPECT_TRUE(status.ok()) << status.error_message();
  ctx.TryCancel();
  call->Finish(&status, reinterpret_cast<void*>(4));
  ASSERT_TRUE(cq.Next(&tag, &ok));

  // The other stream ended; no answer written for 3 s, the PS ends the
  // flood's stream itself (its reactor finishes; before, it waited for
  // its caller for good). The caller is sent CANCELLED.
  EXPECT_TRUE(AwaitValue(
      LiveExchangeStreams, [](int64_t n) { return n == 0; }, kDeadline))
      << LiveExchangeStreams() << " streams still held";
  flood->Cancel();
  EXPECT_TRUE(flood->AwaitDone(kDeadline));
  server->Shutdown(absl::ToChronoTime(absl::Now() + kDeadline));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

}  // namespace
}  // namespace psrt
