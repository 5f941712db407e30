// Remote callers (docs/security.md, "Callers and roles"), end to end: the real
// rbln-artifactd and rbln-artifact over real TLS, with certificates made by
// the openssl command at test time (a CA; the daemon's, with SAN 127.0.0.1
// and localhost; an operator client; a reader client; and a client of a
// foreign CA), bearer tokens, the non-loopback listen check, and Unix-socket
// peers known by their uid (root only: it creates a user).
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rbln/artifact/v1/artifact_service.grpc.pb.h"
#include "tests/daemon_testing.h"
#include "tests/test_certificates.h"

namespace rbln::e2e {
namespace {

using ::rbln::testing::BinaryPath;
using ::rbln::testing::CopyForOtherUsers;
using ::rbln::testing::HashTree;
using ::rbln::testing::WriteFileOrDie;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kClientDenied = 4;
constexpr int kClientUnreachable = 3;
constexpr int kClientUsage = 2;
constexpr int kExUsage = 64;

class AuthTest : public TlsDaemonTest {
 protected:
  void SetUp() override {
    TlsDaemonTest::SetUp();
    ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", Artifact()));
  }

  std::string Artifact() const { return absl::StrCat(store_, "/tiny"); }

  // rbln-artifactd on `listen` with `flags`, logging at info level (the
  // request lines).
  void Start(const std::string& listen, const std::vector<std::string>& flags) {
    std::vector<std::string> all = {
        "--store", store_,        "--listen", listen,          "--rbln-smi",
        "none",    "--log-level", "info",     "--device-dram", "16GiB"};
    all.insert(all.end(), flags.begin(), flags.end());
    StartWithFlags(listen, all);
  }

  bool AwaitLog(const std::string& text) {
    return e2e::AwaitLog(daemon_, text);
  }

  std::vector<std::string> TlsFlags() const {
    return {"--tls-cert", certs_->Pem("server"), "--tls-key",
            certs_->Key("server")};
  }

  // rbln-artifact --server `server` `credentials` ARGS.
  Outcome Client(const std::string& server, const std::string& credentials,
                 const std::string& args) {
    return CliAt(server, absl::StrCat(credentials, " ", args), store_);
  }

  // --tls-ca, and --tls-cert/--tls-key of `name` unless empty.
  static std::string TlsArgs(const std::string& name) {
    std::string args = absl::StrCat("--tls-ca ", ShellQuote(certs_->Pem("ca")));
    if (!name.empty()) {
      absl::StrAppend(&args, " --tls-cert ", ShellQuote(certs_->Pem(name)),
                      " --tls-key ", ShellQuote(certs_->Key(name)));
    }
    return args;
  }

  // Run from the store, "tiny" names the artifact over either transport
  // (resolved against the working directory over the Unix socket,
  // store-relative over TCP, where absolute paths are refused).
  static std::string Get() {
    return "--get-kvcache-num-blocks --model-id tiny";
  }
  static std::string Set(int count, const std::string& extra = "") {
    return absl::StrCat("--set-kvcache-num-blocks ", count, " --model-id tiny ",
                        extra);
  }
  static std::string Fit() { return "--set-memory-budget 0.5 --model-id tiny"; }

