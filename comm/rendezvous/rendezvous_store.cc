#include "comm/rendezvous/rendezvous_store.h"

#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "comm/net/host_port.h"
#include "comm/rendezvous/tcp_store.h"
#include "comm/rendezvous/tcp_store_server.h"
#include "comm/rendezvous/timed_file_store.h"
#include "comm/rendezvous/timed_redis_store.h"

namespace chunkzero {
namespace comm {
namespace {

absl::Status Bad(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("rendezvous address \"", text, "\": ", why));
}

// "HOST[:PORT]" or "[V6]:PORT"; `default_port` 0: the port is required.
absl::Status ParseHostPort(absl::string_view text, absl::string_view hostport,
                           int default_port, RendezvousAddress* out) {
  absl::StatusOr<gloo_internal::HostPort> split =
      gloo_internal::SplitHostPort(hostport);
  if (!split.ok()) return Bad(text, split.status().message());
  out->host = split->host;
  const absl::string_view port = split->port;
  if (port.empty()) {
    if (default_port == 0) return Bad(text, "no port (HOST:PORT)");
    out->port = default_port;
    return absl::OkStatus();
  }
  int value = 0;
  if (!absl::SimpleAtoi(port, &value) || value < 1 || value > 65535 ||
      !absl::ascii_isdigit(static_cast<unsigned char>(port[0]))) {
    return Bad(text, absl::StrCat("port \"", port, "\" is not in [1, 65535]"));
  }
  out->port = value;
  return absl::OkStatus();
}

}  // namespace

std::string RendezvousAddress::ToString() const {
  const std::string where =
      absl::StrContains(host, ':') ? absl::StrCat("[", host, "]") : host;
  switch (kind) {
    case Kind::kDirectory:
      return directory;
    case Kind::kRedis:
      return absl::StrCat("redis://", where, ":", port, "/", prefix);
    case Kind::kTcp:
      return absl::StrCat("tcp://", where, ":", port);
  }
  return directory;
}

absl::StatusOr<RendezvousAddress> ParseRendezvousAddress(
    absl::string_view text) {
  RendezvousAddress out;
  if (text.empty()) return Bad(text, "empty");
  absl::string_view rest = text;
  if (absl::ConsumePrefix(&rest, "redis://")) {
    out.kind = RendezvousAddress::Kind::kRedis;
    const size_t slash = rest.find('/');
    const absl::string_view prefix =
        slash == absl::string_view::npos ? "" : rest.substr(slash + 1);
    if (prefix.empty()) {
      return Bad(text,
                 "no job prefix: write redis://HOST:PORT/PREFIX with a "
                 "PREFIX of this job's own, so that keys a killed job left "
                 "behind cannot confuse it");
    }
    for (char c : prefix) {
      if (absl::ascii_isspace(static_cast<unsigned char>(c)) ||
          absl::ascii_iscntrl(static_cast<unsigned char>(c))) {
        return Bad(text, "the prefix holds a space or control character");
      }
    }
    out.prefix = std::string(prefix);
    if (absl::Status s = ParseHostPort(text, rest.substr(0, slash), 6379, &out);
        !s.ok()) {
      return s;
    }
    return out;
  }
  if (absl::ConsumePrefix(&rest, "tcp://")) {
    out.kind = RendezvousAddress::Kind::kTcp;
    if (absl::StrContains(rest, '/')) {
      return Bad(text, "a tcp:// address is HOST:PORT, with no path");
    }
    if (absl::Status s = ParseHostPort(text, rest, 0, &out); !s.ok()) return s;
    return out;
  }
  if (const size_t scheme = text.find("://");
      scheme != absl::string_view::npos) {
    return Bad(text, absl::StrCat("unknown scheme \"", text.substr(0, scheme),
                                  "\": use a directory, redis://HOST:PORT/"
                                  "PREFIX or tcp://HOST:PORT"));
  }
  // A store's scheme written wrong would otherwise name a directory here
  // (and rank 0 would wait there alone), as would "/" or blanks.
  for (absl::string_view scheme : {"redis:", "tcp:"}) {
    if (absl::StartsWithIgnoreCase(text, scheme)) {
      return Bad(text, absl::StrCat("write ", scheme, "//HOST:PORT",
                                    scheme == "redis:" ? "/PREFIX" : ""));
    }
  }
  if (absl::StripAsciiWhitespace(text).empty()) {
    return Bad(text, "blank: name a directory or a store");
  }
  if (std::filesystem::path(std::string(text)).lexically_normal() == "/") {
    return Bad(text,
               "the root directory: give each job a directory of its own");
  }
  out.directory = std::string(text);
  return out;
}

absl::StatusOr<std::unique_ptr<RendezvousStore>> RendezvousStore::Open(
    const RendezvousAddress& address, int rank, absl::Duration timeout) {
  std::unique_ptr<RendezvousStore> out(new RendezvousStore());
  const std::string where = address.ToString();
  switch (address.kind) {
    case RendezvousAddress::Kind::kDirectory: {
      std::error_code error;
      std::filesystem::create_directories(address.directory, error);
      if (error) {
        return absl::InvalidArgumentError(
            absl::StrCat("rendezvous directory ", address.directory,
                         ": cannot create it: ", error.message()));
      }
      try {
        out->base_ = std::make_unique<TimedFileStore>(address.directory);
      } catch (const std::exception& e) {
        return absl::UnavailableError(absl::StrCat(
            "rendezvous directory ", address.directory, ": ", e.what()));
      }
      return out;
    }
    case RendezvousAddress::Kind::kRedis: {
      // The store puts PREFIX/ before every key itself, so that its errors
      // name the keys as the server holds them.
      absl::StatusOr<std::unique_ptr<TimedRedisStore>> redis =
          TimedRedisStore::Connect(address.host, address.port, timeout,
                                   address.prefix);
      if (!redis.ok()) return redis.status();
      out->redis_ = redis->get();
      out->base_ = *std::move(redis);
      return out;
    }
    case RendezvousAddress::Kind::kTcp: {
      if (rank == 0) {
        absl::StatusOr<std::unique_ptr<TcpStoreServer>> server =
            TcpStoreServer::Start(address.port);
        if (!server.ok()) {
          return absl::Status(server.status().code(),
                              absl::StrCat("rank 0 hosts ", where, ": ",
                                           server.status().message()));
        }
        out->server_ = *std::move(server);
      }
      // Rank 0 reaches its own server over loopback: HOST need not name
      // this machine the way the others see it.
      absl::StatusOr<std::unique_ptr<TcpStore>> client =
          TcpStore::Connect(rank == 0 ? std::string("localhost") : address.host,
                            address.port, timeout);
      if (!client.ok()) return client.status();
      out->base_ = *std::move(client);
      return out;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("rendezvous address ", where, ": unknown kind"));
}

RendezvousStore::~RendezvousStore() = default;

absl::Status RendezvousStore::DeleteKeysItSet() {
  return redis_ != nullptr ? redis_->DeleteKeysItSet() : absl::OkStatus();
}

}  // namespace comm
}  // namespace chunkzero
