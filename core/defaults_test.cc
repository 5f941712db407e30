#include "core/defaults.h"

#include <stdlib.h>

#include <optional>
#include <string>

#include "gtest/gtest.h"

namespace rbln {
namespace {

// Sets (or, with nullopt, unsets) an environment variable for one test and
// restores it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    if (value.has_value()) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_.has_value()) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(DefaultClientAddressTest, AddressVariableWinsOverTheSocketAlias) {
  ScopedEnv socket(kSocketEnv, "/run/alias.sock");
  ScopedEnv address(kAddressEnv, "npu-host:50051");
  EXPECT_EQ(DefaultClientAddress(), "npu-host:50051");
  // The daemon's default does not read the client's variable.
  EXPECT_EQ(DefaultServerAddress(), "unix:/run/alias.sock");
}

TEST(DefaultClientAddressTest, SocketAliasStillWorks) {
  ScopedEnv socket(kSocketEnv, "/run/alias.sock");
  ScopedEnv address(kAddressEnv, std::nullopt);
  EXPECT_EQ(DefaultClientAddress(), "unix:/run/alias.sock");
}

TEST(DefaultClientAddressTest, EmptyVariablesAreUnset) {
  ScopedEnv socket(kSocketEnv, "");
  ScopedEnv address(kAddressEnv, "");
  EXPECT_EQ(DefaultClientAddress(), DefaultServerAddress());
  EXPECT_EQ(DefaultClientAddress().rfind("unix:/", 0), 0u);
}

}  // namespace
}  // namespace rbln
