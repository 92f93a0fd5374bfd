// The LLM engine's files: GGUF (ggml's model format, version 3), read from a mapping and
// written, with every metadata value type and the tensor types the engine knows the sizes of.
// The Llama forward pass, tokenizers and sampling build on it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "slipway/core.h"
#include "slipway/kernels.h"

namespace slipway::llm {

// ---------------------------------------------------------------------------------------------
// Metadata values.

enum class GgufValueType : std::uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
// "u8", "i32", "f32", "string", "array", ...; "type N" for a number that is none of them.
std::string gguf_value_type_name(GgufValueType type);

// One metadata value. Integers keep their type and are read through the accessors, which convert
// when the value fits (a count written as u32 or u64 reads the same); arrays hold elements of one
// type, arrays of arrays included.
class GgufValue {
 public:
  GgufValue() = default;
  static GgufValue unsigned_integer(GgufValueType type, std::uint64_t value);
  static GgufValue signed_integer(GgufValueType type, std::int64_t value);
  static GgufValue real(GgufValueType type, double value);  // kFloat32 or kFloat64
  static GgufValue boolean(bool value);
  static GgufValue string(std::string value);
  static GgufValue array(GgufValueType element_type, std::vector<GgufValue> elements);
  // Shorthands for what converters write: u32, i32, f32, strings and arrays of them.
  static GgufValue u32(std::uint32_t value) { return unsigned_integer(GgufValueType::kUint32, value); }
  static GgufValue f32(float value) { return real(GgufValueType::kFloat32, value); }
  static GgufValue strings(const std::vector<std::string>& values);
  static GgufValue f32s(std::span<const float> values);
  static GgufValue i32s(std::span<const std::int32_t> values);

  GgufValueType type() const { return type_; }
  GgufValueType element_type() const { return element_type_; }  // arrays only
  bool is_integer() const;
  // The value when it is an integer that fits; nullopt otherwise.
  std::optional<std::uint64_t> as_unsigned() const;
  std::optional<std::int64_t> as_signed() const;
  std::optional<double> as_real() const;  // floats, and integers
  std::optional<bool> as_bool() const;
  const std::string* as_string() const;            // strings only
  const std::vector<GgufValue>* as_array() const;  // arrays only
  bool operator==(const GgufValue& other) const = default;

 private:
  GgufValueType type_ = GgufValueType::kUint8;
  GgufValueType element_type_ = GgufValueType::kUint8;
  std::uint64_t bits_ = 0;  // integers (two's complement for signed ones), bool
  double real_ = 0;
  std::string text_;
  std::vector<GgufValue> elements_;
};

// ---------------------------------------------------------------------------------------------
// Tensors.

// ggml's tensor type numbers, named as ggml names them (Q4_0, Q4_K), which is how users know them.
// NOLINTBEGIN(readability-identifier-naming)
enum class TensorType : std::uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
};
// NOLINTEND(readability-identifier-naming)

// A block of `block_elements` values takes `block_bytes` bytes (1 and the element size for the
// plain types); a row's first dimension must be a whole number of blocks.
struct TensorTypeInfo {
  std::string_view name;  // "F32", "Q8_0", "Q4_K", ...
  std::size_t block_elements = 1;
  std::size_t block_bytes = 0;
};
// nullptr for a type number this engine does not know.
const TensorTypeInfo* tensor_type_info(TensorType type);
// The type by name, case-insensitive ("q8_0", "F16"); false when there is none.
bool tensor_type_by_name(std::string_view name, TensorType& type);

struct GgufTensor {
  std::string name;
  std::vector<std::uint64_t> dims;  // ne[0] first: the contiguous dimension
  TensorType type = TensorType::kF32;
  std::uint64_t offset = 0;  // from the start of the tensor data
  std::uint64_t bytes = 0;
  std::uint64_t elements() const;
};

// ---------------------------------------------------------------------------------------------
// Reading.

// A GGUF file, parsed from its header, metadata and tensor infos; tensor data is read in place
// (from the mapping of a file, or the bytes given). Every size, offset and count is checked
// against the bytes there are before it is used: a hostile or truncated file is an error naming
// what is wrong, never a read past the end. Memory is bounded by the file's size and, for
// metadata arrays, by a total of 2^22 elements.
class GgufFile {
 public:
  // Maps the file.
  static Result<GgufFile> open(const std::string& path);
  // Parses bytes the caller keeps alive as long as the result (tests, fuzzing).
  static Result<GgufFile> parse(std::span<const std::byte> bytes, const std::string& source);

  std::uint32_t version() const { return version_; }
  std::uint64_t alignment() const { return alignment_; }
  // Key/value pairs in file order; keys are unique.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;
  // A required key of the type wanted, or an error naming the key and what was found.
  Result<std::uint64_t> require_unsigned(std::string_view key) const;
  Result<double> require_real(std::string_view key) const;
  Result<std::string> require_string(std::string_view key) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* tensor(std::string_view name) const;
  // The tensor's bytes, in the mapping.
  std::span<const std::byte> data(const GgufTensor& tensor) const;
  const std::string& source() const { return source_; }

 private:
  std::shared_ptr<MappedFile> mapping_;  // empty when parsed from the caller's bytes
  std::span<const std::byte> bytes_;
  std::string source_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32;
  std::uint64_t data_start_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<GgufTensor> tensors_;
};

// Limits a file must keep (the format's own, and bounds on what a reader allocates).
inline constexpr std::uint64_t kGgufDefaultAlignment = 32;
inline constexpr std::size_t kGgufMaxTensorNameBytes = 63;  // ggml's 64 with its terminating NUL
inline constexpr std::size_t kGgufMaxKeyBytes = 65535;
inline constexpr std::uint32_t kGgufMaxDims = 4;
inline constexpr std::uint32_t kGgufMaxArrayDepth = 8;

// ---------------------------------------------------------------------------------------------
// Writing.

