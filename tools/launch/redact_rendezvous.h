// For the launcher's tests: the launcher's rendezvous directories are
// mkdtemp names, different in every run; tests compare output with them
// spelt "<tmpdir>/chunkzero-rendezvous.XXXXXX".
#ifndef CHUNKZERO_TOOLS_LAUNCH_REDACT_RENDEZVOUS_H_
#define CHUNKZERO_TOOLS_LAUNCH_REDACT_RENDEZVOUS_H_

#include <string>

#include "absl/strings/str_cat.h"

namespace chunkzero {

// `text` with the 6-character mkdtemp suffix of every
// "`tmpdir`/chunkzero-rendezvous.??????" replaced by XXXXXX.
inline std::string RedactRendezvousDirs(std::string text,
                                        const std::string& tmpdir) {
  const std::string prefix = absl::StrCat(tmpdir, "/chunkzero-rendezvous.");
  for (size_t at = text.find(prefix); at != std::string::npos;
       at = text.find(prefix, at + 1)) {
    text.replace(at + prefix.size(), 6, "XXXXXX");
  }
  return text;
}

}  // namespace chunkzero

#endif  // CHUNKZERO_TOOLS_LAUNCH_REDACT_RENDEZVOUS_H_
