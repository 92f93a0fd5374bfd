// The paged key/value cache: a pool of blocks with reference counts, copy on write, and a prefix
// cache of whole blocks known by chained hashes, evicted least recently used first.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "slipway/llm.h"

namespace slipway::llm {

namespace {

std::uint64_t mix(std::uint64_t value) {  // splitmix64's finalizer
  value += 0x9E3779B97F4A7C15ULL;
  value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9ULL;
  value = (value ^ (value >> 27)) * 0x94D049BB133111EBULL;
  return value ^ (value >> 31);
}

// A block's hash: its parent's (or, for a first block, the salt's) and its tokens.
std::uint64_t chain_hash(std::uint64_t parent, std::span<const std::int32_t> tokens) {
  std::uint64_t hash = parent;
  for (std::int32_t token : tokens) hash = mix(hash ^ static_cast<std::uint32_t>(token));
  return hash;
}

std::uint64_t chain_start(std::uint64_t salt) { return mix(salt ^ 0x736C69707761794BULL); }

}  // namespace

std::string_view kv_cache_type_name(KvCacheType type) {
  switch (type) {
    case KvCacheType::kF32:
      return "f32";
    case KvCacheType::kF16:
      return "f16";
    case KvCacheType::kInt8:
      return "int8";
    case KvCacheType::kFp8E4M3:
      return "fp8_e4m3";
  }
  return "unknown";
}

bool kv_cache_type_is_8_bit(KvCacheType type) { return type == KvCacheType::kInt8 || type == KvCacheType::kFp8E4M3; }

bool kv_cache_type_by_name(std::string_view name, KvCacheType& type) {
  if (name == "f32") {
    type = KvCacheType::kF32;
  } else if (name == "f16" || name == "auto") {
    type = KvCacheType::kF16;
  } else if (name == "int8") {
    type = KvCacheType::kInt8;
  } else if (name == "fp8" || name == "fp8_e4m3") {  // vLLM's kv_cache_dtype names
    type = KvCacheType::kFp8E4M3;
  } else {
    return false;
  }
  return true;
}

namespace {

std::size_t layer_bytes(const LlamaConfig& config, KvCacheType type) {
  const std::size_t width = config.kv_heads * config.head_dim;
  if (type == KvCacheType::kF32) return 2 * kKvBlockTokens * width * sizeof(float);
  if (type == KvCacheType::kF16) return 2 * kKvBlockTokens * width * sizeof(std::uint16_t);
  return 2 * kKvBlockTokens * width + 2 * kKvBlockTokens * config.kv_heads * sizeof(float);  // int8, FP8
}

}  // namespace

KvCache::KvCache(const LlamaConfig& config, std::size_t blocks, std::size_t max_sequences, KvCacheType type)
    : type_(type),
      width_(config.kv_heads * config.head_dim),
      layers_(config.layers),
      kv_heads_(config.kv_heads),
      head_dim_(config.head_dim),
      layer_bytes_(layer_bytes(config, type)),
      block_bytes_(layers_ * layer_bytes_),
      storage_(blocks * block_bytes_),
      max_sequences_(max_sequences),
      references_(blocks, 0),
      previous_(blocks, kNone),
      next_(blocks, kNone),
      cached_(blocks) {
  // Committed whole at start, as a GPU server's pool is: a serving process walks the whole pool
  // (a freed block the prefix cache keeps goes to the back of the free list), and faulting its
  // pages in on the way cost a fresh server's batched steps a tenth of their time.
  if (!storage_.commit()) throw std::bad_alloc();
  for (std::size_t block = blocks; block-- > 0;) put_back(block);  // block 0 handed out first
}

std::uint64_t KvCache::block_bytes(const LlamaConfig& config, KvCacheType type) {
  return std::uint64_t{config.layers} * layer_bytes(config, type);
}

std::byte* KvCache::layer_data(std::size_t block, std::size_t layer) {
  return storage_.data() + block * block_bytes_ + layer * layer_bytes_;
}

const std::byte* KvCache::layer_data(std::size_t block, std::size_t layer) const {
  return storage_.data() + block * block_bytes_ + layer * layer_bytes_;
}

void KvCache::unlink(std::size_t block) {
  const std::size_t before = previous_[block], after = next_[block];
  (before == kNone ? head_ : next_[before]) = after;
  (after == kNone ? tail_ : previous_[after]) = before;
  previous_[block] = next_[block] = kNone;
  --free_count_;
}

void KvCache::put_back(std::size_t block) {
  // A block holding nothing reusable goes first, so cached ones live longest.
  if (cached_[block].valid) {
    previous_[block] = tail_;
    (tail_ == kNone ? head_ : next_[tail_]) = block;
    tail_ = block;
  } else {
    next_[block] = head_;
    (head_ == kNone ? tail_ : previous_[head_]) = block;
    head_ = block;
  }
  ++free_count_;
}

void KvCache::forget(std::size_t block) {
  Cached& cached = cached_[block];
  if (!cached.valid) return;
  by_hash_.erase(cached.hash);
  cached.valid = false;
}

std::size_t KvCache::take_block() {
  const std::size_t block = head_;
  if (block == kNone) return kNone;
  unlink(block);
  forget(block);
  references_[block] = 1;
  return block;
}

void KvCache::hold(std::size_t block) {
  if (references_[block]++ == 0) unlink(block);
}

void KvCache::drop(std::size_t block) {
  if (--references_[block] == 0) put_back(block);
}

std::vector<std::size_t>& KvCache::table(std::size_t sequence) {
  if (sequence >= tables_.size()) {
    tables_.resize(sequence + 1);
    filled_.resize(sequence + 1, 0);
    chains_.resize(sequence + 1);
  }
  return tables_[sequence];
}

Status KvCache::prepare(std::size_t sequence, std::size_t first, std::size_t end) {
  if (sequence >= max_sequences_) {
    return invalid_argument(fmt::format("sequence {} is past the cache's {} sequences", sequence, max_sequences_));
  }
  std::vector<std::size_t>& blocks = table(sequence);
  const std::size_t needed = (end + kKvBlockTokens - 1) / kKvBlockTokens;
  auto exhausted = [&] {
    return resource_exhausted(fmt::format("the key/value cache has {} free blocks of {} tokens; sequence {} needs more",
                                          free_count_, kKvBlockTokens, sequence));
  };
  for (std::size_t index = first / kKvBlockTokens; index < std::min(blocks.size(), needed); ++index) {
    const std::size_t block = blocks[index];
    if (references_[block] > 1) {
      const std::size_t copy = take_block();
      if (copy == kNone) return exhausted();
      std::memcpy(layer_data(copy, 0), layer_data(block, 0), block_bytes_);
      drop(block);
      blocks[index] = copy;
    } else {
      forget(block);
    }
  }
  while (blocks.size() < needed) {
    const std::size_t block = take_block();
    if (block == kNone) return exhausted();
    blocks.push_back(block);
  }
  // Published blocks past the first written one are no longer what their chain says.
  Chain& chain = chains_[sequence];
  if (chain.blocks > first / kKvBlockTokens) chain = {};
  return {};
}

Status KvCache::reserve(std::size_t sequence, std::size_t length) {
  return prepare(sequence, std::min(filled(sequence), length), length);
}

std::size_t KvCache::blocks_short(std::size_t sequence, std::size_t length) const {
  const std::size_t needed = (length + kKvBlockTokens - 1) / kKvBlockTokens;
  const std::size_t held = blocks_of(sequence);
  return needed > held + free_count_ ? needed - held - free_count_ : 0;
}

std::size_t KvCache::blocks_of(std::size_t sequence) const {
  return sequence < tables_.size() ? tables_[sequence].size() : 0;
}

void KvCache::release(std::size_t sequence) {
  if (sequence >= tables_.size()) return;
  // Last block first onto the free list: it is evicted before the prefix it continues.
  for (auto block = tables_[sequence].rbegin(); block != tables_[sequence].rend(); ++block) drop(*block);
  tables_[sequence].clear();
  filled_[sequence] = 0;
  chains_[sequence] = {};
}

Status KvCache::fork(std::size_t parent, std::size_t child) {
  if (parent >= max_sequences_ || child >= max_sequences_) {
    return invalid_argument(
        fmt::format("sequence {} is past the cache's {} sequences", std::max(parent, child), max_sequences_));
  }
  if (parent == child || blocks_of(child) != 0) {
    return invalid_argument(fmt::format("sequence {} must be empty to be forked into", child));
  }
  table(std::max(parent, child));
  for (std::size_t block : tables_[parent]) hold(block);
  tables_[child] = tables_[parent];
  filled_[child] = filled_[parent];
  chains_[child] = chains_[parent];
  return {};
}

std::size_t KvCache::attach_cached_prefix(std::size_t sequence, std::span<const std::int32_t> tokens,
                                          std::uint64_t salt, std::size_t limit) {
  if (sequence >= max_sequences_ || blocks_of(sequence) != 0) return 0;
  std::vector<std::size_t>& blocks = table(sequence);
  Chain chain{0, chain_start(salt), kNone};
  const std::size_t usable = std::min(tokens.size(), limit) / kKvBlockTokens;
  while (chain.blocks < usable) {
    auto block_tokens = tokens.subspan(chain.blocks * kKvBlockTokens, kKvBlockTokens);
    const std::uint64_t hash = chain_hash(chain.hash, block_tokens);
    auto found = by_hash_.find(hash);
    if (found == by_hash_.end()) break;
    const Cached& cached = cached_[found->second];
    if (cached.parent != chain.parent || !std::equal(block_tokens.begin(), block_tokens.end(), cached.tokens.begin())) {
      break;
    }
    hold(found->second);
    blocks.push_back(found->second);
    chain = {chain.blocks + 1, hash, found->second};
  }
  chains_[sequence] = chain;
  filled_[sequence] = chain.blocks * kKvBlockTokens;
  return filled_[sequence];
}

void KvCache::publish(std::size_t sequence, std::span<const std::int32_t> tokens, std::uint64_t salt) {
  if (sequence >= tables_.size()) return;
  Chain& chain = chains_[sequence];
  if (chain.blocks == 0) chain = {0, chain_start(salt), kNone};
  const std::size_t whole = std::min(filled_[sequence], tokens.size()) / kKvBlockTokens;
  for (; chain.blocks < whole; ++chain.blocks) {
    auto block_tokens = tokens.subspan(chain.blocks * kKvBlockTokens, kKvBlockTokens);
    const std::uint64_t hash = chain_hash(chain.hash, block_tokens);
    const std::size_t block = tables_[sequence][chain.blocks];
    // An entry whose parent is not this chain's block (its parent was evicted) can never be hit:
    // this block takes its place.
    if (auto stale = by_hash_.find(hash); stale != by_hash_.end() && cached_[stale->second].parent != chain.parent) {
      forget(stale->second);
    }
    auto [entry, inserted] = by_hash_.try_emplace(hash, block);
    if (inserted) {
      Cached& cached = cached_[block];
      cached.hash = hash;
      cached.parent = chain.parent;
      std::copy(block_tokens.begin(), block_tokens.end(), cached.tokens.begin());
      cached.valid = true;
    }
    // The next block's parent is the block its chain finds: this one, or the one cached first
    // with the same tokens (a prompt computed twice at once).
    chain.hash = hash;
    chain.parent = entry->second;
  }
}

std::size_t KvCache::filled(std::size_t sequence) const { return sequence < filled_.size() ? filled_[sequence] : 0; }

void KvCache::set_filled(std::size_t sequence, std::size_t filled) {
  if (sequence < filled_.size()) filled_[sequence] = filled;
}

void KvCache::store(std::size_t sequence, std::size_t layer, std::size_t position, const float* key,
                    const float* value) {
  store(sequence, layer, position, key, value, {0, kv_heads_});
}

void KvCache::store(std::size_t sequence, std::size_t layer, std::size_t position, const float* key, const float* value,
                    TensorSlice heads) {
  std::byte* data = layer_data(tables_[sequence][position / kKvBlockTokens], layer);
  const std::size_t slot = position % kKvBlockTokens;
  const std::size_t first_column = heads.first * head_dim_, columns = heads.count * head_dim_;
  auto put_floats = [&](auto* keys, auto convert) {
    auto* values = keys + kKvBlockTokens * width_;
    for (std::size_t c = 0; c < columns; ++c) keys[(first_column + c) * kKvBlockTokens + slot] = convert(key[c]);
    for (std::size_t c = 0; c < columns; ++c) values[slot * width_ + first_column + c] = convert(value[c]);
  };
  if (type_ == KvCacheType::kF32) return put_floats(reinterpret_cast<float*>(data), [](float x) { return x; });
  if (type_ == KvCacheType::kF16) return put_floats(reinterpret_cast<std::uint16_t*>(data), kernels::float_to_half);
  auto* keys = reinterpret_cast<std::uint8_t*>(data);
  auto* values = keys + kKvBlockTokens * width_;
  auto* key_scales = reinterpret_cast<float*>(values + kKvBlockTokens * width_);
  auto* value_scales = key_scales + kv_heads_ * kKvBlockTokens;
  // Symmetric per head: the head's largest magnitude maps to the type's largest code (127 for
  // int8, 448 for FP8 E4M3, whose codes then keep 4 significant bits over the 15 binades below
  // it). A head too small for its scale to be a normal float (1 / scale would overflow) stores
  // zeros.
  auto put_codes = [&](float largest_code, auto encode) {
    auto quantize = [&](const float* in, float& scale, auto&& put) {
      float largest = 0;
      for (std::size_t c = 0; c < head_dim_; ++c) largest = std::max(largest, std::fabs(in[c]));
      scale = largest / largest_code;
      const float inverse = scale >= std::numeric_limits<float>::min() ? 1.0f / scale : 0.0f;
      for (std::size_t c = 0; c < head_dim_; ++c) put(c, encode(in[c] * inverse));
    };
    for (std::size_t local = 0; local < heads.count; ++local) {
      const std::size_t head = heads.first + local, first = head * head_dim_, in = local * head_dim_;
      quantize(key + in, key_scales[head * kKvBlockTokens + slot],
               [&](std::size_t c, std::uint8_t q) { keys[(first + c) * kKvBlockTokens + slot] = q; });
      quantize(value + in, value_scales[slot * kv_heads_ + head],
               [&](std::size_t c, std::uint8_t q) { values[slot * width_ + first + c] = q; });
    }
  };
  if (type_ == KvCacheType::kFp8E4M3) return put_codes(448.0f, kernels::float_to_fp8_e4m3);
  put_codes(127.0f, [](float level) { return static_cast<std::uint8_t>(static_cast<std::int8_t>(std::lrint(level))); });
}

namespace {

kernels::KvElement element_of(KvCacheType type) {
  switch (type) {
    case KvCacheType::kF32:
      return kernels::KvElement::kF32;
    case KvCacheType::kF16:
      return kernels::KvElement::kF16;
    case KvCacheType::kInt8:
      return kernels::KvElement::kInt8;
    case KvCacheType::kFp8E4M3:
      return kernels::KvElement::kFp8E4M3;
  }
  return kernels::KvElement::kF32;
}

}  // namespace

kernels::KvBlock KvCache::head_keys(std::size_t sequence, std::size_t layer, std::size_t block,
                                    std::size_t kv_head) const {
  const std::byte* data = layer_data(tables_[sequence][block], layer);
  const kernels::KvElement element = element_of(type_);
  kernels::KvBlock keys{data + kv_head * head_dim_ * kKvBlockTokens * kernels::kv_element_bytes(element), element,
                        kKvBlockTokens};
  if (kv_cache_type_is_8_bit(type_)) {
    keys.scales = reinterpret_cast<const float*>(data + 2 * kKvBlockTokens * width_) + kv_head * kKvBlockTokens;
    keys.scale_stride = 1;
  }
  return keys;
}

kernels::KvBlock KvCache::head_values(std::size_t sequence, std::size_t layer, std::size_t block,
                                      std::size_t kv_head) const {
  const std::byte* data = layer_data(tables_[sequence][block], layer);
  const kernels::KvElement element = element_of(type_);
  const std::size_t element_bytes = kernels::kv_element_bytes(element);
  kernels::KvBlock values{data + (kKvBlockTokens * width_ + kv_head * head_dim_) * element_bytes, element, width_};
  if (kv_cache_type_is_8_bit(type_)) {
    values.scales =
        reinterpret_cast<const float*>(data + 2 * kKvBlockTokens * width_) + kv_heads_ * kKvBlockTokens + kv_head;
    values.scale_stride = kv_heads_;
  }
  return values;
}

}  // namespace slipway::llm
