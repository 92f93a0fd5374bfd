#include "serve/response_cache.h"

namespace slipway::serve {

std::string ResponseCache::make_key(std::string_view model, std::int64_t version, std::string_view body) {
  std::string key;
  key.reserve(model.size() + body.size() + 24);
  key.append(model).push_back('\0');
  key.append(std::to_string(version)).push_back('\0');
  key.append(body);
  return key;
}

bool ResponseCache::lookup(std::string_view model, std::int64_t version, std::string_view body, std::string& response) {
  std::string key = make_key(model, version, body);
  std::lock_guard lock(mutex_);
  auto found = index_.find(key);
  if (found == index_.end()) return false;
  recency_.splice(recency_.begin(), recency_, found->second);
  response = found->second->response;
  return true;
}

void ResponseCache::insert(std::string_view model, std::int64_t version, std::string_view body, std::string response,
                           bool replace) {
  std::string key = make_key(model, version, body);
  std::size_t size = key.size() + response.size();
  if (size > capacity_bytes_) return;
  std::lock_guard lock(mutex_);
  if (auto found = index_.find(key); found != index_.end()) {
    if (!replace) return;  // another thread stored the same answer first
    auto entry = found->second;
    bytes_ -= entry->key.size() + entry->response.size();
    index_.erase(found);
    recency_.erase(entry);
  }
  while (bytes_ + size > capacity_bytes_ && !recency_.empty()) {
    Entry& oldest = recency_.back();
    bytes_ -= oldest.key.size() + oldest.response.size();
    index_.erase(oldest.key);
    recency_.pop_back();
  }
  recency_.push_front(Entry{std::move(key), std::move(response)});
  index_.emplace(recency_.front().key, recency_.begin());
  bytes_ += size;
}

std::size_t ResponseCache::bytes() const {
  std::lock_guard lock(mutex_);
  return bytes_;
}

std::size_t ResponseCache::entries() const {
  std::lock_guard lock(mutex_);
  return recency_.size();
}

}  // namespace slipway::serve