  // A reader's writes are refused naming `identity`, and change nothing.
  void ExpectReadOnly(const std::string& server, const std::string& creds,
                      const std::string& identity) {
    const std::map<std::string, uint64_t> before = HashTree(store_);
    for (const std::string& write : {Set(12), Fit()}) {
      Outcome o = Client(server, creds, write);
      EXPECT_EQ(o.code, 1) << write << "\n" << o;
      EXPECT_THAT(o.err, HasSubstr("PERMISSION_DENIED")) << o;
      EXPECT_THAT(o.err, HasSubstr(identity + " may only read")) << o;
      EXPECT_THAT(o.err, HasSubstr("--operators")) << o;
    }
    EXPECT_EQ(HashTree(store_), before) << "a refused write changed the store";
    // Reads and dry runs are a reader's.
    Outcome get = Client(server, creds, Get());
    EXPECT_EQ(get.code, 0) << get;
    Outcome dry = Client(server, creds, Set(12, "--dry-run"));
    EXPECT_EQ(dry.code, 0) << dry;
    EXPECT_EQ(HashTree(store_), before) << "a dry run changed the store";
  }
};

TEST_F(AuthTest, ClientCertificatesNameCallersAndOnlyOperatorsWrite) {
  const std::string address = absl::StrCat("127.0.0.1:", PickFreePort());
  std::vector<std::string> flags = TlsFlags();
  flags.insert(flags.end(), {"--tls-client-ca", certs_->Pem("ca"),
                             "--operators", "cn:operator"});
  ASSERT_NO_FATAL_FAILURE(Start(address, flags));
  const uint64_t before = CountOnDisk(Artifact());

  // No certificate, or one of another CA: the handshake fails.
  for (const std::string& creds :
       {TlsArgs(""),
        absl::StrCat("--tls-ca ", ShellQuote(certs_->Pem("ca")), " --tls-cert ",
                     ShellQuote(certs_->Pem("stranger")), " --tls-key ",
                     ShellQuote(certs_->Key("stranger")))}) {
    Outcome o = Client(address, creds, Get());
    EXPECT_EQ(o.code, kClientUnreachable) << o;
    EXPECT_THAT(o.err, HasSubstr("refused handshake")) << o;
  }
  // Plaintext to a TLS listener gets nowhere either.
  Outcome plain = Client(address, "", Get());
  EXPECT_NE(plain.code, 0) << plain;

  ASSERT_NO_FATAL_FAILURE(
      ExpectReadOnly(address, TlsArgs("reader"), "cn:reader"));
  EXPECT_EQ(CountOnDisk(Artifact()), before);

  Outcome set = Client(address, TlsArgs("operator"), Set(10));
  EXPECT_EQ(set.code, 0) << set;
  EXPECT_EQ(CountOnDisk(Artifact()), 10u);

  const std::string log = ReadIfExists(daemon_.stderr_path);
  EXPECT_THAT(log, HasSubstr("caller=\"cn:operator\" role=operator"));
  EXPECT_THAT(log, HasSubstr("caller=\"cn:reader\" role=reader"));
}

TEST_F(AuthTest, CertificateFilesAreReloadedWithoutARestart) {
  // The client CA file starts with our CA only; the foreign CA's client is
  // refused until the file also holds the foreign CA.
  const std::string client_ca = root_.Join("client-ca.pem");
  WriteFileOrDie(client_ca, ReadIfExists(certs_->Pem("ca")));
  const std::string address = absl::StrCat("127.0.0.1:", PickFreePort());
  std::vector<std::string> flags = TlsFlags();
  flags.insert(flags.end(),
               {"--tls-client-ca", client_ca, "--tls-reload-seconds", "1",
                "--operators", "cn:operator"});
  ASSERT_NO_FATAL_FAILURE(Start(address, flags));
  const std::string stranger =
      absl::StrCat("--tls-ca ", ShellQuote(certs_->Pem("ca")), " --tls-cert ",
                   ShellQuote(certs_->Pem("stranger")), " --tls-key ",
                   ShellQuote(certs_->Key("stranger")));
  Outcome refused = Client(address, stranger, Get());
  EXPECT_EQ(refused.code, kClientUnreachable) << refused;

  WriteFileOrDie(client_ca, ReadIfExists(certs_->Pem("ca")) +
                                ReadIfExists(certs_->Pem("foreign-ca")));
  Outcome taken;
  for (int i = 0; i < 30; ++i) {  // bounded: until the watcher reads it
    taken = Client(address, stranger, Get());
    if (taken.code == 0) break;
  }
  EXPECT_EQ(taken.code, 0) << taken << daemon_.Logs();
  // The daemon still serves the clients of the first CA.
  Outcome reader = Client(address, TlsArgs("reader"), Get());
  EXPECT_EQ(reader.code, 0) << reader;
}

// SIGHUP switches the server to a rotated certificate for new connections,
// while a write held on a connection made before keeps going and commits; a
// rotation whose key does not match is refused and the old pair serves on.
TEST_F(AuthTest, SighupRotatesTheCertificateAndCancelsNoWrite) {
  const std::string cert = root_.Join("server.pem");
  const std::string key = root_.Join("server.key");
  WriteFileOrDie(cert, ReadIfExists(certs_->Pem("server")));
  WriteFileOrDie(key, ReadIfExists(certs_->Key("server")));
  const std::string address = absl::StrCat("127.0.0.1:", PickFreePort());
  ASSERT_NO_FATAL_FAILURE(
      Start(address, {"--tls-cert", cert, "--tls-key", key, "--tls-client-ca",
                      certs_->Pem("ca"), "--tls-reload-seconds", "0",
                      "--operators", "cn:operator"}));
  // The operator's client, trusting the server's CA `ca`.
  const auto trusting = [&](const char* ca) {
    return absl::StrCat("--tls-ca ", ShellQuote(certs_->Pem(ca)),
                        " --tls-cert ", ShellQuote(certs_->Pem("operator")),
                        " --tls-key ", ShellQuote(certs_->Key("operator")));
  };
  EXPECT_EQ(Client(address, trusting("ca"), Get()).code, 0);
  EXPECT_EQ(Client(address, trusting("foreign-ca"), Get()).code,
            kClientUnreachable);

  // A write that waits for the artifact's lock, on a connection made now.
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadIfExists(certs_->Pem("ca"));
  ssl.pem_private_key = ReadIfExists(certs_->Key("operator"));
  ssl.pem_cert_chain = ReadIfExists(certs_->Pem("operator"));
  auto stub = v1::ArtifactService::NewStub(
      grpc::CreateChannel(address, grpc::SslCredentials(ssl)));
  HeldArtifactLock lock(store_, "tiny");
  ASSERT_TRUE(lock.held());
  v1::SetKvcacheNumBlocksRequest request;
  request.set_artifact("tiny");
  request.set_num_blocks(12);
  request.mutable_options()->set_operation_id("auth-test-rotation");
  grpc::Status write_status;
  v1::ResizeResponse write_reply;
  grpc::ClientContext write_context;
  write_context.set_deadline(std::chrono::system_clock::now() +
                             std::chrono::seconds(60));
  std::thread writer([&] {
    write_status =
        stub->SetKvcacheNumBlocks(&write_context, request, &write_reply);
  });
  v1::GetWriteProgressRequest poll;
  poll.set_operation_id("auth-test-rotation");
  v1::GetWriteProgressResponse progress;
  for (int i = 0; i < 500 && progress.state() != v1::WRITE_STATE_WAITING;
       ++i) {  // bounded: until the write waits for the lock
    grpc::ClientContext context;
    EXPECT_TRUE(stub->GetWriteProgress(&context, poll, &progress).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(progress.state(), v1::WRITE_STATE_WAITING);

  // A key that does not belong to the certificate: refused, the old pair
  // serves on.
  WriteFileOrDie(cert, ReadIfExists(certs_->Pem("rotated")));
  ASSERT_EQ(kill(daemon_.pid, SIGHUP), 0);
  ASSERT_TRUE(AwaitLog("kept the old TLS files"));
  EXPECT_THAT(ReadIfExists(daemon_.stderr_path),
              HasSubstr("does not belong to the certificate"));
  EXPECT_EQ(Client(address, trusting("ca"), Get()).code, 0);

  // The whole pair: new connections meet the rotated certificate.
  WriteFileOrDie(key, ReadIfExists(certs_->Key("rotated")));
  ASSERT_EQ(kill(daemon_.pid, SIGHUP), 0);
  ASSERT_TRUE(AwaitLog("SIGHUP: reloaded the TLS files"));
  Outcome rotated;
  for (int i = 0; i < 30; ++i) {  // bounded: until gRPC's watcher reads it
    rotated = Client(address, trusting("foreign-ca"), Get());
    if (rotated.code == 0) break;
  }
  EXPECT_EQ(rotated.code, 0) << rotated << daemon_.Logs();
  EXPECT_EQ(Client(address, trusting("ca"), Get()).code, kClientUnreachable);

  // The held connection is still up and its write was not cancelled.
  grpc::ClientContext context;
  EXPECT_TRUE(stub->GetWriteProgress(&context, poll, &progress).ok());
  EXPECT_TRUE(progress.running());
  lock.Release();
  writer.join();
  ASSERT_TRUE(write_status.ok()) << write_status.error_message();
  EXPECT_EQ(write_reply.new_num_blocks(), 12u);
  EXPECT_EQ(CountOnDisk(Artifact()), 12u);
}

TEST_F(AuthTest, TokensGoodWrongAndMissing) {
  const std::string tokens = root_.Join("tokens");
  // sha256sum of the token text, as docs/security.md tells operators to
  // make the file.
  RunOrFail(
      absl::StrCat("{ echo '# who  sha256'; printf 'ci %s\\n' $(printf "
                   "ci-secret | sha256sum | cut -d' ' -f1); printf 'viewer "
                   "%s\\n' $(printf viewer-secret | sha256sum | cut -d' ' "
                   "-f1); } > ",
                   ShellQuote(tokens)));
  for (const char* name : {"ci", "viewer", "wrong", "rotated"}) {
    WriteFileOrDie(root_.Join(absl::StrCat(name, ".token")),
                   absl::StrCat(name, "-secret\n"));
  }
  const auto token = [&](const char* name) {
    return absl::StrCat(TlsArgs(""), " --token-file ",
                        ShellQuote(root_.Join(absl::StrCat(name, ".token"))));
  };
  const std::string address = absl::StrCat("127.0.0.1:", PickFreePort());
  std::vector<std::string> flags = TlsFlags();
  flags.insert(flags.end(), {"--tokens", tokens, "--operators", "token:ci"});
  ASSERT_NO_FATAL_FAILURE(Start(address, flags));

  ASSERT_NO_FATAL_FAILURE(
      ExpectReadOnly(address, token("viewer"), "token:viewer"));

  Outcome wrong = Client(address, token("wrong"), Get());
  EXPECT_EQ(wrong.code, kClientDenied) << wrong;
  EXPECT_THAT(wrong.err, HasSubstr("UNAUTHENTICATED")) << wrong;
  EXPECT_THAT(wrong.err, HasSubstr("not one of rbln-artifactd --tokens"));

  Outcome missing = Client(address, TlsArgs(""), Get());
  EXPECT_EQ(missing.code, kClientDenied) << missing;
  EXPECT_THAT(missing.err, HasSubstr("bearer token is required")) << missing;

  Outcome set = Client(address, token("ci"), Set(11));
  EXPECT_EQ(set.code, 0) << set;
  EXPECT_EQ(CountOnDisk(Artifact()), 11u);

  // SIGHUP reloads the file: a token added since is taken, a broken file
  // keeps the old table.
  RunOrFail(
      absl::StrCat("printf 'rotated %s\\n' $(printf rotated-secret | "
                   "sha256sum | cut -d' ' -f1) >> ",
                   ShellQuote(tokens)));
  EXPECT_EQ(Client(address, token("rotated"), Get()).code, kClientDenied);
  ASSERT_EQ(kill(daemon_.pid, SIGHUP), 0);
  ASSERT_TRUE(AwaitLog("SIGHUP: reloaded"));
  Outcome rotated = Client(address, token("rotated"), Get());
  EXPECT_EQ(rotated.code, 0) << rotated << daemon_.Logs();
  WriteFileOrDie(tokens, "not a tokens file\n");
  ASSERT_EQ(kill(daemon_.pid, SIGHUP), 0);
  ASSERT_TRUE(AwaitLog("kept the old tokens"));
  Outcome kept = Client(address, token("ci"), Get());
  EXPECT_EQ(kept.code, 0) << kept;
}

TEST_F(AuthTest, NonLoopbackPlaintextNeedsAllowInsecureTcp) {
  const int port = PickFreePort();
  const std::string any = absl::StrCat("0.0.0.0:", port);
  Outcome refused =
      Run("rbln-artifactd",
          absl::StrCat("--store ", ShellQuote(store_), " --listen ", any));
  EXPECT_EQ(refused.code, kExUsage) << refused;
  EXPECT_THAT(refused.err, HasSubstr("--allow-insecure-tcp")) << refused;

  ASSERT_NO_FATAL_FAILURE(Start(any, {"--allow-insecure-tcp"}));
  EXPECT_THAT(ReadIfExists(daemon_.stderr_path),
              HasSubstr("--allow-insecure-tcp: " + any + " is plaintext"));
  // Anonymous callers read; they never write.
  const std::string local = absl::StrCat("127.0.0.1:", port);
  Outcome get = Client(local, "", Get());
  EXPECT_EQ(get.code, 0) << get;
  const std::map<std::string, uint64_t> before = HashTree(store_);
  Outcome set = Client(local, "", Set(12));
  EXPECT_EQ(set.code, 1) << set;
  EXPECT_THAT(set.err, HasSubstr("anonymous caller")) << set;
  EXPECT_EQ(HashTree(store_), before);
}

TEST_F(AuthTest, ClientRefusesTlsFlagsWithAUnixSocket) {
  Outcome o = Client(absl::StrCat("unix:", root_.Join("none.sock")),
                     TlsArgs("reader"), Get());
  EXPECT_EQ(o.code, kClientUsage) << o;
  EXPECT_THAT(o.err, HasSubstr("go only with a TCP --server")) << o;
  Outcome token = Client("127.0.0.1:1", "--token-file /dev/null", Get());
  EXPECT_EQ(token.code, kClientUsage) << token;
  EXPECT_THAT(token.err, HasSubstr("--token-file needs --tls-ca")) << token;
}

// A user made for the test and removed after it.
class TestUser {
 public:
  explicit TestUser(const std::string& name) : name_(name) {
    std::string output;
    rbln::testing::RunCommand("userdel " + name_ + " 2>/dev/null", &output);
    created_ = rbln::testing::RunCommand(
                   "useradd --user-group --no-create-home --shell /bin/false " +
                       name_ + " 2>&1",
                   &output) == 0;
    EXPECT_TRUE(created_) << output;
  }
  ~TestUser() {
    std::string output;
    if (created_) rbln::testing::RunCommand("userdel " + name_, &output);
  }
  bool created() const { return created_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  bool created_ = false;
};

TEST_F(AuthTest, UnixPeersAreKnownByUidAndListedOnesWrite) {
  if (geteuid() != 0) {
    GTEST_SKIP() << "needs root: creates a user and runs the client as it";
  }
  TestUser user(absl::StrCat("rbln-auth-", getpid() % 100000));
  ASSERT_TRUE(user.created());
  // The user must reach the socket: its directory, and the socket itself
  // (the daemon makes it 0660; --socket-group is not this test's subject).
  chmod(root_.path().c_str(), 0755);
  const std::string socket = root_.Join("d.sock");
  const std::string address = absl::StrCat("unix:", socket);
  // The build tree may be closed to the user (a clone in /root).
  const std::string client = CopyForOtherUsers(BinaryPath("rbln-artifact"));
  ASSERT_FALSE(client.empty());
  const auto as_user = [&](const std::string& args) {
    return RunShell(absl::StrCat("cd ", ShellQuote(store_),
                                 " && setpriv --reuid=", user.name(),
                                 " --regid=", user.name(), " --clear-groups ",
                                 kCommandTimeout, " ", ShellQuote(client),
                                 " --server ", ShellQuote(address), " ", args),
                    root_.Join("user.err"));
  };
  const std::string identity = "user:" + user.name();

  // Not listed: a reader. Root (uid 0) is an operator by default.
  // A reader's token, for the check that a token on the socket does not
  // let a reader past what its uid may read.
  const std::string tokens = root_.Join("tokens");
  RunOrFail(
      absl::StrCat("printf 'viewer %s\\n' $(printf viewer-secret | sha256sum | "
                   "cut -d' ' -f1) > ",
                   ShellQuote(tokens)));
  ASSERT_NO_FATAL_FAILURE(Start(address, {"--tokens", tokens}));
  ASSERT_EQ(chmod(socket.c_str(), 0666), 0);
  const std::map<std::string, uint64_t> before = HashTree(store_);
  Outcome get = as_user(Get());
  EXPECT_EQ(get.code, 0) << get;
  Outcome dry = as_user(Set(12, "--dry-run"));
  EXPECT_EQ(dry.code, 0) << dry;
  // No confused deputy: an artifact the user could not read itself is not
  // read for it (get, describe, dry run); root still reads it.
  ASSERT_EQ(chmod(Artifact().c_str(), 0700), 0);
  for (const std::string& read :
       {Get(), std::string("--describe --model-id tiny"),
        Set(12, "--dry-run")}) {
    Outcome o = as_user(read);
    EXPECT_EQ(o.code, 1) << o;
    EXPECT_THAT(o.err, HasSubstr(identity + " cannot read")) << o;
    EXPECT_THAT(o.err, HasSubstr("mode 0700")) << o;
  }
  Outcome root_get = Client(address, "", Get());
  EXPECT_EQ(root_get.code, 0) << root_get;
  // --list leaves it out for the user, and says so; root lists it.
  Outcome user_list = as_user("--list");
  EXPECT_EQ(user_list.code, 0) << user_list;
  EXPECT_THAT(user_list.out, Not(HasSubstr("tiny"))) << user_list;
  EXPECT_THAT(user_list.out,
              HasSubstr("left out 1 artifact(s) you cannot read yourself"));
  Outcome user_json = as_user("--list --json");
  EXPECT_THAT(user_json.out, HasSubstr("\"not_readable\":1")) << user_json;
  Outcome root_list = Client(address, "", "--list");
  EXPECT_THAT(root_list.out, HasSubstr("tiny")) << root_list;
  EXPECT_THAT(root_list.out, Not(HasSubstr("left out"))) << root_list;
  ASSERT_EQ(chmod(Artifact().c_str(), 0755), 0);
  Outcome readable = as_user("--list");
  EXPECT_THAT(readable.out, HasSubstr("tiny")) << readable;
  // A readable artifact under a directory the user cannot pass: the same.
  const std::string hidden = absl::StrCat(store_, "/private");
  ASSERT_EQ(mkdir(hidden.c_str(), 0700), 0);
  ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", hidden + "/m"));
  ASSERT_EQ(chmod((hidden + "/m").c_str(), 0755), 0);
  Outcome below =
      as_user("--get-kvcache-num-blocks --model-id private/m --json");
  EXPECT_EQ(below.code, 1) << below;
  EXPECT_THAT(below.out, HasSubstr("\"reason\":\"NOT_READABLE_BY_CALLER\""))
      << below;
  EXPECT_THAT(below.err, HasSubstr("a directory above it")) << below;
  Outcome listed = as_user("--list");
  EXPECT_THAT(listed.out, Not(HasSubstr("private/m"))) << listed;
  EXPECT_THAT(listed.out, HasSubstr("left out 1 artifact(s)")) << listed;
  EXPECT_EQ(
      Client(address, "", "--get-kvcache-num-blocks --model-id private/m").code,
      0);
  // The same user with a reader's token, through the generated Python
  // stubs (the CLI sends tokens only over TLS): still refused.
  const std::string python = absl::StrCat(
      "import sys, grpc; sys.path.insert(0, sys.argv[1]); "
      "from rbln.artifact.v1 import artifact_service_pb2 as pb, "
      "artifact_service_pb2_grpc as rpc\n"
      "stub = rpc.ArtifactServiceStub(grpc.insecure_channel(sys.argv[2]))\n"
      "try:\n"
      "  stub.GetKvcacheNumBlocks(pb.GetKvcacheNumBlocksRequest("
      "artifact='private/m'), metadata=[('authorization', 'bearer "
      "viewer-secret')])\n"
      "  print('OK')\n"
      "except grpc.RpcError as e:\n"
      "  print(e.code().name, e.details())\n");
  Outcome with_token = RunShell(
      absl::StrCat("setpriv --reuid=", user.name(), " --regid=", user.name(),
                   " --clear-groups ", kCommandTimeout, " /usr/bin/python3 -c ",
                   ShellQuote(python), " ",
                   ShellQuote(CopyForOtherUsers(BinaryPath("../python"))), " ",
                   ShellQuote(address)),
      root_.Join("python.err"));
  EXPECT_THAT(with_token.out, HasSubstr("PERMISSION_DENIED token:viewer "
                                        "cannot read private/m"))
      << with_token;
  std::filesystem::remove_all(hidden);
  for (const std::string& write : {Set(12), Fit()}) {
    Outcome o = as_user(write);
    EXPECT_EQ(o.code, 1) << o;
    EXPECT_THAT(o.err, HasSubstr(identity + " may only read")) << o;
  }
  Outcome refused = as_user(Set(12, "--json"));
  EXPECT_THAT(refused.out, HasSubstr("\"reason\":\"NOT_AN_OPERATOR\""))
      << refused;
  EXPECT_THAT(refused.out, HasSubstr("/tiny\"")) << refused;
  EXPECT_EQ(HashTree(store_), before);
  Outcome root_set = Client(address, "", Set(13));
  EXPECT_EQ(root_set.code, 0) << root_set;
  EXPECT_EQ(CountOnDisk(Artifact()), 13u);
  EXPECT_THAT(ReadIfExists(daemon_.stderr_path),
              HasSubstr(absl::StrCat("caller=\"", identity,
                                     "\" role=reader outcome=PERMISSION")));
  Stop();

  // Listed by user name, then by group: an operator. Root without the
  // defaults: a reader.
  uint64_t count = 14;
  for (const std::string& listed :
       {identity, absl::StrCat("group:", user.name())}) {
    ASSERT_NO_FATAL_FAILURE(
        Start(address, {"--operators", listed, "--no-default-operators"}));
    ASSERT_EQ(chmod(socket.c_str(), 0666), 0);
    Outcome set = as_user(Set(count));
    EXPECT_EQ(set.code, 0) << listed << "\n" << set;
    EXPECT_EQ(CountOnDisk(Artifact()), count);
    Outcome root_denied = Client(address, "", Set(count - 4));
    EXPECT_EQ(root_denied.code, 1) << root_denied;
    EXPECT_THAT(root_denied.err, HasSubstr("user:root may only read"));
    Stop();
    EXPECT_EQ(CountOnDisk(Artifact()), count);
    ++count;
  }
}

}  // namespace
}  // namespace rbln::e2e
