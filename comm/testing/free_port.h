// FreeLoopbackPort: a TCP port on 127.0.0.1 that nothing listened on a
// moment ago, for tests that start a server on a port of their choosing
// (one that could, rarely, be taken in between). ListeningSocket: a port
// that is taken, for tests of what a client (or a server that wants the
// port) does then.
#ifndef CHUNKZERO_COMM_TESTING_FREE_PORT_H_
#define CHUNKZERO_COMM_TESTING_FREE_PORT_H_

namespace chunkzero {
namespace comm_testing {

// The port, or -1 if the system gave none.
int FreeLoopbackPort();

// A TCP socket listening on a port the system picks, on 127.0.0.1 or, with
// `every_address`, on all of this host's addresses; room for `backlog`
// connections as listen(2) counts them (the kernel accepts them; nobody
// reads). The descriptor (the caller closes it) with *port set, or -1.
int ListeningSocket(int* port, int backlog = 4, bool every_address = false);

}  // namespace comm_testing
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_TESTING_FREE_PORT_H_
