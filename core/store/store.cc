// ArtifactStore (core/store/store.h): opening a store and its read-only
// roots, the names they resolve, and the device figures that apply. The
// reads are in store_read.cc, the commit engine in store_commit.cc.
#include "core/store/store.h"

#include <stdlib.h>

#include <filesystem>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/os/path.h"
#include "core/status_macros.h"
#include "core/store/artifact_link.h"
#include "core/store/artifact_name.h"
#include "core/store/recovery.h"
#include "core/text.h"

namespace rbln {

ArtifactStore::ArtifactStore(Env* env, std::unique_ptr<Freshness> freshness,
                             std::string root, StoreOptions options)
    : env_(env),
      freshness_(std::move(freshness)),
      root_(std::move(root)),
      options_(std::move(options)),
      spec_table_(NewSpecTableProvider()),
      artifact_cache_(ArtifactCache::kDefaultMaxBytes,
                      options_.artifact_cache_racy_window),
      retired_(env, options_.old_version_grace,
               options_.forget_old_version_pages) {
  names_.push_back({"", root_, ""});
}

absl::StatusOr<ReadOnlyRootSpec> ParseReadOnlyRoot(absl::string_view text) {
  ReadOnlyRootSpec spec;
  const size_t equals = text.find('=');
  const size_t slash = text.find('/');
  if (equals != absl::string_view::npos && equals < slash) {
    spec.name = std::string(text.substr(0, equals));
    spec.dir = std::string(text.substr(equals + 1));
  } else {
    spec.dir = std::string(text);
  }
  std::string dir = spec.dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (dir.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", Echo(text), "': give [NAME=]DIR, a directory"));
  }
  if (spec.name.empty()) spec.name = std::string(Basename(dir));
  if (!IsValidRootName(spec.name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", Echo(text), "': the name '", Echo(spec.name),
        "' may hold only letters, digits, '-', '_' and '.' (not first), at "
        "most ",
        kMaxRootNameBytes, " of them; give one with NAME=DIR"));
  }
  return spec;
}

absl::Status ArtifactStore::OpenReadOnlyRoots() {
  for (const ReadOnlyRootSpec& spec : options_.read_only_roots) {
    const std::string what =
        absl::StrCat("read-only root ", spec.name, "=", Echo(spec.dir));
    if (!IsValidRootName(spec.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": not a valid root name"));
    }
    absl::StatusOr<std::unique_ptr<Env>> env = NewConfinedEnv(
        spec.dir, {.read_only = true, .follow_symlinks_beneath = true});
    if (!env.ok()) {
      return absl::Status(env.status().code(),
                          absl::StrCat(what, ": ", env.status().message()));
    }
    const std::string dir = (*env)->ConfinedRoot();
    absl::StatusOr<std::unique_ptr<Freshness>> freshness = NewConfinedFreshness(
        dir, {.read_only = true, .follow_symlinks_beneath = true},
        options_.freshness);
    if (!freshness.ok()) {
      return absl::Status(
          freshness.status().code(),
          absl::StrCat(what, ": ", freshness.status().message()));
    }
    for (const NamedRoot& other : names_) {
      if (other.name == spec.name) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": the name ", spec.name,
                         " is taken; give each root its own with NAME=DIR"));
      }
      if (IsWithin(dir, other.dir) || IsWithin(other.dir, dir)) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, " (", dir, ") overlaps ",
            other.name.empty() ? "the store "
                               : absl::StrCat("the root ", other.name, " "),
            other.dir,
            "; roots must be separate directories (nothing is written in a "
            "read-only root, everything in the store)"));
      }
    }
    std::error_code ec;
    std::string given =
        std::filesystem::absolute(spec.dir, ec).lexically_normal().string();
    while (given.size() > 1 && given.back() == '/') given.pop_back();
    names_.push_back({spec.name, dir, !ec && given != dir ? given : ""});
    read_only_.push_back({*std::move(env), *std::move(freshness)});
  }
  return absl::OkStatus();
}

