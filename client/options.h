// The validated command line of `rbln-artifact` (client/flags.h makes it):
// which operation to call and the flags that go with it. Plain data.
#ifndef RBLN_CLIENT_OPTIONS_H_
#define RBLN_CLIENT_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rbln::client {

// The name the client prints its messages under.
inline constexpr char kProgramName[] = "rbln-artifact";

enum class Operation {
  kGet,         // --get-kvcache-num-blocks
  kSet,         // --set-kvcache-num-blocks N
  kFitBudget,   // --set-memory-budget BUDGET
  kDescribe,    // --describe
  kList,        // --list
  kDeviceInfo,  // --device-info
  kServerInfo,  // --server-info
};

// True for the two operations that change artifacts.
inline bool IsWriter(Operation operation) {
  return operation == Operation::kSet || operation == Operation::kFitBudget;
}

// A validated command line.
struct CliOptions {
  Operation operation = Operation::kGet;
  std::string server;       // unix:PATH or HOST:PORT
  std::string model_id;     // kGet, kSet, kFitBudget, kDescribe
  uint64_t num_blocks = 0;  // kSet
  std::string budget;       // kFitBudget
  // Writers only.
  std::string output_dir;  // empty: in place
  bool replace = false;
  bool dry_run = false;
  bool force = false;  // kSet only
  std::optional<uint64_t> expected_current;
  // The directory a write changes, as optimum-rbln-cli prints it
  // (PythonAbsolutePath of --output-dir, else of --model-id), for a local
  // server; "" for a remote one (the reply's store and name say it). Set by
  // ResolvePaths.
  std::string written_dir;
  bool verify = false;  // kDescribe and writers
  std::string prefix;   // kList: only names starting with it
  // --colocate: the artifacts of a group (kFitBudget: sized together with
  // FitTogether; kDescribe: its plan at the current counts), their weights
  // (one each, or empty for 1).
  std::vector<std::string> colocate;
  std::vector<uint32_t> weights;
  // --beside: artifacts on the same devices, reserved first (writers).
  std::vector<std::string> beside;
  // --devices: which probed devices the nodes sit on, for a free budget.
  std::vector<int> devices;
  bool json = false;
  // A TCP --server only (a Unix socket's peer is known by its uid). TLS is
  // on when any of the first three is given; a token needs TLS.
  std::string tls_ca;      // PEM: the CA that issued the daemon's cert
  std::string tls_cert;    // PEM: this client's certificate (with tls_key)
  std::string tls_key;     // PEM: its private key
  std::string token_file;  // the bearer token, on its first line

  bool UsesTls() const {
    return !tls_ca.empty() || !tls_cert.empty() || !tls_key.empty();
  }
};

}  // namespace rbln::client

#endif  // RBLN_CLIENT_OPTIONS_H_