// Collects metadata and tensors, then writes a GGUF v3 file (a temporary file renamed into
// place, so a reader never sees half of one). Tensor data is padded to `general.alignment` (32
// unless set: a u32 power of two, at least 8). Keys must be 1 to 65,535 bytes and array elements
// of their array's type.
class GgufWriter {
 public:
  // Adds or replaces a key (the order of first addition is kept).
  void set(const std::string& key, GgufValue value);
  // `data` must hold exactly the bytes the type and dims imply.
  Status add_tensor(std::string name, std::vector<std::uint64_t> dims, TensorType type, std::vector<std::byte> data);
  Status write(const std::string& path) const;
  // The file's bytes (tests).
  Result<std::string> serialize() const;

 private:
  struct Pending {
    GgufTensor info;
    std::vector<std::byte> data;
  };
  std::uint64_t alignment() const;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<Pending> tensors_;
};

// The bytes a tensor of `type` and `dims` takes; InvalidArgument when ne[0] is not a whole
// number of blocks, a type is unknown, or the size overflows.
Result<std::uint64_t> tensor_bytes(TensorType type, std::span<const std::uint64_t> dims);

// `values` (whole rows of whole blocks) in `type`'s bytes: F32, F16, BF16, Q8_0, Q4_0 or Q4_K
// (ggml's reference quantizers for Q8_0 and Q4_0; see kernels.h for Q4_K).
Result<std::vector<std::byte>> encode_tensor(std::span<const float> values, TensorType type);
// ggml's general.file_type for a model whose matrices are all `type` (Q4_K: 15, Q4_K_M's number).
std::uint32_t gguf_file_type(TensorType type);

// Rewrites a GGUF model with its matrices (the 2-D `.weight` tensors) in `type` (Q8_0, Q4_0 or
// Q4_K; F16 and BF16 too): each row dequantized and quantized again, a matrix whose rows are not
// whole blocks of `type` kept as it is (Q8_0 when those fit); norms and every metadata key
// copied, general.file_type set. `progress` is told the bytes of matrices done and in all.
Status quantize_model(const std::string& in, const std::string& out, TensorType type,
                      const std::function<void(std::uint64_t done, std::uint64_t total)>& progress = {});

// ---------------------------------------------------------------------------------------------
// The Llama architecture.

struct LlamaConfig {
  std::size_t embedding = 0;     // llama.embedding_length
  std::size_t layers = 0;        // llama.block_count
  std::size_t heads = 0;         // llama.attention.head_count
  std::size_t kv_heads = 0;      // llama.attention.head_count_kv (grouped-query attention), else heads
  std::size_t feed_forward = 0;  // llama.feed_forward_length
  std::size_t vocabulary = 0;    // the token embedding's rows
  std::size_t context = 0;       // llama.context_length
  std::size_t head_dim = 0;      // embedding / heads
  std::size_t rope_dims = 0;     // llama.rope.dimension_count (the rotated part of each head)
  float rope_base = 10000.0f;    // llama.rope.freq_base
  float rms_epsilon = 1e-5f;     // llama.attention.layer_norm_rms_epsilon
};
// The architecture's keys from a file; anything but `llama` is refused by name, as are shapes
// that do not fit together (heads not dividing the width, kv_heads not dividing heads, ...).
Result<LlamaConfig> read_llama_config(const GgufFile& file);

// A weight matrix in the file's bytes: `rows` rows of `columns` values of `type` (a tensor of
// dims [columns, rows]); row r computes output r from an input of `columns` values.
// The matrices a forward pass multiplies also hold their rows repacked for the kernels (the
// token embedding, read a row at a time, keeps only the file's bytes).
struct WeightMatrix {
  TensorType type = TensorType::kF32;
  std::size_t rows = 0, columns = 0;
  std::span<const std::byte> data;
  std::shared_ptr<const kernels::LlmPackedMatrix> packed;
  std::size_t row_bytes() const;
};
// Row `row` of a matrix as floats (F32, F16, BF16, Q8_0, Q4_0, Q4_K).
void dequantize_row(const WeightMatrix& matrix, std::size_t row, float* out);
// The types a Llama's matrices may have.
bool supported_weight_type(TensorType type);

// A Llama model over a mapped GGUF file: the config and every weight, in place.
class LlamaModel {
 public:
  struct Layer {
    std::span<const float> attention_norm, ffn_norm;
    WeightMatrix query, key, value, attention_output, gate, up, down;
  };
  static Result<std::shared_ptr<const LlamaModel>> open(const std::string& path);
  static Result<std::shared_ptr<const LlamaModel>> from_file(GgufFile file);

  const LlamaConfig& config() const { return config_; }
  const GgufFile& file() const { return file_; }
  const WeightMatrix& token_embedding() const { return token_embedding_; }
  const WeightMatrix& output() const { return output_; }  // token_embedding when tied
  std::span<const float> output_norm() const { return output_norm_; }
  const std::vector<Layer>& layers() const { return layers_; }

 private:
  GgufFile file_;
  LlamaConfig config_;
  WeightMatrix token_embedding_, output_;
  std::span<const float> output_norm_;
  std::vector<Layer> layers_;
};

// Where keys and values live: a pool of blocks of kKvBlockTokens positions, preallocated, that
// sequences take as they grow (vLLM's PagedAttention). Each sequence has a block table (its
// blocks in position order); blocks carry reference counts, so sequences can share them: a fork
// (`n` > 1 choices of one prompt) shares its parent's blocks, and the first write into a shared
// block copies it (copy on write). With prefix caching, a whole block is known by a hash chained
// over its tokens and its parent block's hash (and a salt, so tenants never share): a sequence
// whose prompt starts with cached blocks takes them instead of computing them again. Blocks
// nobody holds stay cached until the pool needs them, the least recently released first (a
// sequence's last block before its first, as vLLM, since longer prefixes are shared less).
//
// A block holds, per layer, its positions' keys transposed ([kv_heads * head_dim][kKvBlockTokens],
// so one query's scores against the block are a vector sum) and their values in position order
// ([kKvBlockTokens][kv_heads * head_dim]).
inline constexpr std::size_t kKvBlockTokens = 16;

