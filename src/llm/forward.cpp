// The Llama forward pass over a batch of tokens from any sequences at any positions.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <thread>

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
  // See Scratch. Named through a reference: the team's threads would see their own thread_local.
  thread_local kernels::LlmInput kept_input;
  kernels::LlmInput& input = kept_input;
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

// One head's keys and values, block by block, where the cache holds them.
struct HeadBlocks {
  std::vector<kernels::KvBlock> keys, values;
};

void gather_blocks(const KvCache& cache, std::size_t sequence, std::size_t layer, std::size_t kv_head,
                   std::size_t blocks, HeadBlocks& out) {
  out.keys.resize(blocks);
  out.values.resize(blocks);
  for (std::size_t b = 0; b < blocks; ++b) {
    out.keys[b] = cache.head_keys(sequence, layer, b, kv_head);
    out.values[b] = cache.head_values(sequence, layer, b, kv_head);
  }
}

// Each block of a sequence lies elsewhere in the pool and one head reads only 4 KiB of it (F16),
// too little for the hardware prefetchers to find: a decoded token's attention waited on memory
// block by block. Its keys and values are asked for this many blocks before the scores reach
// them, so the values are in cache too when the weighted sum comes back for them.
constexpr std::size_t kPrefetchBlocks = 4;

void prefetch(const HeadBlocks& head_blocks, std::size_t block, std::size_t head_dim) {
  const kernels::KvBlock &keys = head_blocks.keys[block], &values = head_blocks.values[block];
  const std::size_t element_bytes = kernels::kv_element_bytes(keys.element);
  const std::size_t key_bytes = head_dim * kKvBlockTokens * element_bytes, row_bytes = head_dim * element_bytes;
  const auto* key_data = static_cast<const char*>(keys.data);
  for (std::size_t line = 0; line < key_bytes; line += 64) __builtin_prefetch(key_data + line);
  for (std::size_t i = 0; i < kKvBlockTokens; ++i) {
    const char* row = static_cast<const char*>(values.data) + i * values.stride * element_bytes;
    for (std::size_t line = 0; line < row_bytes; line += 64) __builtin_prefetch(row + line);
  }
}

// One head's attention for one tile of queries (`query`: the head's part of the tile's first
// query, the next query `width` floats on), into `out` (its rows of the attended values, as far
// apart). Each query's arithmetic is what it would be alone: its scores, its softmax, and its
// positions' values in order, the positions every query of the tile has first, then its own.
void attend(const LlamaConfig& config, const HeadBlocks& head_blocks, std::span<const BatchToken> batch, QueryTile tile,
            const float* query, std::size_t width, float* out) {
  const kernels::LlmKernelVariant& variant = kernels::llm_kernel();
  const BatchToken& first = batch[tile.first_token];
  const std::size_t shortest = first.position + 1, longest = shortest + tile.count - 1;
  const std::size_t blocks = (longest + kKvBlockTokens - 1) / kKvBlockTokens, row = blocks * kKvBlockTokens;
  // Each team thread's own, grown to the longest tile it has seen (four rows of the context at
  // most): no allocation per head and tile.
  thread_local std::vector<float> scores;
  if (scores.size() < tile.count * row) scores.resize(tile.count * row);
  for (std::size_t b = 0; b < std::min(blocks, kPrefetchBlocks); ++b) prefetch(head_blocks, b, config.head_dim);
  for (std::size_t b = 0; b < blocks; ++b) {
    if (b + kPrefetchBlocks < blocks) prefetch(head_blocks, b + kPrefetchBlocks, config.head_dim);
    variant.block_scores(query, width, tile.count, head_blocks.keys[b], config.head_dim,
                         scores.data() + b * kKvBlockTokens, row);
  }
  const float score_scale = 1.0f / std::sqrt(static_cast<float>(config.head_dim));
  for (std::size_t q = 0; q < tile.count; ++q) variant.softmax(scores.data() + q * row, shortest + q, score_scale);
  for (std::size_t q = 0; q < tile.count; ++q) std::fill_n(out + q * width, config.head_dim, 0.0f);
  for (std::size_t b = 0; b < blocks; ++b) {
    const kernels::KvBlock& values = head_blocks.values[b];
    const std::size_t start = b * kKvBlockTokens;
    auto in_block = [&](std::size_t positions) {
      return std::min(kKvBlockTokens, positions - std::min(positions, start));
    };
    const std::size_t shared = in_block(shortest);
    if (shared > 0) {
      variant.add_weighted_values(scores.data() + start, row, tile.count, shared, values, config.head_dim, out, width);
    }
    for (std::size_t q = 0; q < tile.count; ++q) {
      const std::size_t own = in_block(shortest + q);
      if (own > shared) {
        variant.add_weighted_values(scores.data() + q * row + start + shared, row, 1, own - shared,
                                    kernels::kv_block_from_row(values, shared), config.head_dim, out + q * width,
                                    width);
      }
    }
  }
}

