#include "core/testing/test_util.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace rbln::testing {

namespace {

// Where TempDir makes its directories: $TMPDIR, else /tmp, but /var/tmp where
// /tmp is a tmpfs (Debian 13's default): nothing read from a tmpfs is cached
// (docs/security.md, "Known limits"), and the tests of the read cache expect
// their reads to be kept.
std::string TempBase() {
  const char* base = getenv("TMPDIR");
  if (base != nullptr && *base != '\0') return base;
  struct statfs fs;
  if (statfs("/tmp", &fs) == 0 && fs.f_type == TMPFS_MAGIC &&
      access("/var/tmp", W_OK | X_OK) == 0) {
    return "/var/tmp";
  }
  return "/tmp";
}

}  // namespace

TempDir::TempDir() {
  std::string templ = absl::StrCat(TempBase(), "/rbln-test-XXXXXX");
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp " << templ << ": " << strerror(errno);
    abort();
  }
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string TempDir::Join(absl::string_view name) const {
  return absl::StrCat(path_, "/", name);
}

std::unique_ptr<Env> ConfinedEnvOrDie(const std::string& root) {
  absl::StatusOr<std::unique_ptr<Env>> env = NewConfinedEnv(root);
  if (!env.ok()) {
    ADD_FAILURE() << "cannot confine an Env to " << root << ": "
                  << env.status();
    abort();
  }
  return *std::move(env);
}

std::unique_ptr<Freshness> ConfinedFreshnessOrDie(
    const std::string& root, const FreshnessOptions& options) {
  absl::StatusOr<std::unique_ptr<Freshness>> freshness =
      NewConfinedFreshness(root, {}, options);
  if (!freshness.ok()) {
    ADD_FAILURE() << "cannot confine a Freshness to " << root << ": "
                  << freshness.status();
    abort();
  }
  return *std::move(freshness);
}

std::string ReadFileOrDie(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "cannot read " << path;
    abort();
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFileOrDie(const std::string& path, absl::string_view data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!out) {
    ADD_FAILURE() << "cannot write " << path;
    abort();
  }
}

void ReplaceSymlink(const std::string& target, const std::string& link) {
  const std::string made = link + ".new-link";
  std::error_code ec;
  std::filesystem::create_symlink(target, made, ec);
  if (!ec) std::filesystem::rename(made, link, ec);
  if (ec) {
    ADD_FAILURE() << "ln -sfn " << target << " " << link << ": "
                  << ec.message();
    abort();
  }
}

size_t CachedPages(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    ADD_FAILURE() << "cannot open " << path;
    abort();
  }
  size_t cached = 0;
  if (st.st_size > 0) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t length = static_cast<size_t>(st.st_size);
    void* map = mmap(nullptr, length, PROT_READ, MAP_SHARED, fd, 0);
    std::vector<unsigned char> resident((length + page - 1) / page);
    if (map == MAP_FAILED || mincore(map, length, resident.data()) != 0) {
      ADD_FAILURE() << "cannot tell the cached pages of " << path << ": "
                    << strerror(errno);
      abort();
    }
    for (unsigned char r : resident) cached += r & 1;
    munmap(map, length);
  }
  close(fd);
  return cached;
}

bool PageCacheIsDroppable(const std::string& dir) {
  struct statfs fs;
  return statfs(dir.c_str(), &fs) == 0 &&
         fs.f_type != static_cast<decltype(fs.f_type)>(TMPFS_MAGIC);
}

uint64_t HashFile(const std::string& path) {
  FILE* f = fopen(path.c_str(), "rb");
  if (f == nullptr) {
    ADD_FAILURE() << "cannot open " << path;
    abort();
  }
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), f)) > 0) {
    XXH64_update(state, buf.data(), n);
  }
  fclose(f);
  uint64_t hash = XXH64_digest(state);
  XXH64_freeState(state);
  return hash;
}

std::map<std::string, uint64_t> HashTree(const std::string& dir) {
  namespace fs = std::filesystem;
  std::map<std::string, uint64_t> hashes;
  for (const fs::directory_entry& entry :
       fs::recursive_directory_iterator(dir)) {
    std::string rel = fs::relative(entry.path(), dir).string();
    if (entry.is_symlink()) {
      std::string target = fs::read_symlink(entry.path()).string();
      hashes[rel] = XXH64(target.data(), target.size(), 1);
    } else if (entry.is_directory()) {
      hashes[rel] = 2;
    } else if (entry.is_regular_file()) {
      hashes[rel] = HashFile(entry.path().string());
    } else {
      hashes[rel] = 3;  // a FIFO, socket or device: never opened
    }
  }
  return hashes;
}

std::string SourcePath(absl::string_view relative) {
  const char* source_dir = std::getenv("RBLN_SOURCE_DIR");
  return absl::StrCat(source_dir != nullptr && *source_dir != '\0'
                          ? source_dir
                          : RBLN_SOURCE_DIR,
                      "/", relative);
}

