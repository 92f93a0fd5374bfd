// The Llama forward pass over a batch of tokens from any sequences at any positions.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "slipway/llm.h"

namespace slipway::llm {

// ---------------------------------------------------------------------------------------------
// Forward pass.

namespace {

// out[t][r] = row r of a matrix . in[t] for every (matrix, out) pair, all sharing one input of
// `tokens` rows: each matrix's panels are split into tasks, and one parallel loop runs them all
// (a decode step's products are too small to pay for a loop each). The kernels give an output
// the same bits under any split.
struct Product {
  const WeightMatrix* matrix;
  std::vector<float>* out;
};

void multiply(std::initializer_list<Product> products, const std::vector<float>& in, std::size_t tokens,
              ThreadTeam& team) {
  // A file may mix float and quantized matrices sharing an input: quantized for any that wants it
  // (the float kernels read the floats, which stay).
  const bool quantize = std::any_of(products.begin(), products.end(), [](const Product& product) {
    return kernels::llm_format_quantized(product.matrix->packed->format);
  });
  kernels::LlmInput input;
  kernels::prepare_llm_input(in.data(), tokens, products.begin()->matrix->columns, quantize, input);
  struct Task {
    const Product* product;
    std::size_t first_panel, panel_count;
  };
  std::vector<Task> tasks;
  for (const Product& product : products) {
    const kernels::LlmPackedMatrix& packed = *product.matrix->packed;
    product.out->resize(tokens * packed.rows);
    std::size_t per_task = std::max<std::size_t>(1, packed.panels() / (4 * static_cast<std::size_t>(team.size())));
    for (std::size_t panel = 0; panel < packed.panels(); panel += per_task) {
      tasks.push_back({&product, panel, std::min(per_task, packed.panels() - panel)});
    }
  }
  const kernels::LlmProductKernel kernel = kernels::llm_kernel().product;
  team.run(tasks.size(), [&](std::size_t index) {
    const Task& task = tasks[index];
    kernel(*task.product->matrix->packed, input, task.first_panel, task.panel_count, task.product->out->data());
  });
}

// x / sqrt(mean(x^2) + epsilon) * weight, for `rows` rows.
void rms_norm(const float* in, std::size_t rows, std::span<const float> weight, float epsilon, float* out) {
  const std::size_t width = weight.size();
  for (std::size_t start = 0; start < rows * width; start += width) {
    double squares = 0;
    for (std::size_t i = 0; i < width; ++i) squares += static_cast<double>(in[start + i]) * in[start + i];
    auto scale = static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(width) + epsilon));
    for (std::size_t i = 0; i < width; ++i) out[start + i] = in[start + i] * scale * weight[i];
  }
}

// Runs body(first_token, count) over the tokens split among the team: the per-token steps between
// the products, worth sharing for a prompt (a decode step's single token runs on the caller).
template <typename Body>
void over_tokens(ThreadTeam& team, std::size_t tokens, const Body& body) {
  const std::size_t parts = std::min(tokens, 4 * static_cast<std::size_t>(team.size()));
  team.run(parts, [&](std::size_t part) {
    const std::size_t first = tokens * part / parts, end = tokens * (part + 1) / parts;
    body(first, end - first);
  });
}

// The rotary embedding's cosine and sine for each token's position and each pair of dimensions:
// pair i turns by position * base^(-2i / rope_dims), as GGUF's Llama convention has it
// (checkpoints converted from rotate-half are permuted to it). Computed once per pass, not per
// layer.
std::vector<float> rotations(std::span<const BatchToken> batch, const LlamaConfig& config) {
  const std::size_t pairs = config.rope_dims / 2;
  std::vector<double> frequencies(pairs);
  for (std::size_t pair = 0; pair < pairs; ++pair) {
    frequencies[pair] = std::pow(static_cast<double>(config.rope_base),
                                 -2.0 * static_cast<double>(pair) / static_cast<double>(config.rope_dims));
  }
  std::vector<float> table(batch.size() * pairs * 2);
  for (std::size_t t = 0; t < batch.size(); ++t) {
    for (std::size_t pair = 0; pair < pairs; ++pair) {
      double angle = static_cast<double>(batch[t].position) * frequencies[pair];
      table[(t * pairs + pair) * 2] = static_cast<float>(std::cos(angle));
      table[(t * pairs + pair) * 2 + 1] = static_cast<float>(std::sin(angle));
    }
  }
  return table;
}

