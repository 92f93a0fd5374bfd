#include <filesystem>

#include "slipway/registry.h"

namespace slipway::registry {

ArtifactStore::ArtifactStore(std::string root) : root_(std::move(root)) {}

std::string ArtifactStore::path_for(const std::string& sha256) const {
  return root_ + "/sha256/" + sha256.substr(0, 2) + "/" + sha256.substr(2);
}

bool ArtifactStore::contains(const std::string& sha256) const {
  std::error_code error;
  return sha256.size() == 64 && std::filesystem::is_regular_file(path_for(sha256), error);
}

Result<std::string> ArtifactStore::put(std::span<const std::byte> bytes) {
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

}  // namespace slipway::registry
