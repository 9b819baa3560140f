// FreeLoopbackPort: a TCP port on 127.0.0.1 that nothing listened on a
// moment ago, for tests that start a server on a port of their choosing
// (one that could, rarely, be taken in between).
#ifndef CHUNKZERO_COMM_TESTING_FREE_PORT_H_
#define CHUNKZERO_COMM_TESTING_FREE_PORT_H_

namespace chunkzero {
namespace comm_testing {

// The port, or -1 if the system gave none.
int FreeLoopbackPort();

}  // namespace comm_testing
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_TESTING_FREE_PORT_H_