// Rotates the adjacent pairs (x[2i], x[2i+1]) of each head by one token's rotations.
void rotate(float* values, std::size_t heads, const LlamaConfig& config, const float* rotation) {
  for (std::size_t pair = 0; pair < config.rope_dims / 2; ++pair) {
    const float cosine = rotation[2 * pair], sine = rotation[2 * pair + 1];
    for (std::size_t head = 0; head < heads; ++head) {
      float* x = values + head * config.head_dim + 2 * pair;
      float first = x[0], second = x[1];
      x[0] = first * cosine - second * sine;
      x[1] = first * sine + second * cosine;
    }
  }
}

// Runs of up to kAttentionQueries batch tokens of one sequence at consecutive positions (a
// prompt's): they attend together, sharing the loads of each block of keys and values.
struct QueryTile {
  std::size_t first_token, count;
};

std::vector<QueryTile> query_tiles(std::span<const BatchToken> batch) {
  std::vector<QueryTile> tiles;
  for (std::size_t t = 0; t < batch.size(); ++t) {
    if (!tiles.empty()) {
      QueryTile& last = tiles.back();
      const BatchToken& previous = batch[t - 1];
      if (last.count < kernels::kAttentionQueries && batch[t].sequence == previous.sequence &&
          batch[t].position == previous.position + 1) {
        ++last.count;
        continue;
      }
    }
    tiles.push_back({t, 1});
  }
  return tiles;
}

// The tiles that read one head's blocks together: each tile alone for an F32 cache (its blocks
// are read in place), all the tiles of a sequence for an int8 one (its blocks are dequantized once
// for all of them, not once per tile: a prompt's tiles would otherwise dequantize its early
// blocks over and over).
struct TileRun {
  std::size_t first, end;  // tiles [first, end)
};

std::vector<TileRun> tile_runs(std::span<const QueryTile> tiles, std::span<const BatchToken> batch, bool by_sequence) {
  std::vector<TileRun> runs;
  for (std::size_t t = 0; t < tiles.size(); ++t) {
    if (by_sequence && !runs.empty() &&
        batch[tiles[t].first_token].sequence == batch[tiles[runs.back().first].first_token].sequence) {
      runs.back().end = t + 1;
    } else {
      runs.push_back({t, t + 1});
    }
  }
  return runs;
}

// One head's keys and values, block by block, as floats.
struct HeadBlocks {
  std::vector<const float*> keys, values;
  std::size_t value_stride = 0;
};

void gather_blocks(const KvCache& cache, std::size_t sequence, std::size_t layer, std::size_t kv_head,
                   std::size_t blocks, std::size_t head_dim, HeadBlocks& out) {
  // Each team thread's own, grown to the most blocks it has seen.
  thread_local std::vector<float> key_buffer, value_buffer;
  const std::size_t block_floats = head_dim * kKvBlockTokens;
  const bool dequantized = cache.type() != KvCacheType::kF32;
  if (dequantized && key_buffer.size() < blocks * block_floats) {
    key_buffer.resize(blocks * block_floats);
    value_buffer.resize(blocks * block_floats);
  }
  out.keys.resize(blocks);
  out.values.resize(blocks);
  for (std::size_t b = 0; b < blocks; ++b) {
    out.keys[b] =
        cache.head_keys(sequence, layer, b, kv_head, dequantized ? key_buffer.data() + b * block_floats : nullptr);
    out.values[b] = cache.head_values(sequence, layer, b, kv_head,
                                      dequantized ? value_buffer.data() + b * block_floats : nullptr, out.value_stride);
  }
}