// How keys and values are kept: as floats; as halves (IEEE binary16, rounded to nearest, llama.cpp's
// and vLLM's default), half the bytes; or as 8-bit codes with one float scale per head and
// position, 3.8 times smaller than floats at a head size of 64: int8 (each head's vector
// quantized symmetrically: scale = max |x| / 127, an even step) or FP8 E4M3 (scale = max |x| /
// 448, then rounded to E4M3: 4 significant bits at every magnitude, so small values keep their
// relative precision where int8's even step flattens them). Attention reads every type in place,
// widening to floats in registers.
enum class KvCacheType { kF32, kF16, kInt8, kFp8E4M3 };
std::string_view kv_cache_type_name(KvCacheType type);  // "f32", "f16", "int8", "fp8_e4m3"
// Also "auto" (f16) and "fp8" (E4M3), as vLLM's kv_cache_dtype.
bool kv_cache_type_by_name(std::string_view name, KvCacheType& type);
// int8 and FP8 E4M3: 8-bit codes, with a scale per head and position.
bool kv_cache_type_is_8_bit(KvCacheType type);

// A run of heads, units or rows: [first, first + count).
struct TensorSlice {
  std::size_t first = 0, count = 0;
};

class KvCache {
 public:
  // A pool of `blocks` blocks for `config`'s layers and heads, for sequences numbered below
  // `max_sequences`.
  KvCache(const LlamaConfig& config, std::size_t blocks, std::size_t max_sequences = 4096,
          KvCacheType type = KvCacheType::kF16);
  // The bytes one block takes for `config`.
  static std::uint64_t block_bytes(const LlamaConfig& config, KvCacheType type = KvCacheType::kF16);
  KvCacheType type() const { return type_; }

  // Room to write positions [first, end) of `sequence` (new sequences start empty): blocks
  // appended up to `end`, taken from the free ones (evicting the least recently used cached
  // block when none is free otherwise), and each block holding a position in [first, end) made
  // the sequence's own: copied when shared, forgotten by the prefix cache when cached (its
  // contents change). ResourceExhausted when the pool has too few blocks (blocks appended before
  // stay with the sequence); InvalidArgument for a sequence past max_sequences.
  Status prepare(std::size_t sequence, std::size_t first, std::size_t end);
  // prepare(sequence, filled(sequence), length).
  Status reserve(std::size_t sequence, std::size_t length);
  // Drops the sequence's hold on its blocks; it starts empty again.
  void release(std::size_t sequence);
  // `child` (which must be empty) shares every block of `parent` and its filled length.
  Status fork(std::size_t parent, std::size_t child);
  // The blocks a sequence of `length` positions would take that the pool cannot give now.
  std::size_t blocks_short(std::size_t sequence, std::size_t length) const;

  // Prefix caching. Gives the empty `sequence` the cached blocks holding the longest run of whole
  // blocks at the start of `tokens` under `salt`, at most `limit` positions' worth, and sets its
  // filled length to what they hold (returned).
  std::size_t attach_cached_prefix(std::size_t sequence, std::span<const std::int32_t> tokens, std::uint64_t salt,
                                   std::size_t limit);
  // Makes the sequence's whole filled blocks (positions [0, filled) holding `tokens`' first
  // ones) findable by attach_cached_prefix under `salt`. Blocks already cached stay as they are.
  void publish(std::size_t sequence, std::span<const std::int32_t> tokens, std::uint64_t salt);

  // Positions [0, filled) of `sequence` hold keys and values (forward() advances it).
  std::size_t filled(std::size_t sequence) const;
  void set_filled(std::size_t sequence, std::size_t filled);
  // Writes a position's key and value (kv_heads * head_dim floats each); the position must be
  // prepared.
  void store(std::size_t sequence, std::size_t layer, std::size_t position, const float* key, const float* value);
  // The same for kv heads [heads.first, heads.first + heads.count) only: `key` and `value` hold
  // those heads (a tensor-parallel rank stores its own).
  void store(std::size_t sequence, std::size_t layer, std::size_t position, const float* key, const float* value,
             TensorSlice heads);
  // One key/value head of the sequence's `block`th block, where it lies: its keys [head_dim]
  // [kKvBlockTokens], and its values [kKvBlockTokens] rows.
  kernels::KvBlock head_keys(std::size_t sequence, std::size_t layer, std::size_t block, std::size_t kv_head) const;
  kernels::KvBlock head_values(std::size_t sequence, std::size_t layer, std::size_t block, std::size_t kv_head) const;

  std::size_t total_blocks() const { return references_.size(); }
  // Blocks no sequence holds (cached ones included, which are evicted as needed).
  std::size_t free_blocks() const { return free_count_; }
  // Blocks findable by their hash (held or not).
  std::size_t cached_blocks() const { return by_hash_.size(); }
  std::size_t blocks_of(std::size_t sequence) const;

 private:
  static constexpr std::size_t kNone = SIZE_MAX;
  struct Cached {  // what a cached block holds, checked on every hit so a hash collision is a miss
    std::uint64_t hash = 0;
    std::size_t parent = kNone;  // the block before it in its chain
    std::array<std::int32_t, kKvBlockTokens> tokens{};
    bool valid = false;
  };
  // A block's layer: keys, then values (floats, halves or 8-bit codes), then for the 8-bit types
  // the keys' scales [kv_heads][kKvBlockTokens] and the values' [kKvBlockTokens][kv_heads].
  std::byte* layer_data(std::size_t block, std::size_t layer);
  const std::byte* layer_data(std::size_t block, std::size_t layer) const;
  std::size_t take_block();          // from the free list's head, evicting it from the cache
  void put_back(std::size_t block);  // the free list's tail when cached, its head when not
  void unlink(std::size_t block);    // out of the free list
  void forget(std::size_t block);    // out of the prefix cache
  void hold(std::size_t block);      // one more reference, out of the free list at the first
  void drop(std::size_t block);      // one fewer, back on the free list at the last
  std::vector<std::size_t>& table(std::size_t sequence);

