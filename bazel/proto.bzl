"""C++ protobuf libraries from the system protoc (Debian's protobuf 3.21).

Bazel 4.2.3's proto rules want to build protoc from source, which would
need a download; a genrule over /usr/bin/protoc does the same job offline.
"""

load("@rules_cc//cc:defs.bzl", "cc_library")

def chunkzero_cc_proto_library(name, srcs, deps = [], **kwargs):
    """Generates <src>.pb.{h,cc} for each .proto in srcs and wraps them.

    Imports are resolved from the repository's root, so a proto imports
    others as "pkg/file.proto"; list their chunkzero_cc_proto_library
    targets in deps. Inside another workspace (chunkzero as an external
    repository) the root is external/<name>, and the generated files go
    under it, where the includes of that repository look.
    """
    repository = native.repository_name()
    root = "." if repository == "@" else "external/" + repository[1:]
    hdrs = [s[:-len(".proto")] + ".pb.h" for s in srcs]
    ccs = [s[:-len(".proto")] + ".pb.cc" for s in srcs]
    native.genrule(
        name = name + "_protoc",
        srcs = srcs,
        outs = hdrs + ccs,
        cmd = "/usr/bin/protoc -I%s --cpp_out=$(GENDIR)/%s $(SRCS)" % (root, root),
    )
    cc_library(
        name = name,
        srcs = ccs,
        hdrs = hdrs,
        deps = deps + ["@com_google_protobuf//:protobuf"],
        **kwargs
    )