// One head's attention for one tile of queries, into `out` (the tile's rows of the attended
// values). Each query's arithmetic is what it would be alone: its scores, its softmax, and its
// positions' values in order, the positions every query of the tile has first, then its own.
void attend(const LlamaConfig& config, const HeadBlocks& head_blocks, std::span<const BatchToken> batch,
            std::size_t head, QueryTile tile, const std::vector<float>& query, float* out) {
  const kernels::LlmKernelVariant& variant = kernels::llm_kernel();
  const std::size_t width = config.embedding;
  const BatchToken& first = batch[tile.first_token];
  const std::size_t shortest = first.position + 1, longest = shortest + tile.count - 1;
  const std::size_t blocks = (longest + kKvBlockTokens - 1) / kKvBlockTokens, row = blocks * kKvBlockTokens;
  // Each team thread's own, grown to the longest tile it has seen (four rows of the context at
  // most): no allocation per head and tile.
  thread_local std::vector<float> scores;
  if (scores.size() < tile.count * row) scores.resize(tile.count * row);
  for (std::size_t b = 0; b < blocks; ++b) {
    variant.block_scores(query.data() + tile.first_token * width + head * config.head_dim, width, tile.count,
                         head_blocks.keys[b], config.head_dim, scores.data() + b * kKvBlockTokens, row);
  }
  const float score_scale = 1.0f / std::sqrt(static_cast<float>(config.head_dim));
  for (std::size_t q = 0; q < tile.count; ++q) variant.softmax(scores.data() + q * row, shortest + q, score_scale);
  for (std::size_t q = 0; q < tile.count; ++q) std::fill_n(out + q * width, config.head_dim, 0.0f);
  const std::size_t stride = head_blocks.value_stride;
  for (std::size_t b = 0; b < blocks; ++b) {
    const float* values = head_blocks.values[b];
    const std::size_t start = b * kKvBlockTokens;
    auto in_block = [&](std::size_t positions) {
      return std::min(kKvBlockTokens, positions - std::min(positions, start));
    };
    const std::size_t shared = in_block(shortest);
    if (shared > 0) {
      variant.add_weighted_values(scores.data() + start, row, tile.count, shared, values, stride, config.head_dim, out,
                                  width);
    }
    for (std::size_t q = 0; q < tile.count; ++q) {
      const std::size_t own = in_block(shortest + q);
      if (own > shared) {
        variant.add_weighted_values(scores.data() + q * row + start + shared, row, 1, own - shared,
                                    values + shared * stride, stride, config.head_dim, out + q * width, width);
      }
    }
  }
}

static_assert(kKvBlockTokens == kernels::kAttentionBlock);

}  // namespace