  KvCacheType type_ = KvCacheType::kF16;
  std::size_t width_ = 0, layers_ = 0, kv_heads_ = 0, head_dim_ = 0, layer_bytes_ = 0, block_bytes_ = 0;
  HugePageBuffer storage_;  // [block][layer]
  std::size_t max_sequences_ = 0;
  std::vector<std::uint32_t> references_;     // per block
  std::vector<std::size_t> previous_, next_;  // the free list: per block, kNone at the ends
  std::size_t head_ = kNone, tail_ = kNone, free_count_ = 0;
  std::vector<Cached> cached_;  // per block
  std::unordered_map<std::uint64_t, std::size_t> by_hash_;
  struct Chain {  // how far a sequence's blocks are published, and the chain's end
    std::size_t blocks = 0;
    std::uint64_t hash = 0;
    std::size_t parent = kNone;
  };
  std::vector<std::vector<std::size_t>> tables_;  // per sequence, its blocks in order
  std::vector<std::size_t> filled_;               // per sequence
  std::vector<Chain> chains_;                     // per sequence
};

// One token to run: `token` of sequence `sequence` at `position` (its keys and values for the
// positions before it are already in the cache, or earlier in the same batch).
struct BatchToken {
  std::size_t sequence = 0;
  std::size_t position = 0;
  std::int32_t token = 0;
};

// Runs the tokens through the model, storing their keys and values, and writes the logits of
// each token whose `wants_logits` entry is true (vocabulary floats each, in order) to `logits`.
// A sequence's tokens must come in position order and continue it: each position at most the
// sequence's filled length so far (re-running earlier positions overwrites them), never leaving a
// gap whose keys another sequence may have left in a recycled block. The whole batch is checked
// before anything runs; on an error the cache is as it was, but for blocks reserved. The work is
// split over the team's threads; the results do not depend on how many.
Status forward(const LlamaModel& model, KvCache& cache, std::span<const BatchToken> batch,
               const std::vector<bool>& wants_logits, std::vector<float>& logits, ThreadTeam& team);
// The same on a team of `threads` (0: all cores) started for this one call: for a run of calls,
// keep a team.
Status forward(const LlamaModel& model, KvCache& cache, std::span<const BatchToken> batch,
               const std::vector<bool>& wants_logits, std::vector<float>& logits, int threads = 0);

// Tensor parallelism, as Megatron-LM splits a layer: the pass runs as `ranks` workers, each
// holding a slice of every layer. A rank has a run of whole key/value head groups (their query,
// key and value rows, and the matching columns of the attention's output matrix) and a run of the
// feed-forward's hidden units (their gate and up rows, and the matching columns of down), so it
// computes its heads' attention and its units' activations alone. The two matrices split by
// column each give a partial sum of the layer's output; the ranks add them (an all-reduce) after
// the attention and after the feed-forward, the only exchanges in a layer. The output matrix is
// split by vocabulary rows, each rank writing its slice of the logits. On a CPU the ranks are
// groups of threads; on several GPUs each rank would be a device holding its shard, and the
// all-reduce NCCL's (docs/architecture.md).
class TensorParallelModel {
 public:
  struct Layer {
    WeightMatrix query, key, value, attention_output, gate, up, down;
  };
  struct Rank {
    TensorSlice heads, kv_heads, hidden, vocabulary;
    std::vector<Layer> layers;  // a column slice's matrix keeps only its packed rows (empty `data`)
    WeightMatrix output;
  };
  // The model split over `ranks` ranks, each as even as the shapes allow: the attention's and
  // down's column splits must fall on their formats' block boundaries (a Q4_K super-block is 256
  // columns), so a rank's share is a whole number of such units. A split the shapes do not allow
  // is refused with the reason. One rank is the model as it is (its matrices shared, not copied).
  static Result<std::shared_ptr<const TensorParallelModel>> split(std::shared_ptr<const LlamaModel> model,
                                                                  std::size_t ranks);
  // The single rank of an unsplit pass.
  static Rank whole(const LlamaModel& model);

  const LlamaModel& model() const { return *model_; }
  const std::shared_ptr<const LlamaModel>& shared_model() const { return model_; }
  const std::vector<Rank>& ranks() const { return ranks_; }
  // The bytes of the shards' packed matrices (0 for one rank, which shares the model's).
  std::uint64_t shard_bytes() const { return shard_bytes_; }

 private:
  std::shared_ptr<const LlamaModel> model_;
  std::vector<Rank> ranks_;
  std::uint64_t shard_bytes_ = 0;
};

// The threads of a tensor-parallel pass: one ThreadTeam per rank, `threads` (0: all cores) shared
// among them as evenly as they go, each rank at least one. Rank 0 runs on the caller's thread,
// the others on threads of their own.
class RankTeams {
 public:
  RankTeams(std::size_t ranks, int threads);
  ~RankTeams();
  RankTeams(const RankTeams&) = delete;
  RankTeams& operator=(const RankTeams&) = delete;

