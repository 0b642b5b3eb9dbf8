"""psrt_proto_library: protoc + grpc_cpp_plugin from Debian, as a genrule.

Each call compiles `srcs` to C++ (and gRPC stubs with grpc = True) and wraps
the result in a cc_library of the same name. `deps` are other
psrt_proto_library targets whose .proto files `srcs` import.
"""

load("@rules_cc//cc:defs.bzl", "cc_library")

def psrt_proto_library(name, srcs, deps = [], grpc = False, visibility = None):
    stems = [s[:-len(".proto")] for s in srcs]
    outs = []
    for s in stems:
        outs += [s + ".pb.h", s + ".pb.cc"]
        if grpc:
            outs += [s + ".grpc.pb.h", s + ".grpc.pb.cc"]

    native.filegroup(
        name = name + "_protos",
        srcs = srcs + [d + "_protos" for d in deps],
        visibility = visibility,
    )

    grpc_flags = ""
    if grpc:
        grpc_flags = "--grpc_out=$(GENDIR) --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin "
    native.genrule(
        name = name + "_gen",
        srcs = srcs + [name + "_protos"],
        outs = outs,
        cmd = "/usr/bin/protoc -I. --cpp_out=$(GENDIR) " + grpc_flags +
              " ".join(["$(location %s)" % s for s in srcs]),
    )

    cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + ["//third_party:protobuf"] + (["//third_party:grpc"] if grpc else []),
        visibility = visibility,
    )
