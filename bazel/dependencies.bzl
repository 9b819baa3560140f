"""chunkzero_dependencies(): the repositories chunkzero's targets need.

A workspace that depends on chunkzero calls it after declaring chunkzero
itself (examples/WORKSPACE does):

    local_repository(name = "chunkzero", path = "../chunkzero")
    load("@chunkzero//bazel:dependencies.bzl", "chunkzero_dependencies")
    chunkzero_dependencies(chunkzero_path = "../chunkzero")

Everything is local: the three stand-ins Bazel 4.2.3 resolves by default
(third_party/README.md) and the system libraries Debian packages install
(tools/setup.sh). Nothing is downloaded.
"""

def _system(name, build_file, path = "/usr"):
    native.new_local_repository(
        name = name,
        build_file = str(build_file),
        path = path,
    )

def chunkzero_dependencies(chunkzero_path = "."):
    """Declares chunkzero's dependencies.

    Args:
      chunkzero_path: chunkzero's checkout, relative to the calling
        workspace's root (or absolute): the stand-ins live in its
        third_party/.
    """
    for stand_in in ["rules_cc", "rules_java", "remote_coverage_tools"]:
        native.local_repository(
            name = stand_in,
            path = chunkzero_path + "/third_party/" + stand_in,
        )
    _system("com_google_absl", Label("//third_party/system:absl.BUILD"))
    _system("com_google_googletest", Label("//third_party/system:gtest.BUILD"))
    _system("com_github_google_benchmark", Label("//third_party/system:benchmark.BUILD"))
    _system("com_google_protobuf", Label("//third_party/system:protobuf.BUILD"))
    _system("gloo", Label("//third_party/system:gloo.BUILD"))
    _system("liburing", Label("//third_party/system:liburing.BUILD"))
    _system("nlohmann_json", Label("//third_party/system:nlohmann_json.BUILD"))
    _system("onednn", Label("//third_party/system:onednn.BUILD"))
    _system("cuda", Label("//third_party/system:cuda.BUILD"), path = "/usr/local/cuda")