static_assert(kKvBlockTokens == kernels::kAttentionBlock);

// What the ranks of a pass share: the batch's layout, the residual stream, each rank's partial
// output of the products split by column, and the logits.
struct Pass {
  const LlamaModel& model;
  KvCache& cache;
  std::span<const BatchToken> batch;
  std::vector<float> rotation;
  std::vector<QueryTile> tiles;
  std::vector<float>& x;                      // tokens x embedding
  std::vector<std::vector<float>>& partials;  // per rank, tokens x embedding
  std::vector<std::size_t> wanted;            // the tokens whose logits are wanted
  std::vector<float>& logits;                 // wanted x vocabulary
  // Returns once every rank has called it: true, or false once a rank has failed (stop).
  std::function<bool()> synchronize;
};

// x += every rank's partial, in rank order. Each rank adds its share of the tokens once every
// partial is complete, and reads x again only once every share is added. False: a rank failed.
bool all_reduce(Pass& pass, std::size_t rank, ThreadTeam& team) {
  if (!pass.synchronize()) return false;
  const std::size_t tokens = pass.batch.size(), ranks = pass.partials.size(), width = pass.model.config().embedding;
  const std::size_t first = tokens * rank / ranks, end = tokens * (rank + 1) / ranks;
  over_tokens(team, end - first, [&](std::size_t from, std::size_t count) {
    for (const std::vector<float>& partial : pass.partials) {
      for (std::size_t i = (first + from) * width; i < (first + from + count) * width; ++i) pass.x[i] += partial[i];
    }
  });
  return pass.synchronize();
}

// A pass's rows between its products, kept by each rank's thread from pass to pass at the largest
// batch it has run: a fresh allocation this size is fresh pages from the kernel, faulted in and
// zeroed on every step (a tenth of a batched decode step's time).
struct Scratch {
  std::vector<float> normed, query, key, value, attended, gate, up;
};

