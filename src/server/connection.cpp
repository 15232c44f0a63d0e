// connection.cpp: see connection.h. Linux: the open descriptors come from /proc/self/fd.
#include "server/connection.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <string>

namespace dsv4::server {
namespace {

// Numeric host and port of a socket address, formatted as cpp-httplib fills Request's fields.
bool host_and_port(const sockaddr_storage& addr, socklen_t len, std::string* host, int* port) {
  if (addr.ss_family == AF_INET) {
    *port = ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    *port = ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  } else {
    return false;
  }
  std::array<char, NI_MAXHOST> buf{};
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, buf.data(), socklen_t(buf.size()), nullptr, 0,
                  NI_NUMERICHOST) != 0)
    return false;
  *host = buf.data();
  return true;
}

bool matches(int fd, const httplib::Request& req) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  std::string host;
  int port = -1;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 || !host_and_port(addr, len, &host, &port) ||
      port != req.local_port || host != req.local_addr)
    return false;
  len = sizeof(addr);
  return getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 && host_and_port(addr, len, &host, &port) &&
         port == req.remote_port && host == req.remote_addr;
}

}  // namespace

int connection_socket(const httplib::Request& req) {
  if (req.remote_port < 0 || req.local_port < 0) return -1;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  const int own = dirfd(dir);
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == own) continue;
    if (matches(int(fd), req)) {
      found = int(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

bool peer_hung_up(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if ((p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0) return true;
  if ((p.revents & POLLIN) == 0) return false;
  char c;
  const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

}  // namespace dsv4::server