std::vector<StoreRootInfo> ArtifactStore::roots() const {
  std::vector<StoreRootInfo> roots;
  for (size_t i = 0; i < names_.size(); ++i) {
    roots.push_back({names_[i].name, names_[i].dir, i > 0});
  }
  return roots;
}

ArtifactStore::Located ArtifactStore::LocateRel(size_t root,
                                                std::string rel) const {
  Located at;
  at.root = root;
  at.name = QualifiedArtifactName(names_[root], rel);
  at.path = rel.empty() ? names_[root].dir : JoinPath(names_[root].dir, rel);
  at.rel = std::move(rel);
  at.env = root == 0 ? env_ : read_only_[root - 1].env.get();
  at.freshness =
      root == 0 ? freshness_.get() : read_only_[root - 1].freshness.get();
  at.read_only = root > 0;
  return at;
}

absl::StatusOr<std::optional<ArtifactStore::Located>> ArtifactStore::FollowLink(
    const Located& at) const {
  if (at.read_only) return std::nullopt;
  RBLN_ASSIGN_OR_RETURN(std::optional<std::string> target,
                        FollowArtifactLink(env_, names_[0], at.rel));
  if (!target.has_value()) return std::nullopt;
  Located followed = LocateRel(0, *std::move(target));
  followed.link = at.name;
  return followed;
}

absl::StatusOr<std::shared_ptr<const ArtifactStore::Located>>
ArtifactStore::Locate(absl::string_view name, bool* held) const {
  {
    absl::MutexLock lock(&located_mu_);
    if (const std::shared_ptr<const Located>* kept = located_.Use(name)) {
      if (held != nullptr) *held = true;
      return *kept;
    }
  }
  if (held != nullptr) *held = false;
  RBLN_ASSIGN_OR_RETURN(RootedName rooted, ResolveArtifactName(name, names_));
  return std::make_shared<const Located>(
      LocateRel(rooted.root, std::move(rooted.rel)));
}

void ArtifactStore::KeepLocated(absl::string_view name,
                                std::shared_ptr<const Located> at) const {
  // The name twice (the list's node and the index) and the strings, each
  // with what the heap adds, and what the list, the index and the shared
  // pointer add.
  const uint64_t bytes = sizeof(Located) + 2 * name.size() + at->rel.size() +
                         at->name.size() + at->path.size() + 5 * 32 + 128;
  std::string key(name);
  absl::MutexLock lock(&located_mu_);
  if (!roots_complete_ || located_.Use(name) != nullptr) return;
  located_.Insert(std::move(key), std::move(at), bytes);
}

uint64_t ArtifactStore::located_bytes() const {
  absl::MutexLock lock(&located_mu_);
  return located_.bytes();
}

ArtifactStore::~ArtifactStore() = default;

absl::StatusOr<std::unique_ptr<ArtifactStore>> ArtifactStore::Open(
    const std::string& root, StoreOptions options) {
  absl::StatusOr<std::unique_ptr<Env>> env = NewConfinedEnv(root);
  if (absl::IsNotFound(env.status())) {
    return absl::NotFoundError(
        absl::StrCat("artifact store ", root, " does not exist"));
  }
  RBLN_RETURN_IF_ERROR(env.status());
  RBLN_ASSIGN_OR_RETURN(std::unique_ptr<ArtifactStore> store,
                        Open(env->get(), root, std::move(options)));
  store->owned_env_ = *std::move(env);
  return store;
}