// One rank's share of the pass: its heads and hidden units of every layer, then its slice of the
// logits.
void run_rank(Pass& pass, const TensorParallelModel::Rank& rank, std::size_t rank_index, ThreadTeam& team) {
  const LlamaConfig& config = pass.model.config();
  const std::span<const BatchToken> batch = pass.batch;
  const std::size_t tokens = batch.size(), width = config.embedding, head_dim = config.head_dim;
  const std::size_t group = config.heads / config.kv_heads, pairs = config.rope_dims / 2;
  const std::size_t query_width = rank.heads.count * head_dim, kv_width = rank.kv_heads.count * head_dim;
  const std::vector<QueryTile>& tiles = pass.tiles;
  const kernels::LlmKernelVariant& variant = kernels::llm_kernel();
  std::vector<float>& x = pass.x;
  std::vector<float>& partial = pass.partials[rank_index];
  thread_local Scratch kept;  // named through references, as multiply's input is
  std::vector<float>& normed = kept.normed;
  std::vector<float>& query = kept.query;
  std::vector<float>& key = kept.key;
  std::vector<float>& value = kept.value;
  std::vector<float>& attended = kept.attended;
  std::vector<float>& gate = kept.gate;
  std::vector<float>& up = kept.up;
  normed.resize(tokens * width);
  attended.resize(tokens * query_width);
  for (std::size_t index = 0; index < config.layers; ++index) {
    const LlamaModel::Layer& norms = pass.model.layers()[index];
    const TensorParallelModel::Layer& layer = rank.layers[index];
    over_tokens(team, tokens, [&](std::size_t first, std::size_t count) {
      rms_norm(x.data() + first * width, count, norms.attention_norm, config.rms_epsilon,
               normed.data() + first * width);
    });
    multiply({{&layer.query, &query}, {&layer.key, &key}, {&layer.value, &value}}, normed, tokens, team);
    // Every key and value of the batch is stored before any token attends: a prompt's tokens see
    // each other (each only up to its own position).
    over_tokens(team, tokens, [&](std::size_t first, std::size_t count) {
      for (std::size_t t = first; t < first + count; ++t) {
        const float* rotation = pass.rotation.data() + t * pairs * 2;
        rotate(query.data() + t * query_width, rank.heads.count, config, rotation);
        rotate(key.data() + t * kv_width, rank.kv_heads.count, config, rotation);
        pass.cache.store(batch[t].sequence, index, batch[t].position, key.data() + t * kv_width,
                         value.data() + t * kv_width, rank.kv_heads);
      }
    });
    // Head by head, so one head's keys and values stay in cache while every tile reads them.
    team.run(rank.heads.count * tiles.size(), [&](std::size_t task) {
      const std::size_t head = task / tiles.size();  // the rank's own numbering
      const QueryTile& tile = tiles[task % tiles.size()];
      const BatchToken& first = batch[tile.first_token];
      thread_local HeadBlocks head_blocks;
      gather_blocks(pass.cache, first.sequence, index, (rank.heads.first + head) / group,
                    (first.position + tile.count + kKvBlockTokens - 1) / kKvBlockTokens, head_blocks);
      const std::size_t offset = tile.first_token * query_width + head * head_dim;
      attend(config, head_blocks, batch, tile, query.data() + offset, query_width, attended.data() + offset);
    });
    multiply({{&layer.attention_output, &partial}}, attended, tokens, team);
    if (!all_reduce(pass, rank_index, team)) return;
    over_tokens(team, tokens, [&](std::size_t first, std::size_t count) {
      rms_norm(x.data() + first * width, count, norms.ffn_norm, config.rms_epsilon, normed.data() + first * width);
    });
    multiply({{&layer.gate, &gate}, {&layer.up, &up}}, normed, tokens, team);
    const std::size_t hidden = rank.hidden.count;
    over_tokens(team, tokens, [&](std::size_t first, std::size_t count) {
      variant.silu_multiply(gate.data() + first * hidden, up.data() + first * hidden, count * hidden);
    });
    multiply({{&layer.down, &partial}}, gate, tokens, team);
    if (!all_reduce(pass, rank_index, team)) return;
  }
  // Only the rows that want logits go through the output matrix (a prompt wants its last).
  const std::size_t wanted = pass.wanted.size();
  if (wanted == 0) return;
  std::vector<float> last(wanted * width);
  for (std::size_t row = 0; row < wanted; ++row) {
    std::copy_n(x.begin() + static_cast<std::ptrdiff_t>(pass.wanted[row] * width), width,
                last.begin() + static_cast<std::ptrdiff_t>(row * width));
  }
  rms_norm(last.data(), wanted, pass.model.output_norm(), config.rms_epsilon, normed.data());
  if (rank.vocabulary.count == config.vocabulary) {
    multiply({{&rank.output, &pass.logits}}, normed, wanted, team);
    return;
  }
  std::vector<float> slice;
  multiply({{&rank.output, &slice}}, normed, wanted, team);
  for (std::size_t row = 0; row < wanted; ++row) {
    std::copy_n(slice.begin() + static_cast<std::ptrdiff_t>(row * rank.vocabulary.count), rank.vocabulary.count,
                pass.logits.begin() + static_cast<std::ptrdiff_t>(row * config.vocabulary + rank.vocabulary.first));
  }
}

