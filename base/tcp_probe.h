// AcceptsTcpOnLoopback: whether something listens on 127.0.0.1:port now (a
// TCP connect that is closed at once), for code that starts a server and
// waits until it answers.
#ifndef CHUNKZERO_BASE_TCP_PROBE_H_
#define CHUNKZERO_BASE_TCP_PROBE_H_

namespace chunkzero {

bool AcceptsTcpOnLoopback(int port);

}  // namespace chunkzero

#endif  // CHUNKZERO_BASE_TCP_PROBE_H_
