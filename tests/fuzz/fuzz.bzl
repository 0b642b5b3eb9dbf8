"""psrt_fuzzer: one fuzz harness, built two ways, and its bounded test.

Default build: the harness is linked with standalone_main.cc (replays the
seeds, then random mutations of them) so `bazel test //...` exercises it
with gcc. Under --config=fuzz (clang, ASan, UBSan; see .bazelrc) it is a
real libFuzzer binary. In both, `<name>_test` runs it for a bounded time
over tests/fuzz/corpus/<name>/.
"""

load("@rules_cc//cc:defs.bzl", "cc_binary")

def psrt_fuzzer(name, srcs, deps, corpus = None, default_seconds = 3, fuzz_seconds = 25, size = "small"):
    corpus = corpus or ("corpus/" + name)
    cc_binary(
        name = name,
        srcs = srcs,
        deps = deps + select({
            "//tests/fuzz:fuzz_build": [],
            "//conditions:default": ["//tests/fuzz:standalone_main"],
        }),
        linkopts = select({
            "//tests/fuzz:fuzz_build": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
        testonly = True,
    )
    native.filegroup(
        name = name + "_corpus",
        srcs = native.glob([corpus + "/**"]),
        testonly = True,
    )
    native.sh_test(
        name = name + "_test",
        size = size,
        srcs = ["//tests/fuzz:run_fuzzer.sh"],
        args = [
            "$(location :%s)" % name,
            "tests/fuzz/" + corpus,
        ] + select({
            "//tests/fuzz:fuzz_build": [str(fuzz_seconds)],
            "//conditions:default": [str(default_seconds)],
        }),
        data = [":" + name, ":" + name + "_corpus"],
        tags = ["fuzz"],
    )