  std::size_t ranks() const;
  ThreadTeam& team(std::size_t rank);
  // Runs job(rank) for every rank at once and returns when all have finished. One thread calls
  // run() at a time. What a job throws is rethrown here, once every rank has stopped.
  void run(const std::function<void(std::size_t rank)>& job);
  // Called by every rank's job the same number of times: returns true once all ranks have reached
  // it, or false as soon as a rank's job has thrown (the job should then return).
  bool synchronize();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// forward() over a split model, its ranks on `teams` (as many as the model has). The logits are
// the unsplit pass's but for the order of the all-reduce's float additions.
Status forward(const TensorParallelModel& model, KvCache& cache, std::span<const BatchToken> batch,
               const std::vector<bool>& wants_logits, std::vector<float>& logits, RankTeams& teams);

// ---------------------------------------------------------------------------------------------
// Tokenizers and chat templates, from a GGUF file's tokenizer.* keys.

// SentencePiece-style (`tokenizer.ggml.model` = "llama": scores, byte fallback, "▁" for spaces)
// or byte-level BPE ("gpt2": merges, GPT-2's byte-to-unicode map and pre-tokenization). Both
// give llama.cpp's tokens (its llm_tokenizer_spm and llm_tokenizer_bpe, checked against it in
// tests/llm/tokenizer_test.cpp); "gpt2" splits words as tokenizer.ggml.pre says: GPT-2's regex
// ("gpt-2", and when the key is absent), Llama-3's ("llama-bpe", ...) or Qwen2's ("qwen2"); other
// pre-tokenizers are refused. Immutable once made, so any thread may call it; copies share data.
// A default-constructed Tokenizer has no tokens: encode gives none, decode nothing.
class Tokenizer {
 public:
  // The tokenizer a file describes; InvalidArgument naming what is missing or malformed (an
  // unknown model, tokens and scores of different lengths, a special token id out of range, ...).
  static Result<Tokenizer> from_gguf(const GgufFile& file);

  // The text's tokens, BOS first when `add_special` is set and the file's add_bos_token says so
  // (true for "llama" when absent), EOS last when add_eos_token says so. Control tokens' text
  // ("<s>", "<|im_end|>") in `text` is matched as those tokens only when `parse_special` is set;
  // otherwise it is ordinary text. User-defined tokens (type 4) are always matched, as llama.cpp
  // and Hugging Face do. Any bytes encode, invalid UTF-8 included, and decode back unchanged
  // without parse_special (but for "▁" itself, which SentencePiece reads as a space).
  std::vector<std::int32_t> encode(std::string_view text, bool add_special = true, bool parse_special = false) const;
  // The tokens' text; control and unknown tokens (BOS, EOS, <unk>) give nothing unless
  // `render_special` is set, ids outside the vocabulary nothing at all. Byte tokens join into
  // UTF-8. SentencePiece's leading space ("▁" that encode put before the text) is dropped from the
  // first piece, or from the one after a leading BOS when the BOS is not rendered, so
  // decode(encode(text)) == text; llama.cpp drops it only from the very first piece. To continue
  // text (a completion after its prompt), join piece()s instead.
  std::string decode(std::span<const std::int32_t> tokens, bool render_special = false) const;
  // One token's bytes as decode adds them mid-text ("▁" as a space, a byte token as its byte,
  // which alone may be part of a UTF-8 character): what a stream sends token by token.
  std::string piece(std::int32_t token, bool render_special = false) const;

  std::size_t size() const;
  std::string_view model() const;  // "llama" or "gpt2"
  // -1 when there is none (a "llama" file that names none gets llama.cpp's defaults, 1 and 2).
  std::int32_t bos() const;
  std::int32_t eos() const;
  bool adds_bos() const;  // whether encode(text, add_special = true) puts BOS first
  // EOS, and the end-of-turn tokens chat models stop at (tokenizer.ggml.eot_token_id and
  // eom_token_id, <|eot_id|>, <|im_end|>, <|end|>, ...: llama.cpp's list) when the vocabulary has them.
  bool ends_generation(std::int32_t token) const;
  // The token whose text is exactly `text`, or -1.
  std::int32_t find(std::string_view text) const;

 private:
  struct Data;
  const Data& data() const;  // data_, or an empty vocabulary when default-constructed
  std::shared_ptr<const Data> data_;
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" (others as the template allows)
  std::string content;
};
// The prompt for `messages` in the model's chat format, chosen from the file's
// tokenizer.chat_template by its shape (Jinja is not run; the formats are written out in
// src/llm/chat_template.cpp as their reference templates render them): Llama-2 ("[INST]" with
// "<<SYS>>"), Llama-3 ("<|start_header_id|>"), ChatML ("<|im_start|>"), or, with no template in the
// file, ChatML when the vocabulary has <|im_start|> and Llama-2 otherwise. `template_name`
// ("llama2", "llama3", "chatml") overrides the file (InvalidArgument for another name).
// FailedPrecondition for a template of another shape (Mistral's, Gemma's, ...), naming its first
// characters; InvalidArgument for no messages, or a role the format has no place for (Llama-2:
// an optional first system message, then user and assistant alternating; Llama-3 and ChatML:
// system, user, assistant, tool, and Llama-3's ipython). Ends with the assistant's header when
// `add_generation_prompt` (Llama-2 has none: the model answers after "[/INST]"). The BOS a format
// starts with is text in the result ("<s>", "<|begin_of_text|>"; ChatML's when the tokenizer adds
// one), so encode it with add_special = false and parse_special = true.
Result<std::string> render_chat(const GgufFile& file, const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                                bool add_generation_prompt = true, std::string_view template_name = {});

// ---------------------------------------------------------------------------------------------
// Sampling: the next token from a step's logits.

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy (the largest logit; the lowest token id on a tie)
  std::size_t top_k = 0;     // keep the k likeliest tokens; 0: all
  float top_p = 1.0f;        // keep the likeliest tokens whose probabilities reach p
  float min_p = 0.0f;        // drop tokens less likely than min_p times the likeliest
  // Over the last kPenaltyWindow tokens (prompt and generated): a repeated token's logit is
  // divided by repetition_penalty when positive and multiplied when negative (CTRL's, and
  // llama.cpp's), then lowered by presence_penalty once and frequency_penalty per occurrence
  // (OpenAI's).
  float repetition_penalty = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;
  std::optional<std::uint64_t> seed;                       // the same seed and request give the same tokens
  std::vector<std::pair<std::int32_t, float>> logit_bias;  // added to those tokens' logits first
  // Each token's log-probability computed (a log-softmax over the vocabulary per token, a few
  // percent of a batched step's time: asked for, not paid by default); top_logprobs > 0 implies it.
  bool logprobs = false;
  std::size_t top_logprobs = 0;  // alternatives reported per token (at most 20)
};
inline constexpr std::size_t kPenaltyWindow = 64;
inline constexpr std::size_t kMaxTopLogprobs = 20;
// InvalidArgument naming the parameter out of range (temperature in [0, 2] as OpenAI's, top_p in
// (0, 1], min_p in [0, 1], penalties in [-2, 2] and repetition in (0, 10], top_logprobs <= 20).
Status validate(const SamplingParams& params);