// Checks the whole batch, prepares the cache, runs every rank (run_ranks(job) calls job(rank,
// team) for each) and advances the sequences' filled lengths.
template <typename RunRanks>
Status run_pass(const LlamaModel& model, std::span<const TensorParallelModel::Rank> ranks, KvCache& cache,
                std::span<const BatchToken> batch, const std::vector<bool>& wants_logits, std::vector<float>& logits,
                std::function<bool()> synchronize, const RunRanks& run_ranks) {
  const LlamaConfig& config = model.config();
  const std::size_t tokens = batch.size(), width = config.embedding;
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
  thread_local std::vector<float> residual;  // see Scratch
  thread_local std::vector<std::vector<float>> partials;
  residual.resize(tokens * width);
  partials.resize(ranks.size());
  Pass pass{model,    cache, batch,  rotations(batch, config), query_tiles(batch), residual,
            partials, {},    logits, std::move(synchronize)};
  for (std::size_t t = 0; t < tokens; ++t) {
    dequantize_row(model.token_embedding(), static_cast<std::size_t>(batch[t].token), pass.x.data() + t * width);
    if (wants_logits[t]) pass.wanted.push_back(t);
  }
  if (ranks.size() > 1) logits.resize(pass.wanted.size() * config.vocabulary);  // each rank writes its slice
  run_ranks([&](std::size_t rank, ThreadTeam& team) { run_rank(pass, ranks[rank], rank, team); });
  for (const auto& [sequence, writes] : reach) cache.set_filled(sequence, writes.end);
  return {};
}

}  // namespace

Status forward(const LlamaModel& model, KvCache& cache, std::span<const BatchToken> batch,
               const std::vector<bool>& wants_logits, std::vector<float>& logits, ThreadTeam& team) {
  const TensorParallelModel::Rank whole = TensorParallelModel::whole(model);
  return run_pass(
      model, std::span(&whole, 1), cache, batch, wants_logits, logits, [] { return true; },
      [&](const auto& job) { job(0, team); });
}

Status forward(const LlamaModel& model, KvCache& cache, std::span<const BatchToken> batch,
               const std::vector<bool>& wants_logits, std::vector<float>& logits, int threads) {
  ThreadTeam team(threads);
  return forward(model, cache, batch, wants_logits, logits, team);
}

Status forward(const TensorParallelModel& model, KvCache& cache, std::span<const BatchToken> batch,
               const std::vector<bool>& wants_logits, std::vector<float>& logits, RankTeams& teams) {
  if (teams.ranks() != model.ranks().size()) {
    return invalid_argument(
        fmt::format("a model split over {} ranks cannot run on {} rank teams", model.ranks().size(), teams.ranks()));
  }
  return run_pass(
      model.model(), model.ranks(), cache, batch, wants_logits, logits, [&] { return teams.synchronize(); },
      [&](const auto& job) { teams.run([&](std::size_t rank) { job(rank, teams.team(rank)); }); });
}

// ---------------------------------------------------------------------------------------------
// The ranks' threads.

namespace {

// The ranks wait for each other microseconds at a time, twice a layer: they spin, yielding now
// and then so a rank that shares a core with the waiter gets to finish.
template <typename Done>
void spin_until(const Done& done) {
  for (unsigned spins = 1; !done(); ++spins) {
    if (spins % 64 == 0) {
      std::this_thread::yield();
    } else {
      cpu_relax();
    }
  }
}

}  // namespace

