#include "common/transport/ps_frame.h"

#include <vector>

#include "common/tensor_wire.h"
#include "gtest/gtest.h"

namespace psrt {
namespace psframe {
namespace {


// Two slices, so header and payload boundaries fall inside and between them.
grpc::ByteBuffer TwoSlices(const std::string& a, const std::string& b) {
  grpc::Slice s[2] = {grpc::Slice(a), grpc::Slice(b)};
  return grpc::ByteBuffer(s, 2);
}

TEST(PsFrameTest, RequestRoundTripKeepsEveryField) {
  RequestHeader h;
  h.method = Method::kPushRows;
  h.timeout_ms = 30000;
  h.call_id = 0x0102030405060708ull;
  grpc::ByteBuffer frame = EncodeRequest(h, TwoSlices("push ", "payload"));
  EXPECT_EQ(frame.Length(), 14u + 12u);
  grpc::ByteBuffer payload;
  absl::StatusOr<RequestHeader> got = DecodeRequest(frame, &payload);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->method, Method::kPushRows);
  EXPECT_EQ(got->timeout_ms, 30000u);
  EXPECT_EQ(got->call_id, h.call_id);
  EXPECT_EQ(wire::ToString(payload), "push payload");
  // The header split across slices decodes the same.
  std::string whole = wire::ToString(frame);
  ASSERT_TRUE(DecodeRequest(TwoSlices(whole.substr(0, 5), whole.substr(5)), &payload).ok());
  EXPECT_EQ(wire::ToString(payload), "push payload");
}

TEST(PsFrameTest, MalformedRequestsAreNamed) {
  grpc::ByteBuffer payload;
  absl::Status s = DecodeRequest(TwoSlices("short", ""), &payload).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("header"), absl::string_view::npos) << s;
  RequestHeader h;
  std::string bad = wire::ToString(EncodeRequest(h, TwoSlices("x", "")));
  bad[0] = 9;
  s = DecodeRequest(TwoSlices(bad, ""), &payload).status();
  EXPECT_NE(s.message().find("version 9"), absl::string_view::npos) << s;
  bad[0] = 1;
  for (char m : {0, 5, 127}) {
    bad[1] = m;
    s = DecodeRequest(TwoSlices(bad, ""), &payload).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("method"), absl::string_view::npos) << s;
  }
}

TEST(PsFrameTest, ResponsesCarryStatusOrPayload) {
  uint64_t id = 0;
  grpc::Status st;
  grpc::ByteBuffer payload;
  ASSERT_TRUE(DecodeResponse(EncodeResponse(77, grpc::Status::OK, TwoSlices("ans", "wer")), &id, &st, &payload).ok());
  EXPECT_EQ(id, 77u);
  EXPECT_TRUE(st.ok());
  EXPECT_EQ(wire::ToString(payload), "answer");
  grpc::Status refused(grpc::StatusCode::FAILED_PRECONDITION, "generation 3 is stale");
  ASSERT_TRUE(DecodeResponse(EncodeResponse(78, refused, TwoSlices("dropped", "")), &id, &st, &payload).ok());
  EXPECT_EQ(id, 78u);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(st.error_message(), "generation 3 is stale");
  EXPECT_EQ(wire::ToString(payload), "");  // an error carries no payload
}

TEST(PsFrameTest, MalformedResponsesAreRefused) {
  uint64_t id;
  grpc::Status st;
  grpc::ByteBuffer payload;
  std::string f = wire::ToString(EncodeResponse(1, grpc::Status(grpc::StatusCode::INTERNAL, "abc"), grpc::ByteBuffer()));
  EXPECT_FALSE(DecodeResponse(TwoSlices(f.substr(0, 10), ""), &id, &st, &payload).ok());  // short
  std::string longer = f;
  longer[4] = 100;  // says 100 bytes of message, has 3
  EXPECT_FALSE(DecodeResponse(TwoSlices(longer, ""), &id, &st, &payload).ok());
  std::string code = f;
  code[1] = 40;
  EXPECT_FALSE(DecodeResponse(TwoSlices(code, ""), &id, &st, &payload).ok());
}

TEST(PsFrameTest, MethodsFromUnaryPaths) {
  Method m;
  ASSERT_TRUE(MethodFromPath("/psrt.ParameterServer/PullRows", &m));
  EXPECT_EQ(m, Method::kPullRows);
  EXPECT_FALSE(MethodFromPath("/psrt.ParameterServer/Snapshot", &m));
}

}  // namespace
}  // namespace psframe
}  // namespace psrt
