// Control methods served as raw callback methods, parsed here.
//
// A generated handler answers a request whose bytes do not parse with
// UNIMPLEMENTED (callback services) or INTERNAL (sync ones), which tells a
// caller the server lacks the method or broke. Registering the method raw
// (Service::WithRawCallbackMethod_X) and parsing with ServeParsed answers
// INVALID_ARGUMENT naming the method instead (issue #17).
//
//   grpc::ServerUnaryReactor* Start(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
//                                   grpc::ByteBuffer* resp) override {
//     return ServeParsed<StartRequest, StartResponse>(ctx, req, resp, "Start",
//         [&] { return auth_.Authorize(*ctx, Rpc::kWorkerStart); },
//         [&](const StartRequest& r, StartResponse* out) { return Start(ctx, &r, out); });
//   }
//
// `check_first` (the caller's credentials) runs before a byte is parsed, so
// a stranger learns nothing and costs no parse. The handler runs inline on gRPC's callback thread, as the PS's other
// methods do; it returns the call's status and fills the response.
#ifndef PSRT_COMMON_RPC_PARSED_UNARY_H_
#define PSRT_COMMON_RPC_PARSED_UNARY_H_

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"

namespace psrt {

// Parses `in` as Req: INVALID_ARGUMENT naming `method` and the message type
// when the bytes are not a well-formed Req.
template <typename Req>
grpc::Status ParseRequest(const grpc::ByteBuffer& in, absl::string_view method, Req* req) {
  grpc::ByteBuffer copy(in);  // shares the slices; Deserialize consumes its argument
  const size_t size = copy.Length();
  if (grpc::Status s = grpc::SerializationTraits<Req>::Deserialize(&copy, req); !s.ok()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat(method, ": the request (", size, " bytes) does not parse as ",
                                     Req::descriptor()->full_name()));
  }
  return grpc::Status::OK;
}

template <typename Req, typename Resp, typename Check, typename Handler>
grpc::ServerUnaryReactor* ServeParsed(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                      grpc::ByteBuffer* out, absl::string_view method, Check&& check_first,
                                      Handler&& handler) {
  Req req;
  Resp resp;
  grpc::Status s = check_first();
  if (s.ok()) s = ParseRequest(*in, method, &req);
  if (s.ok()) s = handler(static_cast<const Req&>(req), &resp);
  if (s.ok()) {
    bool own_buffer = false;
    s = grpc::SerializationTraits<Resp>::Serialize(resp, out, &own_buffer);
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(s);
  return reactor;
}

}  // namespace psrt

#endif  // PSRT_COMMON_RPC_PARSED_UNARY_H_
