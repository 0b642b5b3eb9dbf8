"""cuda_library: .cu files compiled by nvcc in a genrule, linked with cudart.

Only under --config=cuda (the //:cuda_enabled setting); otherwise the
library is built from `fallback_srcs`, which must define the same symbols
(returning "built without CUDA").
"""

load("@rules_cc//cc:defs.bzl", "cc_library")

NVCC_FLAGS = " ".join([
    "-O3",
    "-std=c++17",
    "-Xcompiler -fPIC",
    "-gencode arch=compute_90,code=sm_90",
    "-gencode arch=compute_90,code=compute_90",
])

def cuda_library(name, cu_srcs, hdrs, fallback_srcs, deps = [], cuda_deps = [], visibility = None):
    objs = []
    for src in cu_srcs:
        obj = name + "_" + src.replace("/", "_").replace(".cu", ".pic.o")
        native.genrule(
            name = obj + "_nvcc",
            srcs = [src] + hdrs,
            outs = [obj],
            cmd = "/usr/local/cuda/bin/nvcc -c " + NVCC_FLAGS + " -I. -I$(GENDIR) $(location " + src + ") -o $@",
            # Built only through the select below (--config=cuda), so a
            # default `bazel build //...` needs no nvcc.
            tags = ["manual"],
        )
        objs.append(obj)

    cc_library(
        name = name,
        srcs = select({
            "//:cuda_enabled": objs,
            "//conditions:default": fallback_srcs,
        }),
        hdrs = hdrs,
        defines = select({
            "//:cuda_enabled": ["PSRT_WITH_CUDA=1"],
            "//conditions:default": [],
        }),
        deps = deps + select({
            "//:cuda_enabled": ["@local_cuda//:cudart"] + cuda_deps,
            "//conditions:default": [],
        }),
        visibility = visibility,
    )