Status forward(const LlamaModel& model, KvCache& cache, std::span<const BatchToken> batch,
               const std::vector<bool>& wants_logits, std::vector<float>& logits, ThreadTeam& team) {
  const LlamaConfig& config = model.config();
  const std::size_t tokens = batch.size(), width = config.embedding;
  const std::size_t kv_width = config.kv_heads * config.head_dim;
  if (wants_logits.size() != tokens) return invalid_argument("wants_logits must have one entry per token");
  logits.clear();
  if (tokens == 0) return {};
  // Checked whole first: where each sequence's writes start and its filled length would reach,
  // token by token, and that no position comes twice (the tokens store their keys in parallel).
  struct Writes {
    std::size_t first, end;
  };
  std::map<std::size_t, Writes> reach;
  std::set<std::pair<std::size_t, std::size_t>> positions;
  for (const auto& item : batch) {
    if (!positions.emplace(item.sequence, item.position).second) {
      return invalid_argument(
          fmt::format("position {} of sequence {} comes twice in the batch", item.position, item.sequence));
    }
    if (item.token < 0 || static_cast<std::size_t>(item.token) >= config.vocabulary) {
      return invalid_argument(fmt::format("token {} is outside the vocabulary of {}", item.token, config.vocabulary));
    }
    if (item.position >= config.context) {
      return invalid_argument(
          fmt::format("position {} is past the context of {} tokens", item.position, config.context));
    }
    auto [entry, inserted] = reach.try_emplace(item.sequence, Writes{item.position, cache.filled(item.sequence)});
    Writes& writes = entry->second;
    if (item.position > writes.end) {
      return invalid_argument(fmt::format("sequence {} has {} positions filled; position {} would leave a gap",
                                          item.sequence, writes.end, item.position));
    }
    writes.first = std::min(writes.first, item.position);
    writes.end = std::max(writes.end, item.position + 1);
  }
  for (const auto& [sequence, writes] : reach)
    SLIPWAY_RETURN_IF_ERROR(cache.prepare(sequence, writes.first, writes.end));
  std::vector<float> x(tokens * width), normed, query, key, value, attended(tokens * width), projected, gate, up;
  for (std::size_t t = 0; t < tokens; ++t) {
    dequantize_row(model.token_embedding(), static_cast<std::size_t>(batch[t].token), x.data() + t * width);
  }
  const std::vector<float> rotation = rotations(batch, config);
  const std::size_t pairs = config.rope_dims / 2;
  const std::vector<QueryTile> tiles = query_tiles(batch);
  const std::vector<TileRun> runs = tile_runs(tiles, batch, cache.type() != KvCacheType::kF32);
  const kernels::LlmKernelVariant& variant = kernels::llm_kernel();
  normed.resize(tokens * width);
  for (std::size_t index = 0; index < config.layers; ++index) {
    const LlamaModel::Layer& layer = model.layers()[index];
    over_tokens(team, tokens, [&](std::size_t first, std::size_t count) {
      rms_norm(x.data() + first * width, count, layer.attention_norm, config.rms_epsilon,
               normed.data() + first * width);
    });
    multiply({{&layer.query, &query}, {&layer.key, &key}, {&layer.value, &value}}, normed, tokens, team);
    // Every key and value of the batch is stored before any token attends: a prompt's tokens see
    // each other (each only up to its own position).
    over_tokens(team, tokens, [&](std::size_t first, std::size_t count) {
      for (std::size_t t = first; t < first + count; ++t) {
        rotate(query.data() + t * width, config.heads, config, rotation.data() + t * pairs * 2);
        rotate(key.data() + t * kv_width, config.kv_heads, config, rotation.data() + t * pairs * 2);
        cache.store(batch[t].sequence, index, batch[t].position, key.data() + t * kv_width,
                    value.data() + t * kv_width);
      }
    });
    // Head by head, so one head's keys and values stay in cache while every tile reads them.
    team.run(config.heads * runs.size(), [&](std::size_t task) {
      const std::size_t head = task / runs.size();
      const TileRun& run = runs[task % runs.size()];
      std::size_t reach = 0;
      for (std::size_t t = run.first; t < run.end; ++t) {
        reach = std::max(reach, batch[tiles[t].first_token].position + tiles[t].count);
      }
      thread_local HeadBlocks head_blocks;
      gather_blocks(cache, batch[tiles[run.first].first_token].sequence, index, head / (config.heads / config.kv_heads),
                    (reach + kKvBlockTokens - 1) / kKvBlockTokens, config.head_dim, head_blocks);
      for (std::size_t t = run.first; t < run.end; ++t) {
        attend(config, head_blocks, batch, head, tiles[t], query,
               attended.data() + tiles[t].first_token * width + head * config.head_dim);
      }
    });
    multiply({{&layer.attention_output, &projected}}, attended, tokens, team);
    over_tokens(team, tokens, [&](std::size_t first, std::size_t count) {
      for (std::size_t i = first * width; i < (first + count) * width; ++i) x[i] += projected[i];
      rms_norm(x.data() + first * width, count, layer.ffn_norm, config.rms_epsilon, normed.data() + first * width);
    });
    multiply({{&layer.gate, &gate}, {&layer.up, &up}}, normed, tokens, team);
    const std::size_t hidden = config.feed_forward;
    over_tokens(team, tokens, [&](std::size_t first, std::size_t count) {
      variant.silu_multiply(gate.data() + first * hidden, up.data() + first * hidden, count * hidden);
    });
    multiply({{&layer.down, &projected}}, gate, tokens, team);
    over_tokens(team, tokens, [&](std::size_t first, std::size_t count) {
      for (std::size_t i = first * width; i < (first + count) * width; ++i) x[i] += projected[i];
    });
  }
  for (const auto& [sequence, writes] : reach) cache.set_filled(sequence, writes.end);
  // Only the rows that want logits go through the output matrix (a prompt wants its last).
  std::vector<float> last;
  std::size_t wanted = 0;
  for (std::size_t t = 0; t < tokens; ++t) {
    if (!wants_logits[t]) continue;
    last.insert(last.end(), x.begin() + static_cast<std::ptrdiff_t>(t * width),
                x.begin() + static_cast<std::ptrdiff_t>((t + 1) * width));
    ++wanted;
  }
  normed.resize(last.size());
  rms_norm(last.data(), wanted, model.output_norm(), config.rms_epsilon, normed.data());
  multiply({{&model.output(), &logits}}, normed, wanted, team);
  return {};
}

Status forward(const LlamaModel& model, KvCache& cache, std::span<const BatchToken> batch,
               const std::vector<bool>& wants_logits, std::vector<float>& logits, int threads) {
  ThreadTeam team(threads);
  return forward(model, cache, batch, wants_logits, logits, team);
}

}  // namespace slipway::llm
