"""Project macros: every chunkzero C++ target goes through these.

They hold the warning flags (-Werror included) in one place, give tests
their GoogleTest dependency, and keep benchmarks out of `bazel test //...`.
"""

load("@rules_cc//cc:defs.bzl", "cc_binary", "cc_library", "cc_test")

CHUNKZERO_COPTS = [
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wno-unused-parameter",
    "-Wno-sign-compare",
    "-Wno-missing-field-initializers",
]

def chunkzero_cc_library(name, copts = [], **kwargs):
    """A library target with the project's warnings."""
    cc_library(
        name = name,
        copts = CHUNKZERO_COPTS + copts,
        **kwargs
    )

def chunkzero_cc_test(name, deps = [], copts = [], size = "small", **kwargs):
    """A GoogleTest test linked with gtest_main and GoogleMock."""
    cc_test(
        name = name,
        copts = CHUNKZERO_COPTS + copts,
        size = size,
        deps = deps + [
            "@com_google_googletest//:gtest_main",
        ],
        **kwargs
    )

def chunkzero_cc_binary(name, copts = [], **kwargs):
    """A binary target with the project's warnings."""
    cc_binary(
        name = name,
        copts = CHUNKZERO_COPTS + copts,
        **kwargs
    )

def chunkzero_cc_benchmark(name, deps = [], copts = [], tags = [], **kwargs):
    """A Google Benchmark binary. Tagged manual: `bazel test //...` skips it;
    run it with `bazel run -c opt`."""
    cc_binary(
        name = name,
        copts = CHUNKZERO_COPTS + copts,
        tags = tags + ["manual", "benchmark"],
        deps = deps + ["@com_github_google_benchmark//:benchmark"],
        **kwargs
    )

def chunkzero_cc_fuzz_test(name, srcs, corpus, deps = [], copts = [], size = "small", **kwargs):
    """A libFuzzer target: `srcs` define LLVMFuzzerTestOneInput.

    In ordinary builds it is a test that calls the function once on every
    file of `corpus` (seed inputs, and every crash found so far), so the
    corpus is a regression suite. Under --config=fuzz (clang) it links
    libFuzzer instead; tools/fuzz/run.sh runs it to search for new inputs.
    """
    native.filegroup(
        name = name + "_corpus",
        srcs = corpus,
        testonly = True,
    )
    cc_test(
        name = name,
        srcs = srcs,
        copts = CHUNKZERO_COPTS + copts,
        size = size,
        data = [":" + name + "_corpus"],
        args = ["$(rootpaths :" + name + "_corpus)"],
        linkopts = select({
            "//bazel:fuzzing": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
        deps = deps + select({
            "//bazel:fuzzing": [],
            "//conditions:default": ["//bazel/fuzz:corpus_main"],
        }),
        tags = kwargs.pop("tags", []) + ["fuzz"],
        **kwargs
    )
