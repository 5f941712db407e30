#include "server/metrics_http.h"

#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/listen_checks.h"

namespace rbln {
namespace {

// What one client address may hold at once: Prometheus keeps one
// connection per target, a person with curl a few. Connections over it are
// accepted and closed at once, so one host cannot fill the server, nor its
// listen queue.
constexpr unsigned int kMaxConnectionsPerAddress = 8;
// What all addresses together may hold: many hosts of a cluster network
// each within their own limit. Past it, new connections wait in the listen
// queue. Each costs a descriptor (the daemon raises its soft RLIMIT_NOFILE
// to the hard limit at start, server/main.cc) and at most
// kConnectionMemoryBytes.
constexpr unsigned int kMaxConnections = 512;
// A client that sends nothing for this long is dropped: a scrape's request
// is a few hundred bytes, sent at once.
constexpr unsigned int kConnectionTimeoutSeconds = 5;
// The memory of one connection, which holds its request line and headers:
// a URL or header block that does not fit is answered 414 or 431 as soon as
// it overflows, without reading the rest.
constexpr size_t kConnectionMemoryBytes = 8 * 1024;

constexpr char kMetricsPath[] = "/metrics";

// Queues `body` with `status` and `content_type` (and `allow`, for 405).
MHD_Result Reply(MHD_Connection* connection, unsigned int status,
                 const std::string& body, const char* content_type,
                 const char* allow = nullptr) {
  MHD_Response* response = MHD_create_response_from_buffer(
      body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
  if (allow != nullptr) {
    MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, allow);
  }
  const MHD_Result queued = MHD_queue_response(connection, status, response);
  MHD_destroy_response(response);
  return queued;
}

// libmicrohttpd's access handler: called once the request's headers are in
// (and again per piece of a body, which no request here needs: the answer
// is queued on the first call, and the body is never read).
MHD_Result Answer(void* cls, MHD_Connection* connection, const char* url,
                  const char* method, const char* /*version*/,
                  const char* /*upload_data*/, size_t* /*upload_data_size*/,
                  void** /*con_cls*/) {
  const auto* registry = static_cast<const metrics::Registry*>(cls);
  constexpr char kText[] = "text/plain; charset=utf-8";
  if (strcmp(url, kMetricsPath) != 0) {
    return Reply(connection, MHD_HTTP_NOT_FOUND,
                 "not found: the metrics are at /metrics\n", kText);
  }
  if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 &&
      strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
    return Reply(
        connection, MHD_HTTP_METHOD_NOT_ALLOWED,
        absl::StrCat(method, " is not allowed: /metrics answers GET\n"), kText,
        "GET, HEAD");
  }
  return Reply(connection, MHD_HTTP_OK, registry->Exposition(),
               metrics::kExpositionContentType);
}

std::string Describe(const ServerAddress& address) {
  return address.host.find(':') != std::string::npos
             ? absl::StrCat("[", address.host, "]:", address.port)
             : absl::StrCat(address.host, ":", address.port);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const ServerAddress& address, const metrics::Registry* registry) {
  if (address.kind != ServerAddress::Kind::kTcp) {
    return absl::InvalidArgumentError(
        "takes HOST:PORT (a TCP address such as 127.0.0.1:9464), not a Unix "
        "socket");
  }
  const std::string where = Describe(address);
  addrinfo* found = nullptr;
  const int resolved = ResolveToBind(address, &found);
  if (resolved != 0 || found == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": cannot resolve '", address.host,
                     "': ", gai_strerror(resolved)));
  }
  // The daemon binds the socket itself, so that a failure has its errno.
  // Non-blocking, as libmicrohttpd polls it: a connection that is gone by
  // the time of accept() must not stall the server.
  const int fd = socket(found->ai_family,
                        found->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int error = fd < 0 ? errno : 0;
  if (fd >= 0) {
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, found->ai_addr, found->ai_addrlen) != 0 ||
        listen(fd, SOMAXCONN) != 0) {
      error = errno;
    }
  }
  freeaddrinfo(found);
  if (error != 0) {
    if (fd >= 0) close(fd);
    if (error == EADDRINUSE) {
      return absl::UnavailableError(
          absl::StrCat("port ", address.port, " is in use (", where,
                       "): another program listens on it; stop it or "
                       "choose another port"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("cannot listen on ", where, ": ", strerror(error)));
  }
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  uint16_t bound_port = address.port;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bound_len) == 0) {
    bound_port = ntohs(bound.ss_family == AF_INET6
                           ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                           : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  }
  auto server =
      std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(bound_port));
  // poll(), not epoll: libmicrohttpd 0.9.75's epoll loop, once at its
  // connection limit, does not read a connection accepted after its client
  // had already sent part of a request and closed, and holds it for the
  // whole timeout; a burst of such connections kept the port unanswered
  // long after it ended (docs/security.md). poll() reads them at once.
  server->daemon_ = MHD_start_daemon(
      MHD_USE_POLL_INTERNAL_THREAD, 0, /*apc=*/nullptr, nullptr, &Answer,
      const_cast<metrics::Registry*>(registry), MHD_OPTION_LISTEN_SOCKET, fd,
      MHD_OPTION_CONNECTION_LIMIT, kMaxConnections,
      MHD_OPTION_PER_IP_CONNECTION_LIMIT, kMaxConnectionsPerAddress,
      MHD_OPTION_CONNECTION_TIMEOUT, kConnectionTimeoutSeconds,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, kConnectionMemoryBytes,
      MHD_OPTION_END);
  if (server->daemon_ == nullptr) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot serve metrics on ", where, ": libmicrohttpd did not start"));
  }
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  // Closes the listening socket too.
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
}

}  // namespace rbln