std::string TestdataPath(absl::string_view relative) {
  return SourcePath(absl::StrCat("tests/testdata/", relative));
}

std::string BinaryPath(absl::string_view name) {
  const char* dir = getenv("RBLN_BIN_DIR");
  if (dir != nullptr && *dir != '\0') return absl::StrCat(dir, "/", name);
  // Run by hand: the binaries sit beside the test binary (build/bin).
  std::error_code ec;
  const std::filesystem::path self =
      std::filesystem::read_symlink("/proc/self/exe", ec);
  return (self.parent_path() / std::string(name)).string();
}

namespace {

// Whether every user may search `dir` and each directory above it.
bool OthersCanReach(const std::filesystem::path& dir) {
  for (std::filesystem::path p = dir;; p = p.parent_path()) {
    struct stat st;
    if (stat(p.c_str(), &st) != 0 || (st.st_mode & S_IXOTH) == 0) return false;
    if (p == p.root_path()) return true;
  }
}

// Gives others the read (and, where the owner has it, execute) permission.
void OpenToOthers(const std::filesystem::path& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 || S_ISLNK(st.st_mode)) return;
  mode_t mode = st.st_mode | S_IRGRP | S_IROTH;
  if ((st.st_mode & S_IXUSR) != 0) mode |= S_IXGRP | S_IXOTH;
  chmod(path.c_str(), mode & 07777);
}

// The copies CopyForOtherUsers made in this process, removed at exit.
class CopiesForOtherUsers {
 public:
  ~CopiesForOtherUsers() {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  std::string Copy(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = copies_.find(path);
    if (it != copies_.end()) return it->second;
    if (dir_.empty() && !MakeDir()) return "";
    const std::filesystem::path to = std::filesystem::path(dir_) /
                                     std::to_string(copies_.size()) /
                                     std::filesystem::path(path).filename();
    std::error_code ec;
    std::filesystem::create_directories(to.parent_path(), ec);
    if (!ec) chmod(to.parent_path().c_str(), 0755);
    if (!ec) {
      std::filesystem::copy(path, to, std::filesystem::copy_options::recursive,
                            ec);
    }
    // Readable (and runnable where it was) whatever the umask it was made
    // under.
    if (!ec && std::filesystem::is_directory(to)) {
      for (auto it = std::filesystem::recursive_directory_iterator(to, ec);
           !ec && it != std::filesystem::recursive_directory_iterator();
           it.increment(ec)) {
        OpenToOthers(it->path());
      }
    }
    if (!ec) OpenToOthers(to);
    if (ec) {
      ADD_FAILURE() << "copying " << path << " to " << to << ": "
                    << ec.message();
      return "";
    }
    return copies_[path] = to.string();
  }

 private:
  bool MakeDir() {
    for (const char* base : {"/tmp", "/var/tmp"}) {
      if (!OthersCanReach(base)) continue;
      std::string templ = absl::StrCat(base, "/rbln-shared-XXXXXX");
      if (mkdtemp(templ.data()) == nullptr) continue;
      chmod(templ.c_str(), 0755);
      dir_ = templ;
      return true;
    }
    ADD_FAILURE() << "neither /tmp nor /var/tmp is a directory every user "
                     "can reach and this process can write";
    return false;
  }

  std::mutex mu_;
  std::string dir_;
  std::map<std::string, std::string> copies_;
};

}  // namespace

std::string CopyForOtherUsers(const std::string& path) {
  static CopiesForOtherUsers copies;  // destroyed at exit: the copies go
  return copies.Copy(path);
}

int RunCommand(const std::string& command, std::string* output) {
  std::string full = absl::StrCat(command, " 2>&1");
  FILE* pipe = popen(full.c_str(), "r");
  if (pipe == nullptr) return -1;
  output->clear();
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) output->append(buf, n);
  int status = pclose(pipe);
  if (status == -1 || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

bool EnterPrivateMountNamespace() {
  // Once: a descriptor of the mount table opened before would go on
  // describing the namespace left behind.
  static const bool entered =
      unshare(CLONE_NEWNS) == 0 &&
      mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
  return entered;
}

Container ContainerOf(const ContainerFile& file) {
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> in =
      Env::Default()->NewRandomAccessFile(file.path);
  if (!in.ok()) {
    std::fprintf(stderr, "ContainerOf(%s): %s\n", file.path.c_str(),
                 in.status().ToString().c_str());
    std::abort();
  }
  absl::StatusOr<Container> container = ReadContainer(**in);
  if (!container.ok()) {
    std::fprintf(stderr, "ContainerOf(%s): %s\n", file.path.c_str(),
                 container.status().ToString().c_str());
    std::abort();
  }
  return *std::move(container);
}

}  // namespace rbln::testing
