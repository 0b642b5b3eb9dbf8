// Protobuf's per-message log lines, limited: a flood of requests with
// invalid UTF-8 in a string field costs a bounded number of log lines.
#include "common/protobuf_log_limit.h"

#include <atomic>
#include <string>

#include "glog/logging.h"
#include "gtest/gtest.h"
#include "proto/ps_service.pb.h"

namespace psrt {
namespace {

TEST(LogRateLimiterTest, AdmitsThePerWindowCountThenReportsTheRestOnce) {
  LogRateLimiter l(3, absl::Minutes(1));
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  int64_t dropped = -1;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(l.Admit(t0 + absl::Seconds(i), &dropped));
    EXPECT_EQ(dropped, 0);
  }
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(l.Admit(t0 + absl::Seconds(10), &dropped));
  EXPECT_TRUE(l.Admit(t0 + absl::Seconds(61), &dropped));  // a new window
  EXPECT_EQ(dropped, 5);
  EXPECT_TRUE(l.Admit(t0 + absl::Seconds(62), &dropped));
  EXPECT_EQ(dropped, 0);  // said once
}

class CountingSink : public google::LogSink {
 public:
  void send(google::LogSeverity, const char*, const char*, int, const struct ::tm*, const char* message,
            size_t length) override {
    const std::string text(message, length);
    if (text.find("protobuf") != std::string::npos) ++lines;
  }
  std::atomic<int> lines{0};
};

TEST(LimitProtobufLogsTest, AThousandInvalidStringsLogAFewLines) {
  LimitProtobufLogs(20);
  CountingSink sink;
  google::AddLogSink(&sink);
  // A VariableDef whose name (a string field) is not UTF-8.
  std::string bad;
  bad.push_back(0x0a);  // field 1, length-delimited
  bad.push_back(2);
  bad.push_back(static_cast<char>(0xff));
  bad.push_back(static_cast<char>(0xfe));
  int refused = 0;
  for (int i = 0; i < 1000; ++i) {
    VariableDef d;
    refused += d.ParseFromString(bad) ? 0 : 1;
  }
  google::RemoveLogSink(&sink);
  EXPECT_EQ(refused, 1000);  // protobuf refuses them (and logs each)
  EXPECT_GE(sink.lines.load(), 1);
  EXPECT_LE(sink.lines.load(), 21);  // 20 lines a minute (+ a summary)
}

}  // namespace
}  // namespace psrt
