// Fuzzes the hand-written protobuf reader of common/tensor_wire.h. The
// input is split into 1..4 slices (gRPC hands messages over in slices and
// the reader walks slice boundaries by hand), then read as a stream of
// NamedTensor fields. Every tensor the reader accepts must have content
// that matches its shape, and write back to bytes that read back the same.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/tensor_wire.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "tensor_wire_fuzzer: invariant failed: %s\n", what);
    std::abort();
  }
}

std::vector<grpc::Slice> SliceUp(const uint8_t* data, size_t size) {
  // The first byte picks where to cut, so the fuzzer explores boundaries.
  std::vector<grpc::Slice> slices;
  uint8_t cuts = size > 0 ? data[0] : 0;
  if (size > 0) {
    ++data;
    --size;
  }
  size_t pos = 0;
  for (int i = 0; i < 3 && pos < size; ++i) {
    size_t len = ((cuts >> (2 * i)) & 3) * (size / 7 + 1);
    len = std::min(len, size - pos);
    slices.emplace_back(data + pos, len);  // empty slices too: the reader must skip them
    pos += len;
  }
  slices.emplace_back(data + pos, size - pos);
  return slices;
}

bool SameTensor(const psrt::Tensor& a, const psrt::Tensor& b) {
  return a.dtype() == b.dtype() && a.shape().dims() == b.shape().dims() &&
         a.TotalBytes() == b.TotalBytes() &&
         (a.TotalBytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.TotalBytes()) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  psrt::wire::Reader r(SliceUp(data, size));
  uint32_t field;
  int type;
  while (r.Next(&field, &type)) {
    if (type != psrt::wire::kLengthDelimited) {
      if (!r.Skip(type)) break;
      continue;
    }
    // Field 1 as a NamedTensor (push/pull), any other as a bare TensorProto.
    absl::StatusOr<std::pair<std::string, psrt::Tensor>> nt;
    if (field == 1) {
      nt = r.ReadNamedTensor();
    } else {
      absl::StatusOr<psrt::Tensor> t = r.ReadTensor();
      if (t.ok()) nt = std::make_pair(std::string("t"), *std::move(t));
      else nt = t.status();
    }
    if (!nt.ok()) break;
    const psrt::Tensor& t = nt->second;
    // In 128 bits: a product that wraps around in 64 would hide a tensor
    // whose shape claims more elements than its buffer holds.
    Check((unsigned __int128)t.shape().num_elements() * psrt::DataTypeSize(t.dtype()) ==
              t.TotalBytes(),
          "accepted tensor's content does not match its shape");

    psrt::wire::Writer w;
    w.NamedTensor(1, nt->first, t);
    grpc::ByteBuffer buf = w.Finish();
    psrt::wire::Reader back(buf);
    uint32_t f;
    int ty;
    Check(back.Next(&f, &ty) && f == 1 && ty == psrt::wire::kLengthDelimited, "re-encoded tag");
    absl::StatusOr<std::pair<std::string, psrt::Tensor>> again = back.ReadNamedTensor();
    Check(again.ok(), "re-encoded tensor is refused");
    Check(again->first == nt->first && SameTensor(again->second, t), "round trip changes it");
    Check(!back.Next(&f, &ty) && back.status().ok(), "re-encoded message has trailing bytes");
  }
  return 0;
}
