#include <algorithm>
#include <filesystem>

#include "slipway/registry.h"

namespace slipway::registry {

ArtifactStore::ArtifactStore(std::string root, bool read_only) : root_(std::move(root)), read_only_(read_only) {}

std::string ArtifactStore::path_for(const std::string& sha256) const {
  return root_ + "/sha256/" + sha256.substr(0, 2) + "/" + sha256.substr(2);
}

bool ArtifactStore::contains(const std::string& sha256) const {
  std::error_code error;
  return sha256.size() == 64 && std::filesystem::is_regular_file(path_for(sha256), error);
}

Result<std::string> ArtifactStore::put(std::span<const std::byte> bytes) {
  if (read_only_) return failed_precondition("the workspace was opened read-only, so no artifact can be stored");
  std::string sha256 = sha256_hex(bytes);
  if (contains(sha256)) return sha256;  // content-addressed: the same bytes are already there
  std::string path = path_for(sha256);
  SLIPWAY_RETURN_IF_ERROR(make_directories(std::filesystem::path(path).parent_path().string()));
  SLIPWAY_RETURN_IF_ERROR(write_file_atomic(path, bytes));
  return sha256;
}

std::vector<std::string> ArtifactStore::list() const {
  std::vector<std::string> hashes;
  std::error_code error;
  std::filesystem::path base = root_ + "/sha256";
  if (!std::filesystem::is_directory(base, error)) return hashes;
  for (const auto& prefix : std::filesystem::directory_iterator(base, error)) {
    if (!prefix.is_directory()) continue;
    for (const auto& entry : std::filesystem::directory_iterator(prefix.path(), error)) {
      std::string name = entry.path().filename().string();
      if (entry.is_regular_file() && name.size() == 62 && name.front() != '.') {
        hashes.push_back(prefix.path().filename().string() + name);
      }
    }
  }
  std::sort(hashes.begin(), hashes.end());
  return hashes;
}

Result<std::string> ArtifactStore::quarantine(const std::string& sha256) {
  if (read_only_) return failed_precondition("the workspace was opened read-only, so no artifact can be moved");
  if (!contains(sha256)) return not_found("no artifact " + sha256 + " in the artifact store");
  SLIPWAY_RETURN_IF_ERROR(make_directories(root_ + "/quarantine"));
  std::string target = root_ + "/quarantine/" + sha256 + "." + std::to_string(unix_time_ms());
  std::error_code error;
  std::filesystem::rename(path_for(sha256), target, error);
  if (error) return io_error("cannot move " + path_for(sha256) + " to " + target + ": " + error.message());
  return target;
}

}  // namespace slipway::registry
