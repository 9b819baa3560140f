// delay_link: a network link with latency, for kernels without sch_netem
// (tc netem). It joins two namespaces with a TAP device in each and carries
// every Ethernet frame between them in order, those from A to B after
// A_TO_B_MS and those back after B_TO_A_MS (netem's `delay` on A's egress
// is A_TO_B_MS with B_TO_A_MS 0).
//
//   delay_link NS_A TAP_A NS_B TAP_B A_TO_B_MS B_TO_A_MS
//
// The TAP devices are made by this process and vanish with it. Once both
// exist it prints "ready" on stdout. It runs until killed. Frames are
// carried in userspace, so the link is slower than a veth pair; the tests
// use it for latency, not bandwidth.
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <utility>

namespace {

using Clock = std::chrono::steady_clock;

// Opens a TAP device named `name` in the network namespace `ns` (as `ip
// netns` names it); -1 after printing why.
int OpenTap(const std::string& ns, const std::string& name) {
  const std::string path = "/var/run/netns/" + ns;
  const int ns_fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (ns_fd < 0 || setns(ns_fd, CLONE_NEWNET) != 0) {
    std::perror(("delay_link: enter " + path).c_str());
    return -1;
  }
  close(ns_fd);
  const int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    std::perror("delay_link: /dev/net/tun");
    return -1;
  }
  ifreq request{};
  request.ifr_flags = IFF_TAP | IFF_NO_PI;
  std::strncpy(request.ifr_name, name.c_str(), IFNAMSIZ - 1);
  if (ioctl(fd, TUNSETIFF, &request) != 0) {
    std::perror(("delay_link: TUNSETIFF " + name).c_str());
    return -1;
  }
  return fd;
}

struct Frame {
  Clock::time_point due;
  std::string bytes;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr,
                 "usage: delay_link NS_A TAP_A NS_B TAP_B A_TO_B_MS "
                 "B_TO_A_MS\n");
    return 2;
  }
  // Gone with whoever started it, so that its devices (and the namespaces
  // they hold) never outlive a killed test.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  const int a = OpenTap(argv[1], argv[2]);
  const int b = OpenTap(argv[3], argv[4]);
  const std::chrono::milliseconds delay[2] = {
      std::chrono::milliseconds(std::atoi(argv[5])),
      std::chrono::milliseconds(std::atoi(argv[6]))};
  if (a < 0 || b < 0) return 1;
  std::printf("ready\n");
  std::fflush(stdout);
  // Frames on their way from a to b, and from b to a.
  std::deque<Frame> to_b, to_a;
  char buffer[65536];
  while (true) {
    const Clock::time_point now = Clock::now();
    for (auto [queue, fd] : {std::pair{&to_b, b}, std::pair{&to_a, a}}) {
      while (!queue->empty() && queue->front().due <= now) {
        // A full device queue drops the frame, as a congested link would.
        const ssize_t ignored =
            write(fd, queue->front().bytes.data(), queue->front().bytes.size());
        (void)ignored;
        queue->pop_front();
      }
    }
    int wait_ms = -1;
    for (const std::deque<Frame>* queue : {&to_b, &to_a}) {
      if (queue->empty()) continue;
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(
          queue->front().due - Clock::now());
      const int ms = left.count() < 0 ? 0 : static_cast<int>(left.count());
      wait_ms = wait_ms < 0 ? ms : std::min(wait_ms, ms);
    }
    pollfd fds[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    if (poll(fds, 2, wait_ms) < 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (!(fds[i].revents & POLLIN)) continue;
      while (true) {
        const ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
        if (n <= 0) break;
        (i == 0 ? to_b : to_a)
            .push_back({Clock::now() + delay[i],
                        std::string(buffer, static_cast<size_t>(n))});
      }
    }
  }
}
