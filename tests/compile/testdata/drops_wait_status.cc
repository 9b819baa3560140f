// Must not compile: the Status of Work::Wait is dropped.
#include <memory>

#include "comm/work.h"

void Drop(std::unique_ptr<chunkzero::comm::Work> work) { work->Wait(); }
