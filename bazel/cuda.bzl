"""cuda_library: .cu sources compiled by nvcc into a cc_library.

    cuda_library(
        name = "cuda_cast_kernels",
        srcs = ["cuda_cast_kernels.cu"],
        includes_from = ["half.h", "//base:host_device.h"],
    )

Under --config=cuda each source is compiled by /usr/local/cuda/bin/nvcc
(C++17, -O3, position-independent) for Hopper (sm_90 machine code) plus
compute_90 PTX, which the driver compiles for newer GPUs, and the library
links cudart. Without --config=cuda nvcc never runs (the compile rules are
tagged manual, so `bazel build //...` does not build them on a machine
without CUDA) and the library holds `stub_srcs` instead: C++ with the
header's functions, each reporting that there is no CUDA, or nothing.

Builds without CUDA have one scheme: what calls CUDA has a stub selected by
select() on //bazel:cuda, never an #if. A library's C++ that calls the
CUDA runtime picks `<name>.cc` or `<name>_stub.cc` in its srcs (e.g.
//tensor/cuda:cuda_runtime); the functions nvcc compiles get theirs from
`stub_srcs` here, so that the Status-returning wrapper over them (a .cc
file, one source for both builds) runs its argument checks either way.
Code that must know guards on BuiltWithCuda() (tensor/cuda/cuda_runtime.h).

`.cu` files see only the headers named in `includes_from` (plus CUDA's
own), resolved from the workspace root: keep them free of Abseil and the
rest of the library, and put the Status-returning wrappers in .cc files.
"""

load("@rules_cc//cc:defs.bzl", "cc_library")
load("//bazel:chunkzero.bzl", "CHUNKZERO_COPTS")

NVCC = "/usr/local/cuda/bin/nvcc"

NVCC_FLAGS = " ".join([
    "-std=c++17",
    "-O3",
    "-Xcompiler=-fPIC",
    "-Xcompiler=-fno-omit-frame-pointer",
    # IEEE results: no fused multiply-add contraction, exact division and
    # square root, denormals kept (the CPU kernels' semantics).
    "-fmad=false",
    "-prec-div=true",
    "-prec-sqrt=true",
    "-ftz=false",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
    "-I.",
])

def cuda_library(name, srcs, includes_from = [], deps = [], stub_srcs = [], **kwargs):
    objects = []
    for src in srcs:
        obj = "%s_%s.pic.o" % (name, src.replace("/", "_").replace(".cu", ""))
        native.genrule(
            name = obj + "_nvcc",
            srcs = [src] + includes_from,
            outs = [obj],
            cmd = "%s %s -c $(location %s) -o $@" % (NVCC, NVCC_FLAGS, src),
            tags = ["manual"],
            message = "nvcc " + src,
        )
        objects.append(obj)
    cc_library(
        name = name,
        srcs = select({
            "//bazel:cuda": objects,
            "//conditions:default": stub_srcs,
        }),
        # The project's warnings, for the stubs (nvcc's objects are built).
        copts = CHUNKZERO_COPTS + kwargs.pop("copts", []),
        deps = deps + select({
            "//bazel:cuda": ["@cuda//:cudart"],
            "//conditions:default": [],
        }),
        **kwargs
    )
