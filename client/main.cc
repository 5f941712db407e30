// rbln-artifact: the command-line client of rbln-artifactd, with the flags of
// optimum-rbln-cli (see --help, and client/flags.h).
//
//   rbln-artifact --get-kvcache-num-blocks --model-id ./my_artifact
//   rbln-artifact --set-memory-budget 0.8 --model-id ./my_artifact
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "client/failure.h"
#include "client/flags.h"
#include "client/options.h"
#include "client/paths.h"
#include "client/run.h"
#include "client/socket_probe.h"
#include "common/defaults.h"
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

// The file named by `flag`, whole; a usage error when it cannot be read.
absl::StatusOr<std::string> ReadFlagFile(const std::string& flag,
                                         const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", flag, " ", path, ": ", strerror(errno)));
  }
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

// The channel's credentials: plaintext, or TLS (--tls-ca, --tls-cert,
// --tls-key) with the bearer token of --token-file on every call.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeCredentials(
    const rbln::client::CliOptions& options) {
  if (!options.UsesTls()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  const std::pair<const std::string*, std::string*> files[] = {
      {&options.tls_ca, &ssl.pem_root_certs},
      {&options.tls_cert, &ssl.pem_cert_chain},
      {&options.tls_key, &ssl.pem_private_key}};
  const char* flags[] = {"--tls-ca", "--tls-cert", "--tls-key"};
  for (size_t i = 0; i < 3; ++i) {
    if (files[i].first->empty()) continue;
    absl::StatusOr<std::string> text = ReadFlagFile(flags[i], *files[i].first);
    if (!text.ok()) return text.status();
    *files[i].second = *std::move(text);
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      grpc::SslCredentials(ssl);
  if (options.token_file.empty()) return credentials;
  absl::StatusOr<std::string> text =
      ReadFlagFile("--token-file", options.token_file);
  if (!text.ok()) return text.status();
  const std::string token(absl::StripAsciiWhitespace(
      absl::string_view(*text).substr(0, text->find('\n'))));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--token-file ", options.token_file, ": the first line is empty"));
  }
  return grpc::CompositeChannelCredentials(credentials,
                                           grpc::AccessTokenCredentials(token));
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
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeCredentials(*options);
  if (!credentials.ok()) {
    return client::ReportFailure(
        client::UsageFailure(credentials.status().message()), json, std::cout,
        std::cerr);
  }
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(options->server, *credentials);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() +
                                 std::chrono::seconds(3))) {
    client::Failure failure = client::UnreachableFailure(options->server);
    if (options->UsesTls()) {
      // A refused handshake looks like no daemon to gRPC (UNAVAILABLE).
      failure.text += absl::StrCat(
          "(with TLS, this is also what a refused handshake looks like: the "
          "daemon's certificate not issued by --tls-ca, or a client "
          "certificate it requires missing or not issued by its "
          "--tls-client-ca)\n");
    }
    return client::ReportFailure(failure, json, std::cout, std::cerr);
  }
  auto stub = rbln::artifact::v1::ArtifactService::NewStub(channel);
  client::RunOptions run{.terminal = isatty(STDERR_FILENO) == 1};
  return client::RunCommand(*options, *stub, run, std::cout, std::cerr);
}