struct TokenChoice {
  std::int32_t token = 0;
  // Log-probability under the model's distribution after penalties (no temperature); -inf when no
  // logit is finite; NaN when SamplingParams::logprobs was not asked.
  float logprob = 0;
};
struct SampledToken {
  TokenChoice chosen;
  std::vector<TokenChoice> top;  // top_logprobs alternatives, likeliest first
};

// A distribution sampling draws from: the tokens it may choose, in token order, with their
// probabilities (summing to 1).
struct TokenDistribution {
  std::vector<std::int32_t> tokens;
  std::vector<double> probabilities;
  double probability(std::int32_t token) const;  // 0 for a token not in it
  std::int32_t draw(double uniform) const;       // by a draw in [0, 1)
};

// Speculative sampling's rule for one drafted token (Leviathan et al., arXiv 2211.17192): accepted
// with probability min(1, p(x) / q(x)), else replaced by a token drawn from norm(max(0, p - q)).
// With p the target's distribution and q the draft's (one-hot for a deterministic drafter), the
// token that comes out is distributed as p exactly. `uniform` gives draws in [0, 1).
struct DraftVerdict {
  bool accepted = false;
  std::int32_t token = 0;  // the drafted token, or its replacement
};
DraftVerdict judge_draft(const TokenDistribution& target, const TokenDistribution& draft, std::int32_t drafted,
                         const std::function<double()>& uniform);

// Prompt lookup (n-gram speculation): the latest earlier occurrence of the last n tokens (n from
// max_match down to min_match), and up to `count` tokens that followed it; none when no n matches.
std::vector<std::int32_t> propose_ngram(std::span<const std::int32_t> tokens, std::size_t min_match,
                                        std::size_t max_match, std::size_t count);

// Steps: penalties, then greedy or (temperature, top-k, top-p, min-p, a draw). Applied in place to
// the logits (one step's, vocabulary floats). Not-finite logits are never chosen unless all are.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  SampledToken sample(std::span<float> logits, std::span<const std::int32_t> history);
  // The distribution sample() draws from (greedy: all on the largest logit), and a draw from one.
  TokenDistribution distribution(std::span<float> logits, std::span<const std::int32_t> history);
  std::int32_t draw(const TokenDistribution& distribution);
  // The token at a position whose `drafted` token was proposed (by a draft model whose
  // distribution there was `draft`, or by a deterministic drafter when null): greedy, the largest
  // logit, `accepted` when that is the drafted token; sampled, judge_draft's rule.
  SampledToken judge(std::span<float> logits, std::span<const std::int32_t> history, std::int32_t drafted,
                     const TokenDistribution* draft, bool& accepted);
  bool greedy() const { return params_.temperature == 0.0f; }

 private:
  void apply_penalties(std::span<float> logits, std::span<const std::int32_t> history) const;
  SampledToken report(std::span<const float> logits, std::int32_t token) const;
  // Fills candidates_ and weights_ (likeliest first); returns how many top-p and min-p keep.
  std::size_t weigh_candidates(std::span<const float> logits);
  std::int32_t draw_candidate(std::size_t cut);
  TokenDistribution kept_distribution(std::size_t cut) const;
  SamplingParams params_;
  std::uint64_t state_;  // splitmix64: the same seed, the same draws, on every platform
  std::vector<std::pair<float, std::int32_t>> candidates_;
  std::vector<double> weights_;
  double uniform();
};

// ---------------------------------------------------------------------------------------------
// Generation: an engine thread schedules requests continuously (vLLM's way: decoding sequences
// and prompt chunks share each step's forward pass under a token budget; finished sequences leave
// and waiting ones join at every step), over the paged KV cache with prefix caching, samples, and
// reports.

enum class FinishReason { kStop, kLength, kCancelled, kError };
std::string_view finish_reason_name(FinishReason reason);  // "stop", "length", "cancelled", "error"

struct GenerationEvent {
  SampledToken sampled;
  // The text this token releases: possibly empty (part of a UTF-8 character, or text that may
  // begin a stop string, is held back until it cannot), possibly more than the token's own.
  std::string text;
};
struct GenerationResult {
  FinishReason reason = FinishReason::kStop;
  std::string text;   // held text the last token did not release (stopped by an end token), to append
  std::string error;  // kError only
  std::size_t prompt_tokens = 0, completion_tokens = 0;
};

struct GenerationRequest {
  std::vector<std::int32_t> prompt;
  std::size_t max_tokens = 16;  // cut to what the context leaves after the prompt
  SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings: the text ends before the first found
  bool ignore_eos = false;
  // Called on the engine's thread for each token; false cancels the request. Then on_finish,
  // exactly once, also for a request cancelled or failed before its first token.
  std::function<bool(const GenerationEvent&)> on_token;
  std::function<void(const GenerationResult&)> on_finish;
  // Asked when the request is admitted and before each step: true cancels it (its client left),
  // so a prompt nobody waits for is not run, and its blocks are freed at once.
  std::function<bool()> cancelled;
  // The prefix cache shares blocks only between requests of the same salt (a tenant's).
  std::uint64_t cache_salt = 0;
};

