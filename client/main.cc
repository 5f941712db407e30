// rbln-artifact: the command-line client of rbln-artifactd, with the flags of
// optimum-rbln-cli (see --help, and client/cli.h).
//
//   rbln-artifact --get-kvcache-num-blocks --model-id ./my_artifact
//   rbln-artifact --set-memory-budget 0.8 --model-id ./my_artifact
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/strip.h"
#include "client/cli.h"
#include "client/run.h"
#include "client/socket_probe.h"
#include "core/defaults.h"
#include "grpcpp/grpcpp.h"

namespace {

// The working directory as getcwd() reports it (a physical path), or "" when
// it is gone; ResolvePaths refuses relative paths then.
std::string WorkingDirectory() {
  std::vector<char> buffer(4096);
  while (getcwd(buffer.data(), buffer.size()) == nullptr) {
    if (errno != ERANGE) return "";
    buffer.resize(buffer.size() * 2);
  }
  return buffer.data();
}

}  // namespace

int main(int argc, char** argv) {
  namespace client = rbln::client;
  std::vector<std::string> args(argv + 1, argv + argc);
  client::ParsedCommandLine parsed = client::ParseCommandLine(
      args, rbln::DefaultClientAddress(), std::cout, std::cerr);
  if (!parsed.options.has_value()) return parsed.exit_code;

  const bool json = parsed.options->json;
  absl::StatusOr<client::CliOptions> options =
      client::ResolvePaths(*parsed.options, WorkingDirectory());
  if (!options.ok()) {
    return client::ReportFailure(
        client::UsageFailure(options.status().message()), json, std::cout,
        std::cerr);
  }

  // A Unix socket is tried first: no daemon is said at once instead of after
  // a wait, and a socket we may not use is told apart from no daemon.
  absl::string_view socket_path = options->server;
  if (absl::ConsumePrefix(&socket_path, "unix:")) {
    const std::string path(socket_path);
    const client::SocketProbe probe = client::ProbeUnixSocket(path);
    if (probe.reach == client::SocketReach::kNotListening) {
      return client::ReportFailure(client::UnreachableFailure(options->server),
                                   json, std::cout, std::cerr);
    }
    if (probe.reach == client::SocketReach::kDenied) {
      return client::ReportFailure(
          client::SocketDeniedFailure(path, geteuid(),
                                      client::ExamineSocketFile(path)),
          json, std::cout, std::cerr);
    }
  }
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(options->server, grpc::InsecureChannelCredentials());
  if (!channel->WaitForConnected(std::chrono::system_clock::now() +
                                 std::chrono::seconds(3))) {
    return client::ReportFailure(client::UnreachableFailure(options->server),
                                 json, std::cout, std::cerr);
  }
  auto stub = rbln::artifact::v1::ArtifactService::NewStub(channel);
  client::RunOptions run{.terminal = isatty(STDERR_FILENO) == 1};
  return client::RunCommand(*options, *stub, run, std::cout, std::cerr);
}
