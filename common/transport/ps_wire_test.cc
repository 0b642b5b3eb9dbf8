// Our hand-written messages against protobuf's, both ways.
#include "common/transport/ps_wire.h"

#include "gtest/gtest.h"

namespace psrt {
namespace pswire {
namespace {

grpc::ByteBuffer FromProto(const google::protobuf::Message& m) {
  std::string s = m.SerializeAsString();
  grpc::Slice slice(s);
  return grpc::ByteBuffer(&slice, 1);
}

TEST(PsWireTest, PushBothWays) {
  PushArgs a;
  a.id.set_worker(3);
  a.id.set_worker_incarnation(0xdeadbeefcafeull);
  a.id.set_step(1234567);
  a.id.set_generation(1795495517776);
  a.id.set_has_data(true);  // the batch the step read (issue #27)
  a.id.set_data_stream(5);
  a.id.set_data_batch(987654321);
  a.gradients.emplace_back("w", Tensor::FromVector<float>({1, 2, 3}, TensorShape({3})));
  a.gradients.emplace_back("b", Tensor::Scalar<float>(4));
  // The step's rows ride in the same message (issue #13).
  a.rows.push_back({"emb", Tensor::FromVector<int64_t>({-5, 9}, TensorShape({2})),
                    Tensor::FromVector<float>({1, 2, 3, 4}, TensorShape({2, 2}))});
  PushRequest proto;
  ASSERT_TRUE(proto.ParseFromString(wire::ToString(EncodePush(a))));
  EXPECT_EQ(proto.id().worker(), 3);
  EXPECT_EQ(proto.id().worker_incarnation(), 0xdeadbeefcafeull);
  EXPECT_EQ(proto.id().step(), 1234567);
  EXPECT_EQ(proto.id().generation(), 1795495517776);
  EXPECT_TRUE(proto.id().has_data());
  EXPECT_EQ(proto.id().data_stream(), 5);
  EXPECT_EQ(proto.id().data_batch(), 987654321);
  ASSERT_EQ(proto.gradient_size(), 2);
  EXPECT_EQ(proto.gradient(1).name(), "b");
  ASSERT_EQ(proto.rows_size(), 1);
  EXPECT_EQ(proto.rows(0).variable(), "emb");

  auto back = DecodePush(FromProto(proto));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->id.step(), 1234567);
  EXPECT_EQ(back->id.generation(), 1795495517776);
  EXPECT_TRUE(back->id.has_data());
  EXPECT_EQ(back->id.data_stream(), 5);
  EXPECT_EQ(back->id.data_batch(), 987654321);
  EXPECT_EQ(back->gradients[0].second.data<float>()[2], 3.0f);
  EXPECT_EQ(back->gradients[1].second.shape().rank(), 0);
  ASSERT_EQ(back->rows.size(), 1u);
  EXPECT_EQ(back->rows[0].ids.data<int64_t>()[0], -5);
  EXPECT_EQ(back->rows[0].values.data<float>()[3], 4.0f);
}

// A bucketed push's part number and last mark (RequestId fields 5 and 6)
// travel both ways, a negative number too (the PS refuses it, see
// push_parts.h).
TEST(PsWireTest, BucketFieldsBothWays) {
  for (int bucket : {7, -3}) {
    PushArgs a;
    a.id.set_step(9);
    a.id.set_bucket(bucket);
    a.id.set_last_bucket(bucket > 0);
    PushRequest proto;
    ASSERT_TRUE(proto.ParseFromString(wire::ToString(EncodePush(a))));
    EXPECT_EQ(proto.id().bucket(), bucket);
    EXPECT_EQ(proto.id().last_bucket(), bucket > 0);
    auto back = DecodePush(FromProto(proto));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->id.bucket(), bucket);
    EXPECT_EQ(back->id.last_bucket(), bucket > 0);
    EXPECT_EQ(back->id.step(), 9);
  }
}

TEST(PsWireTest, PullAndResultBothWays) {
  PullArgs a{{"x", "y"}, -1, 77, 42};
  PullRequest proto;
  ASSERT_TRUE(proto.ParseFromString(wire::ToString(EncodePull(a))));
  EXPECT_EQ(proto.worker(), -1);
  EXPECT_EQ(proto.generation(), 42);
  EXPECT_EQ(proto.variable(1), "y");
  auto back = DecodePull(FromProto(proto));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->worker, -1);
  EXPECT_EQ(back->step, 77);
  EXPECT_EQ(back->generation, 42);

  PullResult r;
  r.tensors.emplace_back("x", Tensor::FromVector<float>({5, 6}, TensorShape({1, 2})));
  r.global_step = 9;
  r.incarnation = 1ull << 63;
  PullResponse resp;
  ASSERT_TRUE(resp.ParseFromString(wire::ToString(EncodePullResult(r))));
  EXPECT_EQ(resp.incarnation(), 1ull << 63);
  auto rb = DecodePullResult(FromProto(resp));
  ASSERT_TRUE(rb.ok());
  EXPECT_EQ(rb->tensors[0].second.data<float>()[1], 6.0f);
  EXPECT_EQ(rb->global_step, 9);
}

TEST(PsWireTest, RowsBothWays) {
  PullRowsArgs a;
  a.ids.emplace_back("emb", Tensor::FromVector<int64_t>({4, 1LL << 50}, TensorShape({2})));
  a.worker = 1;
  a.step = 2;
  a.generation = 3;
  PullRowsRequest proto;
  ASSERT_TRUE(proto.ParseFromString(wire::ToString(EncodePullRows(a))));
  EXPECT_EQ(proto.rows(0).variable(), "emb");
  EXPECT_EQ(proto.generation(), 3);
  auto back = DecodePullRows(FromProto(proto));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->generation, 3);
  EXPECT_EQ(back->ids[0].second.data<int64_t>()[1], 1LL << 50);

  PushRowsArgs p;
  p.id.set_worker(1);
  p.rows.push_back({"emb", Tensor::FromVector<int64_t>({4}, TensorShape({1})),
                    Tensor::FromVector<float>({0.5f, 1.5f}, TensorShape({1, 2}))});
  PushRowsRequest pp;
  ASSERT_TRUE(pp.ParseFromString(wire::ToString(EncodePushRows(p))));
  EXPECT_EQ(pp.gradient(0).variable(), "emb");
  auto pb = DecodePushRows(FromProto(pp));
  ASSERT_TRUE(pb.ok());
  EXPECT_EQ(pb->rows[0].values.data<float>()[1], 1.5f);
}

// Found by tests/fuzz/ps_request_fuzzer: an entry with no tensor decoded
// to an invalid Tensor that the server then indexed.
TEST(PsWireTest, RowEntriesWithoutTheirTensorsAreRefused) {
  PullRowsRequest pull;
  pull.add_rows()->set_variable("emb");
  auto a = DecodePullRows(FromProto(pull));
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("'emb' has no ids"), std::string::npos) << a.status();

  PushRowsRequest push;
  auto* g = push.add_gradient();
  g->set_variable("emb");
  Tensor::FromVector<int64_t>({4}, TensorShape({1})).ToProto(g->mutable_ids());
  auto p = DecodePushRows(FromProto(push));
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("needs both ids and values"), std::string::npos) << p.status();
}

TEST(PsWireTest, GarbageIsAnErrorNamingTheMessage) {
  std::string junk = "\x0a\xff\xff\xff\x0f";
  grpc::Slice s(junk);
  auto r = DecodePush(grpc::ByteBuffer(&s, 1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("PushRequest"), std::string::npos);
}

}  // namespace
}  // namespace pswire
}  // namespace psrt