// Speculative decoding: each decoding sequence's next tokens proposed, by prompt lookup in its own
// tokens or by a draft model, and checked by the target in the step's one forward pass. Greedy
// output is the target's plain greedy output; sampled output has the target's distribution (but
// with a seed, its tokens depend on how many were proposed each step, so on the load). A draft
// model's cache has as many blocks as the target's, outside kv_cache_bytes, and sampled decoding
// keeps the draft's distribution at each proposed token (at most tokens x vocabulary per sequence).
enum class SpeculativeMethod { kNone, kNgram, kDraft };
struct SpeculativeOptions {
  SpeculativeMethod method = SpeculativeMethod::kNone;
  // vLLM's num_speculative_tokens: the most a sequence proposes (two more after a proposal taken
  // whole, one fewer after a miss, at least one).
  std::size_t tokens = 4;
  std::size_t lookup_min = 2, lookup_max = 4;  // prompt_lookup_min and _max (kNgram)
  std::shared_ptr<const LlamaModel> draft;     // kDraft: the same vocabulary as the target
};
inline constexpr std::size_t kMaxSpeculativeTokens = 16;

// The scheduler's limits, named after vLLM's: each step runs one forward pass over at most
// max_batched_tokens tokens: the next token of every decoding sequence first, then chunks of
// prompts (so a long prompt never stalls decoding for more than a step), of at most max_sequences
// sequences. Sequences take KV blocks as they grow; when the pool runs out the youngest running
// sequence is preempted (its blocks freed, its tokens computed again later, its output unchanged).
struct EngineOptions {
  std::size_t max_sequences = 16;        // vLLM's max_num_seqs
  std::size_t max_batched_tokens = 512;  // vLLM's max_num_batched_tokens; at least max_sequences
  // Tokens per sequence; 0: the model's context length, at most kDefaultContextCap.
  std::size_t context = 0;
  std::size_t max_waiting = 256;  // choices queued for a sequence; more are refused
  int threads = 0;                // 0: all cores
  // The KV cache's pool in bytes, reserved and committed at start (vLLM's way: the memory is the
  // server's from the first request on); 0: enough for max_sequences whole contexts, within
  // kDefaultKvCacheBytes. A pool that cannot hold one whole context is refused at start, with the
  // numbers.
  std::uint64_t kv_cache_bytes = 0;
  KvCacheType kv_cache_type = KvCacheType::kF16;  // vLLM's kv_cache_dtype ("auto": the f16 file's 16 bits)
  // Whole blocks of prompts kept and reused across requests (by the salt's tenant only).
  bool prefix_caching = true;
  SpeculativeOptions speculative;
  // Ranks the forward pass is split over (TensorParallelModel), `threads` shared among them.
  std::size_t tensor_parallel = 1;
};
inline constexpr std::size_t kDefaultContextCap = 4096;
inline constexpr std::size_t kMaxEngineSequences = 1024;
inline constexpr std::uint64_t kDefaultKvCacheBytes = std::uint64_t{4} << 30;

struct EngineStats {
  std::size_t running = 0, waiting = 0;
  std::uint64_t prompt_tokens = 0, generated_tokens = 0, requests = 0;
  std::uint64_t cached_prompt_tokens = 0;            // prompt tokens taken from the prefix cache
  std::uint64_t prefix_hits = 0, prefix_misses = 0;  // admissions that found cached blocks, and not
  std::uint64_t preemptions = 0, forks = 0;
  std::size_t kv_blocks = 0, kv_blocks_used = 0, kv_blocks_cached = 0;
  // Speculative decoding: checks (steps a sequence had proposals in), tokens proposed, accepted.
  std::uint64_t speculative_checks = 0, draft_tokens = 0, accepted_tokens = 0;
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> start(std::shared_ptr<const LlamaModel> model, Tokenizer tokenizer,
                                               const EngineOptions& options);
  // Stops the thread: requests running or waiting finish as kCancelled.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues requests, all or none. InvalidArgument for an empty prompt, a token outside the
  // vocabulary or a prompt the context cannot hold with one generated token; ResourceExhausted
  // when they would make more than max_waiting wait. On an error no callback is called.
  // Requests with the same prompt and salt (`n` choices) compute it once: the later ones fork the
  // first's KV blocks, sharing them until they write (copy on write), and sample from its logits.
  Status submit(std::vector<GenerationRequest> requests);
  Status submit(GenerationRequest request);
  // Finishes every request running or waiting now as kCancelled with `reason` as its error (a
  // server's drain deadline), answering them; later requests run as usual.
  void cancel_all(const std::string& reason);
  // Cancels everything (as cancel_all, "the server is shutting down") and stops the thread; later
  // submits are refused. The destructor does it too.
  void shutdown();
  const LlamaModel& model() const;
  const Tokenizer& tokenizer() const;
  std::size_t context() const;
  EngineStats stats() const;
  // Prometheus text: tokens, requests running and waiting, time to first token and inter-token
  // latency histograms, labelled model="name".
  std::string metrics_text(std::string_view name) const;

