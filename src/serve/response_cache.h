// An LRU cache of infer responses, bounded in bytes. Private to serve.
//
// The key is the model, the version and the request body's exact bytes, so a hit is the response
// the same request got before (its "id" included, since the id is part of the body).
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace slipway::serve {

class ResponseCache {
 public:
  explicit ResponseCache(std::size_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}

  // The cached response body for this request, if any (and marks it most recently used).
  bool lookup(std::string_view model, std::int64_t version, std::string_view body, std::string& response);
  // Stores a response; evicts the least recently used entries to stay within the capacity. An
  // entry larger than the whole capacity is not stored. An entry already there stays, unless
  // `replace` (the latest answer wins).
  void insert(std::string_view model, std::int64_t version, std::string_view body, std::string response,
              bool replace = false);

  std::size_t bytes() const;
  std::size_t entries() const;

 private:
  struct Entry {
    std::string key;
    std::string response;
  };
  static std::string make_key(std::string_view model, std::int64_t version, std::string_view body);

  std::size_t capacity_bytes_;
  mutable std::mutex mutex_;
  std::list<Entry> recency_;                                                // front: most recently used
  std::unordered_map<std::string_view, std::list<Entry>::iterator> index_;  // views into the entries' keys
  std::size_t bytes_ = 0;
};

}  // namespace slipway::serve
