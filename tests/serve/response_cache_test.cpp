// The response cache: exact-key hits, least-recently-used eviction within the byte budget.
#include "serve/response_cache.h"

#include <gtest/gtest.h>

namespace slipway::serve {
namespace {

TEST(ResponseCache, HitsOnlyTheSameModelVersionAndBytes) {
  ResponseCache cache(1 << 10);
  cache.insert("m", 1, "{\"a\":1}", "answer");
  std::string response;
  EXPECT_TRUE(cache.lookup("m", 1, "{\"a\":1}", response));
  EXPECT_EQ(response, "answer");
  EXPECT_FALSE(cache.lookup("m", 2, "{\"a\":1}", response));
  EXPECT_FALSE(cache.lookup("n", 1, "{\"a\":1}", response));
  EXPECT_FALSE(cache.lookup("m", 1, "{\"a\": 1}", response));  // any byte differs: a miss
}

TEST(ResponseCache, EvictsTheLeastRecentlyUsedWithinItsBytes) {
  // Each entry: key "m\01\0" + 1-byte body (5 bytes) + a 45-byte response = 50 bytes.
  ResponseCache cache(120);
  std::string payload(45, 'x');
  cache.insert("m", 1, "a", payload);
  cache.insert("m", 1, "b", payload);
  std::string response;
  EXPECT_TRUE(cache.lookup("m", 1, "a", response));  // "a" is now the most recent
  cache.insert("m", 1, "c", payload);                // over 120: "b" goes
  EXPECT_TRUE(cache.lookup("m", 1, "a", response));
  EXPECT_FALSE(cache.lookup("m", 1, "b", response));
  EXPECT_TRUE(cache.lookup("m", 1, "c", response));
  EXPECT_EQ(cache.entries(), 2u);
  EXPECT_EQ(cache.bytes(), 100u);
  cache.insert("m", 1, "huge", std::string(500, 'y'));  // larger than the cache: not stored
  EXPECT_EQ(cache.entries(), 2u);
}

}  // namespace
}  // namespace slipway::serve
