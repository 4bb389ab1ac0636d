#include "network.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace garden::distribute::detail {

using Clock = std::chrono::steady_clock;

// This host's address on the route to `host`: a UDP socket connected there
// (which sends nothing) and its local name. "" when there is no route.
std::string local_address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found)
    return "";
  std::string result;
  const int fd = ::socket(found->ai_family, SOCK_DGRAM, 0);
  if (fd >= 0) {
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    if (::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* raw =
          local.ss_family == AF_INET6
              ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(&local)->sin6_addr)
              : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(&local)->sin_addr);
      if (inet_ntop(local.ss_family, raw, text, sizeof(text))) result = text;
    }
    ::close(fd);
  }
  freeaddrinfo(found);
  return result;
}

// The first IPv4 address (else IPv6) of interface `name`; "" when none.
std::string interface_address(const std::string& name) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::string v4, v6;
  for (const ifaddrs* entry = list; entry; entry = entry->ifa_next) {
    if (!entry->ifa_addr || name != entry->ifa_name) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (entry->ifa_addr->sa_family == AF_INET && v4.empty()) {
      if (inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(entry->ifa_addr)->sin_addr, text,
                    sizeof(text)))
        v4 = text;
    } else if (entry->ifa_addr->sa_family == AF_INET6 && v6.empty()) {
      if (inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(entry->ifa_addr)->sin6_addr,
                    text, sizeof(text)))
        v6 = text;
    }
  }
  ::freeifaddrs(list);
  return v4.empty() ? v6 : v4;
}

// `host` as a numeric address, as Gloo binds it (a peer need not resolve
// this host's names); "" when it does not resolve.
std::string numeric_address(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || !found) return "";
  char text[NI_MAXHOST] = {};
  const bool ok = getnameinfo(found->ai_addr, found->ai_addrlen, text, sizeof(text), nullptr, 0,
                              NI_NUMERICHOST) == 0;
  freeaddrinfo(found);
  return ok ? text : "";
}

// A socket listening on every address of this host at a port of the
// kernel's choice; -1 (and no probes of this rank) when it cannot be made.
int listen_for_probes(int* port) {
  const int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool v6 = fd >= 0;
  const int sock = v6 ? fd : ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (sock < 0) return -1;
  sockaddr_storage address{};
  socklen_t length = 0;
  if (v6) {
    const int off = 0;  // IPv4 peers too
    ::setsockopt(sock, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&address);
    in6->sin6_family = AF_INET6;
    in6->sin6_addr = in6addr_any;
    length = sizeof(sockaddr_in6);
  } else {
    auto* in4 = reinterpret_cast<sockaddr_in*>(&address);
    in4->sin_family = AF_INET;
    in4->sin_addr.s_addr = htonl(INADDR_ANY);
    length = sizeof(sockaddr_in);
  }
  if (::bind(sock, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      ::listen(sock, SOMAXCONN) != 0 ||
      ::getsockname(sock, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    ::close(sock);
    return -1;
  }
  *port = ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&address)->sin6_port
                   : reinterpret_cast<sockaddr_in*>(&address)->sin_port);
  return sock;
}

// Opens a connection to every (address, port) at once and says, for each,
// whether it opened within `limit`.
std::vector<bool> connects_within(const std::vector<std::pair<std::string, int>>& targets,
                                  std::chrono::milliseconds limit) {
  std::vector<bool> opened(targets.size(), false);
  std::vector<int> fds(targets.size(), -1);
  std::vector<pollfd> waiting;
  std::vector<std::size_t> which;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (getaddrinfo(targets[i].first.c_str(), std::to_string(targets[i].second).c_str(), &hints,
                    &found) != 0 ||
        !found)
      continue;
    const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
      fds[i] = fd;
      if (::connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
        opened[i] = true;
      } else if (errno == EINPROGRESS) {
        waiting.push_back({fd, POLLOUT, 0});
        which.push_back(i);
      }
    }
    freeaddrinfo(found);
  }
  const auto deadline = Clock::now() + limit;
  std::size_t left = waiting.size();
  while (left > 0) {
    const auto remaining =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (remaining <= 0) break;
    const int ready = ::poll(waiting.data(), waiting.size(), static_cast<int>(remaining));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    for (std::size_t k = 0; k < waiting.size(); ++k) {
      if (waiting[k].fd < 0 || !waiting[k].revents) continue;
      int error = 0;
      socklen_t length = sizeof(error);
      ::getsockopt(waiting[k].fd, SOL_SOCKET, SO_ERROR, &error, &length);
      opened[which[k]] = error == 0;
      waiting[k].fd = -1;  // poll skips it from now on
      --left;
    }
  }
  for (const int fd : fds)
    if (fd >= 0) ::close(fd);
  return opened;
}

}  // namespace garden::distribute::detail
