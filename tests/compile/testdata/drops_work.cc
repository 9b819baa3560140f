// Must not compile: the Work handle of a collective is dropped, so nothing
// ever waits for it or sees its error.
#include <vector>

#include "comm/process_group.h"

void Drop(chunkzero::comm::ProcessGroup& group, std::vector<float>& grads) {
  group.AllReduce(chunkzero::comm::MutableBuffer::Of(grads), {});
}
