// The text the train job learns when given no data: a few pages of plain
// English written for this project, read as bytes (vocab 256).
#ifndef CHUNKZERO_TOOLS_TRAIN_BUILTIN_CORPUS_H_
#define CHUNKZERO_TOOLS_TRAIN_BUILTIN_CORPUS_H_

#include "absl/strings/string_view.h"

namespace chunkzero {

absl::string_view BuiltinCorpus();

}  // namespace chunkzero

#endif  // CHUNKZERO_TOOLS_TRAIN_BUILTIN_CORPUS_H_
