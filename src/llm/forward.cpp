// The Llama forward pass over a batch of tokens from any sequences at any positions, and the
// block-pooled key/value cache it reads and writes.
#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "slipway/llm.h"

namespace slipway::llm {

// ---------------------------------------------------------------------------------------------
// KV cache.

KvCache::KvCache(const LlamaConfig& config, std::size_t blocks, std::size_t max_sequences)
    : width_(config.kv_heads * config.head_dim), layers_(config.layers), max_sequences_(max_sequences) {
  storage_.assign(blocks * layers_ * 2 * kKvBlockTokens * width_, 0.0f);
  free_.reserve(blocks);
  for (std::size_t block = blocks; block-- > 0;) free_.push_back(block);  // block 0 handed out first
}

Status KvCache::reserve(std::size_t sequence, std::size_t length) {
  if (sequence >= max_sequences_) {
    return invalid_argument(fmt::format("sequence {} is past the cache's {} sequences", sequence, max_sequences_));
  }
  if (sequence >= tables_.size()) {
    tables_.resize(sequence + 1);
    filled_.resize(sequence + 1, 0);
  }
  auto& table = tables_[sequence];
  std::size_t needed = (length + kKvBlockTokens - 1) / kKvBlockTokens;
  if (needed > table.size() && needed - table.size() > free_.size()) {
    return resource_exhausted(
        fmt::format("the key/value cache has {} free blocks of {} tokens; sequence {} needs {} more", free_.size(),
                    kKvBlockTokens, sequence, needed - table.size()));
  }
  while (table.size() < needed) {
    table.push_back(free_.back());
    free_.pop_back();
  }
  return {};
}

void KvCache::release(std::size_t sequence) {
  if (sequence >= tables_.size()) return;
  for (std::size_t block : tables_[sequence]) free_.push_back(block);
  tables_[sequence].clear();
  filled_[sequence] = 0;
}

std::size_t KvCache::filled(std::size_t sequence) const { return sequence < filled_.size() ? filled_[sequence] : 0; }

void KvCache::set_filled(std::size_t sequence, std::size_t filled) {
  if (sequence < filled_.size()) filled_[sequence] = filled;
}

float* KvCache::slot(std::size_t sequence, std::size_t layer, std::size_t position, std::size_t which) {
  std::size_t block = tables_[sequence][position / kKvBlockTokens];
  std::size_t offset = ((block * layers_ + layer) * 2 + which) * kKvBlockTokens + position % kKvBlockTokens;
  return storage_.data() + offset * width_;
}

float* KvCache::key(std::size_t sequence, std::size_t layer, std::size_t position) {
  return slot(sequence, layer, position, 0);
}

float* KvCache::value(std::size_t sequence, std::size_t layer, std::size_t position) {
  return slot(sequence, layer, position, 1);
}

// ---------------------------------------------------------------------------------------------
// Forward pass.

namespace {

// out[t][r] = row r of `matrix` . in[t], for `tokens` rows of `matrix.columns` inputs. Rows are
// split over threads; each is dequantized once and summed in one fixed order, so the result
// does not depend on the split.
void multiply(const WeightMatrix& matrix, const std::vector<float>& in, std::size_t tokens, std::vector<float>& out,
              int threads) {
  out.assign(tokens * matrix.rows, 0.0f);
  constexpr std::size_t kRowsPerTask = 64;
  std::size_t tasks = (matrix.rows + kRowsPerTask - 1) / kRowsPerTask;
  parallel_for(tasks, threads, [&](std::size_t task) {
    std::vector<float> row(matrix.columns);
    std::size_t end = std::min(matrix.rows, (task + 1) * kRowsPerTask);
    for (std::size_t r = task * kRowsPerTask; r < end; ++r) {
      dequantize_row(matrix, r, row.data());
      for (std::size_t t = 0; t < tokens; ++t) {
        const float* x = in.data() + t * matrix.columns;
        float sum = 0.0f;
        for (std::size_t c = 0; c < matrix.columns; ++c) sum += row[c] * x[c];
        out[t * matrix.rows + r] = sum;
      }
    }
  });
}

// x / sqrt(mean(x^2) + epsilon) * weight, row by row.
void rms_norm(const std::vector<float>& in, std::span<const float> weight, float epsilon, std::vector<float>& out) {
  const std::size_t width = weight.size();
  out.resize(in.size());
  for (std::size_t start = 0; start < in.size(); start += width) {
    double squares = 0;
    for (std::size_t i = 0; i < width; ++i) squares += static_cast<double>(in[start + i]) * in[start + i];
    auto scale = static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(width) + epsilon));
    for (std::size_t i = 0; i < width; ++i) out[start + i] = in[start + i] * scale * weight[i];
  }
}

