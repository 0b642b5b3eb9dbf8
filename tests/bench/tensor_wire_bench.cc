// What a push of one dense tensor costs in copies and time on our wire path
// versus protobuf's own `bytes` path, beside a plain memcpy of the same bytes.
//
//   bazel run //tests/bench:tensor_wire_bench -- [--mib=16] [--reps=20]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "common/tensor.h"
#include "common/tensor_wire.h"
#include "grpcpp/impl/codegen/proto_buffer_reader.h"
#include "grpcpp/impl/codegen/proto_buffer_writer.h"
#include "proto/tensor.pb.h"

ABSL_FLAG(int, mib, 16, "tensor size in MiB");
ABSL_FLAG(int, reps, 20, "repetitions per measurement");

namespace psrt {
namespace {

template <typename F>
double MeanSeconds(int reps, F&& f) {
  f();  // warm up: fault the pages in once
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / reps;
}

int Main() {
  const int64_t bytes = int64_t{absl::GetFlag(FLAGS_mib)} << 20;
  const int reps = absl::GetFlag(FLAGS_reps);
  Tensor t(DT_FLOAT, TensorShape({bytes / 4}));
  std::memset(t.raw_data(), 1, bytes);
  Tensor dst(DT_FLOAT, TensorShape({bytes / 4}));

  double memcpy_s = MeanSeconds(reps, [&] { std::memcpy(dst.raw_data(), t.raw_data(), bytes); });

  // Ours: encode (no copy) and decode (one copy into aligned storage).
  uint64_t copied_before = wire::TensorBytesCopied();
  double ours_s = MeanSeconds(reps, [&] {
    wire::Writer w;
    w.NamedTensor(2, "w", t);
    grpc::ByteBuffer buf = w.Finish();
    wire::Reader r(buf);
    uint32_t field;
    int type;
    r.Next(&field, &type);
    auto nt = r.ReadNamedTensor();
    if (!nt.ok()) std::abort();
  });
  double ours_copied = static_cast<double>(wire::TensorBytesCopied() - copied_before) / (reps + 1);

  // Ours with a pooled receive buffer (what a server reusing buffers sees):
  // no page faults on the fresh allocation.
  auto pooled = TensorBuffer::Allocate(bytes);
  std::memset(pooled->data(), 0, bytes);
  double pooled_s = MeanSeconds(reps, [&] {
    wire::Writer w;
    w.NamedTensor(2, "w", t);
    grpc::ByteBuffer buf = w.Finish();
    wire::Reader r(buf);
    r.set_allocator([&](size_t) { return pooled; });
    uint32_t field;
    int type;
    r.Next(&field, &type);
    auto nt = r.ReadNamedTensor();
    if (!nt.ok()) std::abort();
  });

  // Protobuf: content into a bytes field, serialized into gRPC slices the
  // way gRPC's generated code does, parsed back, then into a Tensor.
  double proto_s = MeanSeconds(reps, [&] {
    NamedTensor msg;
    msg.set_name("w");
    t.ToProto(msg.mutable_tensor());  // copy 1
    grpc::ByteBuffer buf;
    grpc::ProtoBufferWriter writer(&buf, 8192, static_cast<int>(msg.ByteSizeLong()));
    msg.SerializeToZeroCopyStream(&writer);  // copy 2
    NamedTensor back;
    grpc::ProtoBufferReader reader(&buf);
    back.ParseFromZeroCopyStream(&reader);  // copy 3
    auto out = Tensor::FromProto(back.tensor());  // copy 4
    if (!out.ok()) std::abort();
  });

  auto gbps = [&](double s) { return bytes / s / 1e9; };
  std::printf("tensor wire path, %lld MiB float32, mean of %d\n",
              static_cast<long long>(bytes >> 20), reps);
  std::printf("  memcpy of the same bytes      %8.2f ms  %6.2f GB/s\n", memcpy_s * 1e3, gbps(memcpy_s));
  std::printf("  ours: encode+decode            %8.2f ms  %6.2f GB/s  bytes copied %.0f (%.2f x tensor)\n",
              ours_s * 1e3, gbps(ours_s), ours_copied, ours_copied / bytes);
  std::printf("  ours, pooled receive buffer    %8.2f ms  %6.2f GB/s\n", pooled_s * 1e3,
              gbps(pooled_s));
  std::printf("  protobuf bytes field path      %8.2f ms  %6.2f GB/s  bytes copied ~%lld (4 x tensor)\n",
              proto_s * 1e3, gbps(proto_s), static_cast<long long>(4 * bytes));
  std::printf("  ratio ours / memcpy time       %8.2f (pooled %.2f)\n", ours_s / memcpy_s,
              pooled_s / memcpy_s);
  std::printf("  ratio protobuf / ours time     %8.2f\n", proto_s / ours_s);
  return 0;
}

}  // namespace
}  // namespace psrt

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return psrt::Main();
}