struct RankTeams::State {
  std::vector<std::unique_ptr<ThreadTeam>> teams;
  std::vector<std::thread> threads;  // ranks 1 and up
  std::mutex mutex;
  std::condition_variable wake;
  std::uint64_t generation = 0;  // a new run's, under the mutex
  bool stopping = false;
  const std::function<void(std::size_t)>* job = nullptr;
  std::atomic<std::size_t> finished{0};
  // synchronize()'s barrier: the ranks still to arrive, and the phase they wait to see change.
  std::atomic<std::size_t> arriving{0};
  std::atomic<std::uint64_t> phase{0};
  // A rank whose job threw: the others leave their barriers and jobs, and run() rethrows it.
  std::atomic<bool> failed{false};
  std::exception_ptr failure;  // the first, under the mutex

  // Runs the job for `rank`, keeping what it throws.
  void run_job(const std::function<void(std::size_t)>& current, std::size_t rank) {
    try {
      current(rank);
    } catch (...) {
      std::lock_guard lock(mutex);
      if (!failure) failure = std::current_exception();
      failed.store(true, std::memory_order_release);
    }
  }

  void serve(std::size_t rank) {
    std::uint64_t seen = 0;
    while (true) {
      const std::function<void(std::size_t)>* current = nullptr;
      {
        std::unique_lock lock(mutex);
        wake.wait(lock, [&] { return stopping || generation != seen; });
        if (stopping) return;
        seen = generation;
        current = job;
      }
      run_job(*current, rank);
      finished.fetch_add(1, std::memory_order_acq_rel);
    }
  }

  void stop() {
    {
      std::lock_guard lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    for (std::thread& thread : threads) thread.join();
  }
};

RankTeams::RankTeams(std::size_t ranks, int threads) : state_(std::make_unique<State>()) {
  ranks = std::max<std::size_t>(1, ranks);
  const std::size_t total = threads > 0 ? static_cast<std::size_t>(threads) : default_thread_count();
  for (std::size_t rank = 0; rank < ranks; ++rank) {
    const std::size_t share = total / ranks + (rank < total % ranks ? 1 : 0);
    state_->teams.push_back(std::make_unique<ThreadTeam>(static_cast<int>(std::max<std::size_t>(1, share))));
  }
  try {
    for (std::size_t rank = 1; rank < ranks; ++rank) {
      state_->threads.emplace_back([state = state_.get(), rank] { state->serve(rank); });
    }
  } catch (...) {  // a rank cannot run without its thread: none run
    state_->stop();
    throw;
  }
}

RankTeams::~RankTeams() { state_->stop(); }

std::size_t RankTeams::ranks() const { return state_->teams.size(); }

ThreadTeam& RankTeams::team(std::size_t rank) { return *state_->teams[rank]; }

void RankTeams::run(const std::function<void(std::size_t)>& job) {
  State& state = *state_;
  if (state.threads.empty()) return job(0);
  state.finished.store(0, std::memory_order_relaxed);
  state.arriving.store(state.teams.size(), std::memory_order_relaxed);
  state.failed.store(false, std::memory_order_relaxed);
  {
    std::lock_guard lock(state.mutex);  // publishes the stores above to the ranks it wakes
    state.failure = nullptr;
    state.job = &job;
    ++state.generation;
  }
  state.wake.notify_all();
  state.run_job(job, 0);
  spin_until([&] { return state.finished.load(std::memory_order_acquire) == state.threads.size(); });
  if (state.failure) std::rethrow_exception(state.failure);
}

bool RankTeams::synchronize() {
  State& state = *state_;
  if (state.threads.empty()) return true;
  const std::uint64_t phase = state.phase.load(std::memory_order_acquire);
  if (state.arriving.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    state.arriving.store(state.teams.size(), std::memory_order_relaxed);
    state.phase.store(phase + 1, std::memory_order_release);
    return !state.failed.load(std::memory_order_acquire);
  }
  spin_until([&] {
    return state.phase.load(std::memory_order_acquire) != phase || state.failed.load(std::memory_order_acquire);
  });
  return !state.failed.load(std::memory_order_acquire);
}

}  // namespace slipway::llm