// Rotates adjacent pairs (x[2i], x[2i+1]) of each head by position * base^(-2i / rope_dims), as
// GGUF's Llama convention has it (checkpoints converted from rotate-half are permuted to it).
void rotate(float* values, std::size_t heads, const LlamaConfig& config, std::size_t position) {
  for (std::size_t pair = 0; pair < config.rope_dims / 2; ++pair) {
    double angle = static_cast<double>(position) *
                   std::pow(static_cast<double>(config.rope_base),
                            -2.0 * static_cast<double>(pair) / static_cast<double>(config.rope_dims));
    auto cosine = static_cast<float>(std::cos(angle)), sine = static_cast<float>(std::sin(angle));
    for (std::size_t head = 0; head < heads; ++head) {
      float* x = values + head * config.head_dim + 2 * pair;
      float first = x[0], second = x[1];
      x[0] = first * cosine - second * sine;
      x[1] = first * sine + second * cosine;
    }
  }
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace

Status forward(const LlamaModel& model, KvCache& cache, std::span<const BatchToken> batch,
               const std::vector<bool>& wants_logits, std::vector<float>& logits, int threads) {
  const LlamaConfig& config = model.config();
  const std::size_t tokens = batch.size(), width = config.embedding;
  const std::size_t kv_width = config.kv_heads * config.head_dim, group = config.heads / config.kv_heads;
  if (wants_logits.size() != tokens) return invalid_argument("wants_logits must have one entry per token");
  if (threads <= 0) threads = default_thread_count();
  // Checked whole first: where each sequence's filled length would reach, token by token.
  std::map<std::size_t, std::size_t> reach;
  for (const auto& item : batch) {
    if (item.token < 0 || static_cast<std::size_t>(item.token) >= config.vocabulary) {
      return invalid_argument(fmt::format("token {} is outside the vocabulary of {}", item.token, config.vocabulary));
    }
    if (item.position >= config.context) {
      return invalid_argument(
          fmt::format("position {} is past the context of {} tokens", item.position, config.context));
    }
    auto [entry, inserted] = reach.try_emplace(item.sequence, cache.filled(item.sequence));
    if (item.position > entry->second) {
      return invalid_argument(fmt::format("sequence {} has {} positions filled; position {} would leave a gap",
                                          item.sequence, entry->second, item.position));
    }
    entry->second = std::max(entry->second, item.position + 1);
  }
  for (const auto& [sequence, length] : reach) SLIPWAY_RETURN_IF_ERROR(cache.reserve(sequence, length));
  std::vector<float> x(tokens * width), normed, query, key, value, attended(tokens * width), projected, gate, up;
  for (std::size_t t = 0; t < tokens; ++t) {
    dequantize_row(model.token_embedding(), static_cast<std::size_t>(batch[t].token), x.data() + t * width);
  }
  const float score_scale = 1.0f / std::sqrt(static_cast<float>(config.head_dim));
  for (std::size_t index = 0; index < config.layers; ++index) {
    const LlamaModel::Layer& layer = model.layers()[index];
    rms_norm(x, layer.attention_norm, config.rms_epsilon, normed);
    multiply(layer.query, normed, tokens, query, threads);
    multiply(layer.key, normed, tokens, key, threads);
    multiply(layer.value, normed, tokens, value, threads);
    // Every key and value of the batch is stored before any token attends: a prompt's tokens see
    // each other (each only up to its own position).
    for (std::size_t t = 0; t < tokens; ++t) {
      rotate(query.data() + t * width, config.heads, config, batch[t].position);
      rotate(key.data() + t * kv_width, config.kv_heads, config, batch[t].position);
      std::copy_n(key.data() + t * kv_width, kv_width, cache.key(batch[t].sequence, index, batch[t].position));
      std::copy_n(value.data() + t * kv_width, kv_width, cache.value(batch[t].sequence, index, batch[t].position));
    }
    parallel_for(tokens * config.heads, threads, [&](std::size_t task) {
      std::size_t t = task / config.heads, head = task % config.heads;
      const BatchToken& item = batch[t];
      const float* q = query.data() + t * width + head * config.head_dim;
      std::size_t kv_offset = (head / group) * config.head_dim;
      std::vector<float> scores(item.position + 1);
      float largest = -INFINITY;
      for (std::size_t p = 0; p <= item.position; ++p) {
        const float* k = cache.key(item.sequence, index, p) + kv_offset;
        float dot = 0.0f;
        for (std::size_t d = 0; d < config.head_dim; ++d) dot += q[d] * k[d];
        scores[p] = dot * score_scale;
        largest = std::max(largest, scores[p]);
      }
      float total = 0.0f;
      for (float& score : scores) {
        score = std::exp(score - largest);
        total += score;
      }
      float* out = attended.data() + t * width + head * config.head_dim;
      std::fill_n(out, config.head_dim, 0.0f);
      for (std::size_t p = 0; p <= item.position; ++p) {
        const float* v = cache.value(item.sequence, index, p) + kv_offset;
        float weight = scores[p] / total;
        for (std::size_t d = 0; d < config.head_dim; ++d) out[d] += weight * v[d];
      }
    });
    multiply(layer.attention_output, attended, tokens, projected, threads);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += projected[i];
    rms_norm(x, layer.ffn_norm, config.rms_epsilon, normed);
    multiply(layer.gate, normed, tokens, gate, threads);
    multiply(layer.up, normed, tokens, up, threads);
    for (std::size_t i = 0; i < gate.size(); ++i) gate[i] = silu(gate[i]) * up[i];
    multiply(layer.down, gate, tokens, projected, threads);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += projected[i];
  }
  for (const auto& [sequence, length] : reach) cache.set_filled(sequence, length);
  // Only the rows that want logits go through the output matrix (a prompt wants its last).
  std::vector<float> last;
  std::size_t wanted = 0;
  for (std::size_t t = 0; t < tokens; ++t) {
    if (!wants_logits[t]) continue;
    last.insert(last.end(), x.begin() + static_cast<std::ptrdiff_t>(t * width),
                x.begin() + static_cast<std::ptrdiff_t>((t + 1) * width));
    ++wanted;
  }
  rms_norm(last, model.output_norm(), config.rms_epsilon, normed);
  multiply(model.output(), normed, wanted, logits, threads);
  return {};
}

}  // namespace slipway::llm
