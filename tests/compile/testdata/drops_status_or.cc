// Must not compile: a StatusOr (value or error) is dropped.
#include "base/file.h"

void Drop() { chunkzero::ReadFileToString("/etc/hostname"); }