absl::StatusOr<std::unique_ptr<ArtifactStore>> ArtifactStore::Open(
    Env* env, const std::string& root, StoreOptions options) {
  char* resolved = realpath(root.c_str(), nullptr);
  if (resolved == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("artifact store ", root, " does not exist"));
  }
  std::string canonical_root = resolved;
  free(resolved);
  if (env->ConfinedRoot() != canonical_root) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the artifact store ", canonical_root,
        " must be opened with an Env confined to it (NewConfinedEnv); this "
        "one is confined to '",
        env->ConfinedRoot(), "'"));
  }
  RBLN_ASSIGN_OR_RETURN(FileStat st, env->Stat(canonical_root));
  if (st.type != FileType::kDirectory) {
    return absl::FailedPreconditionError(
        absl::StrCat("artifact store ", root, " is not a directory"));
  }
  RBLN_ASSIGN_OR_RETURN(
      std::unique_ptr<Freshness> freshness,
      NewConfinedFreshness(canonical_root, {}, options.freshness));
  auto store = std::unique_ptr<ArtifactStore>(new ArtifactStore(
      env, std::move(freshness), canonical_root, std::move(options)));
  std::error_code ec;
  std::string given =
      std::filesystem::absolute(root, ec).lexically_normal().string();
  while (given.size() > 1 && given.back() == '/') given.pop_back();
  if (!ec && given != canonical_root) store->given_root_ = given;
  store->names_[0].given_dir = store->given_root_;
  RBLN_RETURN_IF_ERROR(store->OpenReadOnlyRoots());
  {
    // The roots are complete from here on: names may be kept.
    absl::MutexLock lock(&store->located_mu_);
    store->roots_complete_ = true;
  }

  RBLN_ASSIGN_OR_RETURN(store->store_lock_, LockStore(env, canonical_root));
  RemoveStaleLockFiles(
      env, JoinPath(JoinPath(canonical_root, kStateDirName), "locks"));
  RBLN_ASSIGN_OR_RETURN(store->recovered_, RemoveDebris(env, store->names_[0]));
  return store;
}

absl::StatusOr<std::string> ArtifactStore::CanonicalName(
    absl::string_view name) const {
  RBLN_ASSIGN_OR_RETURN(std::shared_ptr<const Located> at, Locate(name));
  return at->name;
}

std::string ArtifactStore::PathOf(absl::string_view canonical_name) const {
  return canonical_name.empty() ? root_ : JoinPath(root_, canonical_name);
}

DramProvider* ArtifactStore::device_provider() const {
  return options_.device_provider != nullptr ? options_.device_provider
                                             : spec_table_.get();
}

absl::StatusOr<DramChoice> ArtifactStore::DeviceFor(
    const Artifact& artifact) const {
  RBLN_ASSIGN_OR_RETURN(DramChoice choice,
                        device_provider()->ForNpu(artifact.npu()));
  if (!artifact.npu().empty()) {
    absl::StrAppend(&choice.source, "; NPU ", artifact.npu(), " from ",
                    artifact.npu_source());
  }
  return choice;
}

uint64_t ArtifactStore::DeviceGeneration() const {
  return device_provider()->AnswersGeneration();
}

absl::StatusOr<std::vector<FileStat>> ArtifactStore::StatArtifactPath(
    absl::string_view name) const {
  RBLN_ASSIGN_OR_RETURN(std::shared_ptr<const Located> at, Locate(name));
  std::vector<FileStat> chain;
  std::string path = names_[at->root].dir;
  RBLN_ASSIGN_OR_RETURN(FileStat top, at->env->Stat(path));
  chain.push_back(top);
  for (absl::string_view part :
       absl::StrSplit(at->rel, '/', absl::SkipEmpty())) {
    absl::StrAppend(&path, "/", part);
    RBLN_ASSIGN_OR_RETURN(FileStat dir, at->env->Stat(path));
    chain.push_back(dir);
  }
  if (chain.back().type == FileType::kSymlink) {
    // A link the store follows: its target (beside it) is what is read.
    RBLN_ASSIGN_OR_RETURN(std::optional<Located> target, FollowLink(*at));
    // No longer a link (replaced meanwhile): what is there now is read.
    RBLN_ASSIGN_OR_RETURN(
        chain.back(), at->env->Stat(target.has_value() ? target->path : path));
    if (chain.back().type == FileType::kSymlink) {
      return absl::AbortedError(absl::StrCat(
          Echo(name), " changed while it was being looked at; retry"));
    }
  }
  return chain;
}

}  // namespace rbln
