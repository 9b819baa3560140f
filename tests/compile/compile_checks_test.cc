// What the compiler, not review, enforces, checked by compiling small
// programs in testdata with the project's warning flags:
// - dropping a collective's Work or any Status / StatusOr fails to compile
//   (drops_*.cc), with g++ (the default toolchain) and clang++ when
//   installed; the same calls with results used compile (uses_results.cc);
// - with clang's -Wthread-safety (the thread-safety config), touching an
//   ABSL_GUARDED_BY member without its mutex fails to compile.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

struct Compiled {
  int exit_code = -1;
  std::string output;
};

// The repository root in the test's runfiles.
std::string SourceRoot() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir != nullptr ? srcdir : ".", "/",
                      workspace != nullptr ? workspace : "chunkzero");
}

// Syntax-checks `file` (relative to the root) with the project's warning
// flags (bazel/chunkzero.bzl's CHUNKZERO_COPTS, -Werror included).
Compiled Compile(const std::string& compiler, const std::string& file,
                 const std::string& extra_flags = "") {
  const std::string root = SourceRoot();
  const std::string command = absl::StrCat(
      compiler,
      " -std=c++17 -fsyntax-only -Wall -Wextra -Werror -Wno-unused-parameter "
      "-Wno-sign-compare -Wno-missing-field-initializers ",
      extra_flags, " -I", root, " ", root, "/", file, " 2>&1");
  Compiled result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    result.output.append(buffer, n);
  }
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

bool Installed(const std::string& compiler) {
  return std::system(absl::StrCat("command -v ", compiler, " >/dev/null 2>&1")
                         .c_str()) == 0;
}

std::vector<std::string> Compilers() {
  std::vector<std::string> compilers = {"g++"};
  if (Installed("clang++")) compilers.push_back("clang++");
  return compilers;
}

constexpr char kTestdata[] = "tests/compile/testdata/";

TEST(Nodiscard, UsingEveryResultCompiles) {
  for (const std::string& compiler : Compilers()) {
    SCOPED_TRACE(compiler);
    const Compiled c =
        Compile(compiler, absl::StrCat(kTestdata, "uses_results.cc"));
    EXPECT_EQ(c.exit_code, 0) << c.output;
  }
}

TEST(Nodiscard, DroppingAWorkOrAStatusFailsToCompile) {
  struct Case {
    const char* file;
    const char* discarded;  // The call the diagnostic must name.
  };
  for (const std::string& compiler : Compilers()) {
    for (const Case& c : {Case{"drops_work.cc", "AllReduce"},
                          Case{"drops_wait_status.cc", "Wait"},
                          Case{"drops_status.cc", "AllReduce"},
                          Case{"drops_status_or.cc", "ReadFileToString"}}) {
      SCOPED_TRACE(absl::StrCat(compiler, " ", c.file));
      const Compiled got = Compile(compiler, absl::StrCat(kTestdata, c.file));
      EXPECT_NE(got.exit_code, 0) << got.output;
      EXPECT_THAT(got.output, ::testing::HasSubstr("nodiscard"));
      EXPECT_THAT(got.output, ::testing::HasSubstr(c.discarded));
    }
  }
}

TEST(ThreadSafetyAnalysis, GuardedMemberWithoutItsMutexFailsToCompile) {
  if (!Installed("clang++")) GTEST_SKIP() << "clang++ is not installed";
  const std::string flags = "-Wthread-safety -Wthread-safety-beta";
  const Compiled locked = Compile(
      "clang++", absl::StrCat(kTestdata, "reads_guarded_with_lock.cc"), flags);
  EXPECT_EQ(locked.exit_code, 0) << locked.output;
  const Compiled unlocked =
      Compile("clang++",
              absl::StrCat(kTestdata, "reads_guarded_without_lock.cc"), flags);
  EXPECT_NE(unlocked.exit_code, 0) << unlocked.output;
  EXPECT_THAT(unlocked.output,
              ::testing::HasSubstr("requires holding mutex 'mu_'"));
}

}  // namespace
}  // namespace chunkzero