 private:
  struct State;
  explicit Engine(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// ---------------------------------------------------------------------------------------------
// Benchmarks, in llama-bench's method: pp (a prompt of `prompt_tokens` run as one batch, its
// last token's logits wanted) and tg (`generated_tokens` decoded one at a time from an empty
// cache), each repeated after one warm-up run, at each thread count.

struct LlmBenchOptions {
  std::size_t prompt_tokens = 512, generated_tokens = 128, repetitions = 5;
  std::vector<int> threads = {1, 2};
  KvCacheType kv_cache_type = KvCacheType::kF16;
  std::size_t tensor_parallel = 1;  // ranks the passes are split over; each thread count at least this
};
struct LlmBenchFigure {
  std::string test;  // "pp512", "tg128"
  int threads = 1;
  double tokens_per_second = 0, deviation = 0;  // mean and sample standard deviation over repetitions
};
Result<std::vector<LlmBenchFigure>> bench_model(const std::shared_ptr<const LlamaModel>& model,
                                                const LlmBenchOptions& options);

// How far a variant of the pass moves the logits: a prompt of random tokens run both ways, every
// position's logits compared.
struct LogitDifference {
  std::size_t positions = 0;
  double max_abs_difference = 0, rms_difference = 0;
  double logit_rms = 0;       // of the exact pass's logits, for scale
  double top1_agreement = 0;  // positions whose largest logit is the same token
};
// A quantized KV cache's cost in quality: an F32 cache against one of `type`.
Result<LogitDifference> compare_kv_cache(const LlamaModel& model, KvCacheType type, std::size_t prompt_tokens,
                                         int threads);
// A model against another of the same shape (the same weights quantized otherwise), `other` with
// a cache of `other_type`.
Result<LogitDifference> compare_models(const LlamaModel& exact, const LlamaModel& other, KvCacheType other_type,
                                       std::size_t prompt_tokens, int threads);
// One rank against `ranks` ranks on `threads` threads (the order of the all-reduce's additions).
Result<LogitDifference> compare_tensor_parallel(const std::shared_ptr<const LlamaModel>& model, std::size_t ranks,
                                                std::size_t prompt_tokens, int threads);

// What one token of decoding reads: every matrix's packed weights, one embedding row, the norms,
// and the keys and values of `context` earlier positions in a cache of `type`.
std::uint64_t decode_bytes_per_token(const LlamaModel& model, std::size_t context, KvCacheType type);
// Multiply-adds per token in the layers' matrices (the output matrix's too when `with_output`).
std::uint64_t multiply_adds_per_token(const LlamaModel& model, bool with_output);

// The machine's measured memory read bandwidth (bytes per second) over a buffer of `bytes`,
// read by `threads` threads with vector loads: the median of several passes. 0 where the CPU
// lacks AVX2 or the memory cannot be had.
double measure_read_bandwidth(std::size_t bytes, int threads);
// The core's measured peak of int8 multiply-adds per second on `threads` threads (vpdpbusd on
// AVX-512 VNNI, else 0 where the CPU has no int8 dot-product instruction).
double measure_int8_peak(int threads);

// ---------------------------------------------------------------------------------------------
// The CUDA backend (optional): the forward pass on an NVIDIA GPU, compiled when CMake finds the
// CUDA compiler (-DSLIPWAY_CUDA=OFF leaves it out). Without it, or without a device, every entry
// answers Unavailable with the reason. A first backend: float activations and a float KV cache
// per sequence (no paging yet), Q8_0 and F16 matrices read as they are and the other formats
// widened to F16 on upload; the engine's scheduler does not drive it yet (`llm bench --device
// cuda` does).

struct GpuDevice {
  std::string name;
  std::uint64_t memory_bytes = 0;
  double bandwidth = 0;  // bytes/s, the card's peak: memory clock x 2 x bus width
  int compute_capability = 0;
};
bool cuda_built();
Result<GpuDevice> cuda_device();

class CudaForward {
 public:
  // The model's weights uploaded, and room for `sequences` sequences of `context` positions.
  static Result<std::unique_ptr<CudaForward>> create(const std::shared_ptr<const LlamaModel>& model,
                                                     std::size_t sequences, std::size_t context);
  virtual ~CudaForward() = default;
  // forward()'s contract: tokens of sequences below `sequences` at positions below `context`,
  // each sequence's earlier positions run by earlier passes or earlier in the batch.
  virtual Status forward(std::span<const BatchToken> batch, const std::vector<bool>& wants_logits,
                         std::vector<float>& logits) = 0;
  virtual std::uint64_t weight_bytes() const = 0;  // on the device
};

// `llm bench --device cuda`: the GPU's logits against the CPU's (an F32 cache) on a prompt of
// `check_tokens`, then pp and tg as bench_model measures them, and decoding `generated_tokens`
// for each count of sequences at once (aggregate tokens/s), each against the bandwidth limit.
struct CudaBenchOptions {
  std::size_t prompt_tokens = 512, generated_tokens = 128, repetitions = 3, check_tokens = 128;
  std::vector<std::size_t> sequences = {1, 16, 64};
  int threads = 0;  // the CPU pass's
};
struct CudaBenchFigure {
  std::string test;  // "pp512", "tg128", "decode x16"
  double tokens_per_second = 0;
  double limit = 0;  // tokens/s the card's bandwidth allows (decode), 0 where not bandwidth-bound
};
struct CudaBenchReport {
  GpuDevice device;
  std::uint64_t weight_bytes = 0;
  LogitDifference logits;  // the GPU's against the CPU's
  std::vector<CudaBenchFigure> figures;
};
Result<CudaBenchReport> bench_cuda(const std::shared_ptr<const LlamaModel>& model, const CudaBenchOptions& options);

// A random-weight Llama for tests and benchmarks: its shape, the type of its matrices (norms stay
// F32), and a small tokenizer of `vocabulary` tokens: "llama", SentencePiece-style (byte
// fallback, a few hundred English pieces, then filler pieces); "gpt2", byte-level BPE (GPT-2's
// 256 byte characters, merges building common English words, <|endoftext|> as BOS and EOS,
// pre-tokenizer "gpt-2", no BOS added); or "llama3", the same pieces with Llama-3's special
// tokens (<|begin_of_text|> added as BOS, <|eot_id|>, ...), pre-tokenizer "llama-bpe" and its chat
// template.
struct TestModelShape {
  std::size_t embedding = 64, layers = 2, heads = 4, kv_heads = 2, feed_forward = 192, vocabulary = 512, context = 256;
  float rope_base = 10000.0f;
  bool tied_output = false;
  std::string tokenizer = "llama";
};
Status write_test_model(const TestModelShape& shape, TensorType type, std::uint64_t seed, const std::string& path);

}  // namespace slipway::llm
