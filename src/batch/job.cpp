// A batch scoring job: the folder's protocol (manifest, parts, errors) is in slipway/batch.h.
#include <fcntl.h>
#include <simdjson.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <optional>
#include <tuple>

#include <fmt/format.h>

#include "slipway/batch.h"
#include "slipway/data.h"

namespace slipway::batch {
namespace {

constexpr std::size_t kBytesPerShard = std::size_t{16} << 20;
constexpr std::size_t kMaxShards = 1024;

std::string part_name(std::size_t shard, const std::string& format) {
  return fmt::format("part-{:05}.{}", shard, format);
}
std::string errors_name(std::size_t shard) { return fmt::format("errors-{:05}.csv", shard); }

constexpr std::string_view kLockName = ".slipway-batch.lock";

// A temp file write_file_atomic leaves when killed mid-write: ".NAME.tmp-HEX".
bool is_temp_file(const std::string& name) { return name.starts_with(".") && name.find(".tmp-") != std::string::npos; }

// The rows of one shard the model can score, and those it cannot (with why).
struct ShardRows {
  data::Table table;                     // the good rows, in input order
  std::vector<std::size_t> row_numbers;  // per good row, its data row number
  std::vector<data::BadRow> bad;
};

// Where each shard's rows lie in the input, found in one streaming pass that also hashes it, so
// a job holds one shard's bytes per worker and never the whole file.
struct ShardSpan {
  std::uint64_t begin = 0, end = 0;  // bytes [begin, end): whole records
  std::size_t first_row = 1;         // its first data row's number (from 1)
  std::size_t rows = 0;
  std::size_t first_line = 1;  // the file line its bytes start on
};

// The input file, open for the whole job: shards read the bytes the scan hashed even if the path
// is renamed over meanwhile, and a change in place (size, times, inode) is noticed.
class InputFile {
 public:
  static Result<std::shared_ptr<InputFile>> open(const std::string& path) {
    auto file = std::make_shared<InputFile>(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (file->descriptor_ < 0) return io_error("cannot read " + path + ": " + std::strerror(errno));
    SLIPWAY_ASSIGN_OR_RETURN(file->identity_, file->identity(path));
    return file;
  }
  explicit InputFile(int descriptor) : descriptor_(descriptor) {}
  ~InputFile() {
    if (descriptor_ >= 0) ::close(descriptor_);
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  int descriptor() const { return descriptor_; }
  std::uint64_t size() const { return identity_.size; }
  // Unavailable when the file is not what it was when opened.
  Status check_unchanged(const std::string& path) const {
    SLIPWAY_ASSIGN_OR_RETURN(Identity now, identity(path));
    if (now == identity_) return {};
    return unavailable(path + " changed while the job read it; score it again once it is written");
  }

 private:
  struct Identity {
    std::uint64_t size = 0, device = 0, inode = 0;
    std::int64_t modified_ns = 0, changed_ns = 0;  // a writer can set the first, not the second
    bool operator==(const Identity&) const = default;
  };
  Result<Identity> identity(const std::string& path) const {
    struct stat info {};
    if (::fstat(descriptor_, &info) != 0) return io_error("cannot stat " + path + ": " + std::strerror(errno));
    return Identity{static_cast<std::uint64_t>(info.st_size), static_cast<std::uint64_t>(info.st_dev),
                    static_cast<std::uint64_t>(info.st_ino),
                    static_cast<std::int64_t>(info.st_mtim.tv_sec) * 1'000'000'000 + info.st_mtim.tv_nsec,
                    static_cast<std::int64_t>(info.st_ctim.tv_sec) * 1'000'000'000 + info.st_ctim.tv_nsec};
  }
  int descriptor_;
  Identity identity_;
};

struct InputLayout {
  std::shared_ptr<InputFile> file;
  std::string sha256;
  std::string header;  // CSV: the header record, newline included; JSON Lines: none
  std::size_t header_lines = 0;
  std::size_t rows = 0;  // data rows (blank lines are not rows, as the readers skip them)
  std::vector<ShardSpan> shards;
  std::vector<bool> found;  // per needle given to scan_input: whether its bytes occur in the file
};

// The longest record taken: past it a shard could not be held (an unterminated quote, or
// CR-only line endings, would make the rest of the file one record).
constexpr std::size_t kMaxRecordBytes = std::size_t{64} << 20;
// The most input bytes one shard may hold on average: a worker holds its bytes and their table.
constexpr std::uint64_t kMaxShardBytes = std::uint64_t{256} << 20;

// Splits `path` into `shard_count` shards of about equal bytes, each starting on a record.
// Records end at a newline outside quotes (CSV) or at any newline (JSON Lines). The CSV header is
// the first line, blank or not (as the reader takes it); after it, blank lines (CSV: empty, or a
// lone CR before the newline; JSON Lines: spaces and tabs only) are not data rows. Also says which
// of `needles` occur anywhere in the bytes.
Result<InputLayout> scan_input(const std::string& path, bool csv, std::size_t shard_count,
                               const std::vector<std::string>& needles) {
  InputLayout layout;
  SLIPWAY_ASSIGN_OR_RETURN(layout.file, InputFile::open(path));
  std::uint64_t size = layout.file->size();
  if (size / shard_count > kMaxShardBytes) {
    return invalid_argument(
        shard_count >= kMaxShards
            ? fmt::format("{} is too large to score in {} shards of at most {} MiB", path, kMaxShards,
                          kMaxShardBytes >> 20)
            : fmt::format("{} shards of {} would hold {} MiB each, more than the {} MiB a shard may hold; give "
                          "more --shards (or leave it out)",
                          shard_count, path, size / shard_count >> 20, kMaxShardBytes >> 20));
  }
  Sha256 hash;
  std::vector<char> buffer(std::size_t{4} << 20);
  std::uint64_t offset = 0;
  std::size_t line = 1, record_line = 1;
  bool in_quotes = false, header_done = !csv;
  std::size_t record_chars = 0, visible_chars = 0;  // JSON Lines: chars that are not ' ' or '\t'
  char last = 0;
  std::size_t next_shard = 0;
  layout.found.assign(needles.size(), false);
  std::size_t longest_needle = 0;
  for (const auto& needle : needles) longest_needle = std::max(longest_needle, needle.size());
  std::string carried;  // the end of the previous buffer, so a needle across two buffers is found
  auto start_shards_at = [&](std::uint64_t at, std::size_t line_number) {
    // Every shard whose target offset is reached starts here (several, when records are long).
    while (next_shard < shard_count && at >= next_shard * size / shard_count) {
      layout.shards.push_back({at, at, layout.rows + 1, 0, line_number});
      ++next_shard;
    }
  };
  auto end_record = [&](std::uint64_t end, bool newline) {
    bool blank = csv ? record_chars == 0 || (record_chars == 1 && last == '\r' && newline)
                     : visible_chars == 0 || (visible_chars == 1 && last == '\r');
    if (!header_done) {
      header_done = true;
      layout.header_lines = line - 1;
    } else if (!blank) {
      ++layout.rows;
    }
    record_line = line;
    record_chars = visible_chars = 0;
    start_shards_at(end, line);
  };
  if (!csv) start_shards_at(0, 1);
  Status status;
  while (status.ok()) {
    ssize_t got = ::read(layout.file->descriptor(), buffer.data(), buffer.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      status = io_error("cannot read " + path + ": " + std::strerror(errno));
      break;
    }
    if (got == 0) break;
    std::string_view bytes(buffer.data(), static_cast<std::size_t>(got));
    hash.update(bytes);
    if (!header_done) layout.header.append(bytes);
    if (!needles.empty()) {
      // In the buffer, and across its seam with the one before (only that seam is copied).
      std::string seam = carried + std::string(bytes.substr(0, std::min(bytes.size(), longest_needle)));
      for (std::size_t index = 0; index < needles.size(); ++index) {
        if (!layout.found[index]) {
          layout.found[index] =
              bytes.find(needles[index]) != std::string_view::npos || seam.find(needles[index]) != std::string::npos;
        }
      }
      std::string_view tail = bytes.substr(bytes.size() - std::min(bytes.size(), longest_needle));
      carried = bytes.size() >= longest_needle ? std::string(tail) : (carried + std::string(tail));
      if (carried.size() > longest_needle) carried.erase(0, carried.size() - longest_needle);
    }
    for (char c : bytes) {
      ++offset;
      if (csv && c == '"') in_quotes = !in_quotes;
      if (c == '\n' && !in_quotes) {
        ++line;
        end_record(offset, true);
        continue;
      }
      if (c == '\n') ++line;
      ++record_chars;
      if (c != ' ' && c != '\t') ++visible_chars;
      last = c;
      if (record_chars > kMaxRecordBytes) {
        status = invalid_argument(fmt::format(
            "{}: the record at line {} is longer than {} MiB (an unterminated quote, or CR-only line endings?)", path,
            record_line, kMaxRecordBytes >> 20));
        break;
      }
    }
  }
  SLIPWAY_RETURN_IF_ERROR(status);
  if (record_chars > 0) end_record(offset, false);  // a last line without a newline
  if (offset != size) return unavailable(path + " changed while it was read; score it once it is written");
  SLIPWAY_RETURN_IF_ERROR(layout.file->check_unchanged(path));
  if (csv) {
    if (!header_done) return invalid_argument(path + " has no header row");
    layout.header.resize(static_cast<std::size_t>(layout.shards.front().begin));
  }
  start_shards_at(size, line);  // shards past the last record are empty
  for (std::size_t index = 0; index < layout.shards.size(); ++index) {
    ShardSpan& shard = layout.shards[index];
    bool last_shard = index + 1 == layout.shards.size();
    shard.end = last_shard ? size : layout.shards[index + 1].begin;
    shard.rows = (last_shard ? layout.rows + 1 : layout.shards[index + 1].first_row) - shard.first_row;
  }
  layout.sha256 = to_hex(hash.finish());
  return layout;
}

// `message` with the line of "PATH:LINE:" moved on by `lines`: a shard's parse error names the
// file's line, not the shard's.
std::string shift_line(std::string message, const std::string& path, std::size_t lines) {
  std::string prefix = path + ":";
  if (lines == 0 || !message.starts_with(prefix)) return message;
  std::size_t digits_end = message.find_first_not_of("0123456789", prefix.size());
  if (digits_end == prefix.size() || digits_end == std::string::npos || message[digits_end] != ':') return message;
  std::size_t line = std::stoull(message.substr(prefix.size(), digits_end - prefix.size()));
  return prefix + std::to_string(line + lines) + message.substr(digits_end);
}

// A shard's rows, parsed from its bytes (after the header), numbered as in the whole file.
Result<data::TolerantTable> read_shard(const std::string& path, const InputLayout& layout, const ShardSpan& span,
                                       const std::vector<std::string>& text_columns) {
  std::string text = layout.header;
  std::size_t header_bytes = text.size();
  text.resize(header_bytes + static_cast<std::size_t>(span.end - span.begin));
  std::size_t done = 0;
  while (done < span.end - span.begin) {
    ssize_t got = ::pread(layout.file->descriptor(), text.data() + header_bytes + done,
                          text.size() - header_bytes - done, static_cast<off_t>(span.begin + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return io_error("cannot read " + path + ": " + std::strerror(errno));
    if (got == 0) return unavailable(path + " is shorter than when the job began: it changed");
    done += static_cast<std::size_t>(got);
  }
  SLIPWAY_RETURN_IF_ERROR(layout.file->check_unchanged(path));
  std::size_t lines_before = span.first_line - 1 - layout.header_lines;
  auto parsed = data::parse_rows(text, path, text_columns);
  if (!parsed.ok()) {
    return Status(parsed.status().code(), shift_line(parsed.status().message(), path, lines_before));
  }
  data::TolerantTable rows = std::move(parsed).value();
  if (rows.source_rows.size() + rows.bad_rows.size() != span.rows) {
    return internal_error(fmt::format("shard at byte {} of {} holds {} rows, not the {} its scan counted", span.begin,
                                      path, rows.source_rows.size() + rows.bad_rows.size(), span.rows));
  }
  // From the shard's numbering to the file's.
  for (auto& row : rows.source_rows) row += span.first_row - 1;
  for (auto& bad : rows.bad_rows) {
    bad.row += span.first_row - 1;
    if (bad.line > 0) bad.line += lines_before;
  }
  return rows;
}

// A numeric input read as text (some row held text): each row's text as a number, or the row is
// bad. Infinite numbers are bad too: no model can use them.
void check_numeric_inputs(const model::Bundle& bundle, ShardRows& shard) {
  std::vector<char> bad_row(shard.table.row_count(), 0);
  std::vector<std::string> reasons(shard.table.row_count());
  data::Table checked;
  for (const data::Column& column : shard.table.columns()) {
    auto feature = bundle.preprocessor().feature_index(column.name);
    bool numeric_input = feature && bundle.preprocessor().features()[*feature].type == data::ColumnType::kNumeric;
    if (!numeric_input) {
      (void)checked.add_column(column);
      continue;
    }
    data::Column numbers;
    numbers.name = column.name;
    numbers.numbers.resize(column.size(), std::numeric_limits<float>::quiet_NaN());
    for (std::size_t row = 0; row < column.size(); ++row) {
      if (column.is_missing(row)) continue;
      float value = 0;
      bool ok = true;
      if (column.type == data::ColumnType::kNumeric) {
        value = column.numbers[row];
        ok = std::isfinite(value);
      } else {
        // As the readers take numbers: spaces around, and "", NA and nan missing.
        std::string_view text = column.dictionary[static_cast<std::size_t>(column.codes[row])];
        while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
        while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
        if (text.empty() || text == "NA" || text == "nan" || text == "NaN") continue;
        double parsed = 0;
        auto result = std::from_chars(text.data(), text.data() + text.size(), parsed);
        ok = result.ec == std::errc() && result.ptr == text.data() + text.size() && std::isfinite(parsed) &&
             std::isfinite(static_cast<float>(parsed));
        value = static_cast<float>(parsed);
      }
      if (ok) {
        numbers.numbers[row] = value;
      } else if (bad_row[row] == 0) {
        bad_row[row] = 1;
        std::string text = column.text_at(row);
        if (text.size() > 64) text = text.substr(0, 64) + "...";
        reasons[row] = "input '" + column.name + "' holds '" + text + "', not a finite number";
      }
    }
    (void)checked.add_column(std::move(numbers));
  }
  std::vector<std::uint32_t> good;
  std::vector<std::size_t> good_numbers;
  for (std::size_t row = 0; row < bad_row.size(); ++row) {
    if (bad_row[row] == 0) {
      good.push_back(static_cast<std::uint32_t>(row));
      good_numbers.push_back(shard.row_numbers[row]);
    } else {
      shard.bad.push_back({shard.row_numbers[row], 0, std::move(reasons[row])});
    }
  }
  std::sort(shard.bad.begin(), shard.bad.end(), [](const auto& a, const auto& b) { return a.row < b.row; });
  shard.table = good.size() == bad_row.size() ? std::move(checked) : checked.take_rows(good);
  shard.row_numbers = std::move(good_numbers);
}

// The scored rows of a shard as the output file's text.
std::string format_rows(const JobModel& model, const JobSpec& spec, const ShardRows& shard,
                        const model::Predictions& predictions, const data::Column* ids) {
  const model::Bundle& bundle = *model.bundle;
  bool classification = bundle.task() != model::Task::kRegression;
  bool multiclass = bundle.task() == model::Task::kMulticlassClassification;
  const std::vector<std::string>& labels = bundle.manifest().class_labels;
  std::size_t columns = predictions.columns;
  std::string out;
  out.reserve(predictions.rows * 48);
  if (spec.format == "jsonl") {
    for (std::size_t row = 0; row < predictions.rows; ++row) {
      JsonWriter json;
      json.begin_object().key("row").value(static_cast<std::uint64_t>(shard.row_numbers[row]));
      if (ids != nullptr) json.key(ids->name).value(ids->text_at(row));
      json.key("model").value(model.description);
      if (multiclass) {
        for (std::size_t column = 0; column < columns; ++column) {
          json.key("probability_" + labels[column]).value(predictions.scores[row * columns + column]);
        }
      } else {
        json.key(classification ? "probability" : "prediction").value(predictions.scores[row]);
      }
      if (classification) json.key("label").value(bundle.predicted_label(predictions, row));
      json.end_object();
      out += json.str();
      out += '\n';
    }
    return out;
  }
  out += "row,";
  if (ids != nullptr) {
    append_csv_field(out, ids->name);
    out += ',';
  }
  out += "model,";
  if (multiclass) {
    for (const auto& label : labels) {
      append_csv_field(out, "probability_" + label);
      out += ',';
    }
    out += "label\n";
  } else {
    out += classification ? "probability,label\n" : "prediction\n";
  }
  for (std::size_t row = 0; row < predictions.rows; ++row) {
    out += std::to_string(shard.row_numbers[row]);
    out += ',';
    if (ids != nullptr) {
      append_csv_field(out, ids->text_at(row));
      out += ',';
    }
    append_csv_field(out, model.description);
    for (std::size_t column = 0; column < columns; ++column) {
      // Shortest text that reads back as the same float: the online answer's bits.
      out += fmt::format(",{}", predictions.scores[row * columns + column]);
    }
    if (classification) {
      out += ',';
      append_csv_field(out, bundle.predicted_label(predictions, row));
    }
    out += '\n';
  }
  return out;
}

std::string format_errors(const std::vector<data::BadRow>& bad) {
  std::string out = "row,line,reason\n";
  for (const auto& row : bad) {
    out += std::to_string(row.row) + "," + (row.line > 0 ? std::to_string(row.line) : std::string()) + ",";
    append_csv_field(out, row.reason);
    out += '\n';
  }
  return out;
}

}  // namespace

std::string job_key(const std::string& bundle_sha256, const std::string& input_sha256, const std::string& format,
                    const std::string& id_column, std::size_t shards) {
  return sha256_hex("slipway batch job\nbundle " + bundle_sha256 + "\ninput " + input_sha256 + "\nformat " + format +
                    "\nid " + std::to_string(id_column.size()) + ":" + id_column + "\nshards " +
                    std::to_string(shards) + "\n");
}

std::string JobManifest::to_json() const {
  JsonWriter json;
  json.begin_object();
  json.key("key").value(key).key("model").value(model).key("bundle_sha256").value(bundle_sha256);
  json.key("input").value(input).key("input_sha256").value(input_sha256);
  json.key("format").value(format).key("id_column").value(id_column).key("max_error_rate").value(max_error_rate);
  json.key("state").value(state).key("reason").value(reason);
  json.key("rows").value(static_cast<std::uint64_t>(rows)).key("scored").value(static_cast<std::uint64_t>(scored));
  json.key("bad").value(static_cast<std::uint64_t>(bad));
  json.key("started_ms").value(started_ms).key("finished_ms").value(finished_ms);
  json.key("shards").begin_array();
  for (const auto& shard : shards) {
    json.begin_object().key("index").value(static_cast<std::uint64_t>(shard.index));
    json.key("first_row").value(static_cast<std::uint64_t>(shard.first_row));
    json.key("rows").value(static_cast<std::uint64_t>(shard.rows));
    json.key("scored").value(static_cast<std::uint64_t>(shard.scored));
    json.key("bad").value(static_cast<std::uint64_t>(shard.bad)).key("state").value(shard.state);
    json.key("seconds").value(shard.seconds).key("output_sha256").value(shard.output_sha256);
    json.end_object();
  }
  json.end_array().end_object();
  return json.take() + "\n";
}

Result<JobManifest> JobManifest::parse(std::string_view text, std::string_view source) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(text);
  simdjson::dom::object root;
  auto broken = [&](std::string_view what) {
    return data_loss(std::string(source) + " is not a batch job manifest (" + std::string(what) + ")");
  };
  if (parser.parse(padded).get(root) != simdjson::SUCCESS) return broken("not a JSON object");
  JobManifest manifest;
  auto text_field = [&](std::string_view key, std::string& out) {
    std::string_view value;
    if (root[key].get(value) != simdjson::SUCCESS) return false;
    out = std::string(value);
    return true;
  };
  auto count = [](simdjson::dom::object object, std::string_view key, std::size_t& out) {
    std::uint64_t value = 0;
    if (object[key].get(value) != simdjson::SUCCESS) return false;
    out = static_cast<std::size_t>(value);
    return true;
  };
  bool ok = text_field("key", manifest.key) && text_field("model", manifest.model) &&
            text_field("bundle_sha256", manifest.bundle_sha256) && text_field("input", manifest.input) &&
            text_field("input_sha256", manifest.input_sha256) && text_field("format", manifest.format) &&
            text_field("id_column", manifest.id_column) && text_field("state", manifest.state) &&
            text_field("reason", manifest.reason) && count(root, "rows", manifest.rows) &&
            count(root, "scored", manifest.scored) && count(root, "bad", manifest.bad) &&
            root["max_error_rate"].get(manifest.max_error_rate) == simdjson::SUCCESS &&
            root["started_ms"].get(manifest.started_ms) == simdjson::SUCCESS &&
            root["finished_ms"].get(manifest.finished_ms) == simdjson::SUCCESS;
  if (!ok) return broken("a field is missing or has the wrong type");
  simdjson::dom::array shards;
  if (root["shards"].get(shards) != simdjson::SUCCESS) return broken("no shards");
  for (auto element : shards) {
    simdjson::dom::object object;
    ShardRecord shard;
    std::string_view state, output;
    if (element.get(object) != simdjson::SUCCESS || !count(object, "index", shard.index) ||
        !count(object, "first_row", shard.first_row) || !count(object, "rows", shard.rows) ||
        !count(object, "scored", shard.scored) || !count(object, "bad", shard.bad) ||
        object["state"].get(state) != simdjson::SUCCESS || object["seconds"].get(shard.seconds) != simdjson::SUCCESS ||
        object["output_sha256"].get(output) != simdjson::SUCCESS) {
      return broken("a shard's record is incomplete");
    }
    shard.state = std::string(state);
    shard.output_sha256 = std::string(output);
    manifest.shards.push_back(std::move(shard));
  }
  return manifest;
}

Result<JobManifest> read_job(const std::string& out) {
  std::string path = out + "/manifest.json";
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return not_found(out + " holds no batch job (no manifest.json)");
  SLIPWAY_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return JobManifest::parse(text, path);
}

bool job_running(const std::string& out) {
  int fd = ::open((out + "/" + std::string(kLockName)).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool held = ::flock(fd, LOCK_EX | LOCK_NB) != 0;
  ::close(fd);
  return held;
}

namespace {

// A manifest read back must describe this input: its shards, in order, as this scan split it.
Status check_shards(const JobManifest& manifest, const InputLayout& layout, const std::string& path) {
  bool ok = manifest.shards.size() == layout.shards.size() && manifest.rows == layout.rows;
  for (std::size_t index = 0; ok && index < manifest.shards.size(); ++index) {
    const ShardRecord& shard = manifest.shards[index];
    ok = shard.index == index && shard.first_row == layout.shards[index].first_row &&
         shard.rows == layout.shards[index].rows && (shard.state == "done" || shard.state == "pending");
  }
  if (ok) return {};
  return data_loss(path + " does not describe this input's rows; remove the folder to score it again");
}

}  // namespace

Result<JobOutcome> run_job(const JobModel& model, const JobSpec& spec, const JobProgress& progress) {
  std::int64_t started = monotonic_ns();
  if (spec.format != "csv" && spec.format != "jsonl") {
    return invalid_argument("--format must be csv or jsonl, not '" + spec.format + "'");
  }
  if (!(spec.max_error_rate >= 0 && spec.max_error_rate <= 1)) {
    return invalid_argument("--max-error-rate must be between 0 and 1");
  }
  if (spec.shards > kMaxShards) return invalid_argument("--shards must be at most " + std::to_string(kMaxShards));
  if (spec.out.empty()) return invalid_argument("--out needs a folder");
  std::error_code error;
  if (!std::filesystem::is_regular_file(spec.data, error)) return not_found("cannot read " + spec.data);
  bool csv = !data::is_json_lines(spec.data);
  std::size_t shard_count = spec.shards;
  if (shard_count == 0) {
    auto bytes = std::filesystem::file_size(spec.data, error);
    shard_count = std::clamp<std::size_t>(static_cast<std::size_t>(bytes / kBytesPerShard) + 1, 1, kMaxShards);
  }
  // Hashed and split in one pass; each shard is read again on its own, and a file rewritten
  // meanwhile is noticed (its size or time changed), so one input's digest never names another's rows.
  // In JSON Lines an input is a key: one whose quoted name is nowhere in the file is misspelt, not
  // missing, whatever the shards hold.
  const auto& features = model.bundle->preprocessor().features();
  std::vector<std::string> keys;
  for (const auto& feature : features) {
    if (!csv) keys.push_back(std::string(1, '"') + feature.name + '"');
  }
  SLIPWAY_ASSIGN_OR_RETURN(InputLayout layout, scan_input(spec.data, csv, shard_count, keys));
  for (std::size_t index = 0; index < keys.size(); ++index) {
    if (!layout.found[index] && layout.rows > 0) {
      return invalid_argument("no row of " + spec.data + " has the input '" + features[index].name + "', which " +
                              model.description + " reads");
    }
  }
  const std::string& input_sha256 = layout.sha256;
  std::string key = job_key(model.sha256, input_sha256, spec.format, spec.id_column, shard_count);

  // The folder: this job's (to finish or to leave as it is), empty, or new; never another's.
  // Checked before the lock is taken, so a refused folder is left as it was, and again after.
  SLIPWAY_RETURN_IF_ERROR(make_directories(spec.out));
  auto check_folder = [&]() -> Result<std::optional<JobManifest>> {
    auto existing = read_job(spec.out);
    if (existing.ok()) {
      if (existing->key != key) {
        return failed_precondition(spec.out + " holds another batch job (" + existing->model + " on " +
                                   existing->input + "); give another --out, or remove it");
      }
      return std::optional<JobManifest>(std::move(existing).value());
    }
    if (existing.status().code() != StatusCode::kNotFound) return existing.status();
    for (const auto& entry : std::filesystem::directory_iterator(spec.out, error)) {
      std::string name = entry.path().filename().string();
      if (name != kLockName && !is_temp_file(name)) {
        return failed_precondition(spec.out + " is not empty and holds no batch job; give an empty or new folder");
      }
    }
    return std::optional<JobManifest>();
  };
  SLIPWAY_RETURN_IF_ERROR(check_folder().status());
  // Held while the job runs: two processes never write one job.
  SLIPWAY_ASSIGN_OR_RETURN(auto lock, FileLock::try_acquire(spec.out + "/" + std::string(kLockName)));
  if (lock == nullptr) return failed_precondition("another `slipway batch` is writing " + spec.out + " now");
  SLIPWAY_ASSIGN_OR_RETURN(std::optional<JobManifest> earlier, check_folder());
  JobOutcome outcome;
  if (earlier && earlier->state == "finished") {
    // Finished, and still so when every part is the one recorded; a part changed or lost since is
    // scored again below, like an interrupted run's.
    bool intact = std::all_of(earlier->shards.begin(), earlier->shards.end(), [&](const ShardRecord& shard) {
      auto digest = sha256_file(spec.out + "/" + part_name(shard.index, spec.format));
      return digest.ok() && *digest == shard.output_sha256;
    });
    if (intact) {
      outcome.manifest = std::move(*earlier);
      outcome.already_finished = true;
      return outcome;
    }
    log_warn(spec.out + " holds a finished job whose parts changed since; the changed ones are scored again");
  }
  // Left by a run killed mid-write: never part of the output.
  for (const auto& entry : std::filesystem::directory_iterator(spec.out, error)) {
    if (is_temp_file(entry.path().filename().string())) std::filesystem::remove(entry, error);
  }

  // The id column as written (a float would change 00123 or 12345678901), and the categorical
  // inputs as text, whatever one shard's values look like.
  std::vector<std::string> text_columns;
  if (!spec.id_column.empty()) text_columns.push_back(spec.id_column);
  for (const auto& feature : features) {
    if (feature.type != data::ColumnType::kNumeric) text_columns.push_back(feature.name);
  }
  if (csv) {
    // What the model needs from every row must be in the header: otherwise no row is good.
    SLIPWAY_ASSIGN_OR_RETURN(data::TolerantTable header, data::parse_rows(layout.header, spec.data, text_columns));
    for (const auto& feature : features) {
      if (header.table.find(feature.name) == nullptr) {
        return invalid_argument("the input has no column '" + feature.name + "', which " + model.description +
                                " reads");
      }
    }
    if (!spec.id_column.empty() && header.table.find(spec.id_column) == nullptr) {
      return invalid_argument("the input has no column '" + spec.id_column + "' (--id)");
    }
  }

  JobManifest manifest;
  std::size_t total_rows = layout.rows;
  if (earlier) {
    SLIPWAY_RETURN_IF_ERROR(check_shards(*earlier, layout, spec.out + "/manifest.json"));
    manifest = std::move(*earlier);
  } else {
    manifest.key = key;
    manifest.model = model.description;
    manifest.bundle_sha256 = model.sha256;
    manifest.input = std::filesystem::absolute(spec.data).string();
    manifest.input_sha256 = input_sha256;
    manifest.format = spec.format;
    manifest.id_column = spec.id_column;
    manifest.started_ms = unix_time_ms();
    for (std::size_t index = 0; index < layout.shards.size(); ++index) {
      ShardRecord shard;
      shard.index = index;
      shard.first_row = layout.shards[index].first_row;
      shard.rows = layout.shards[index].rows;
      manifest.shards.push_back(std::move(shard));
    }
  }
  manifest.max_error_rate = spec.max_error_rate;
  manifest.rows = total_rows;
  manifest.state = "running";
  manifest.reason.clear();
  std::mutex manifest_mutex;
  auto write_manifest = [&]() { return write_file_atomic(spec.out + "/manifest.json", manifest.to_json()); };
  SLIPWAY_RETURN_IF_ERROR(write_manifest());

  // A shard is done when its manifest record says so and its part is the one recorded.
  std::vector<std::size_t> pending;
  std::size_t rows_pending = 0;
  for (auto& shard : manifest.shards) {
    if (shard.state == "done") {
      auto digest = sha256_file(spec.out + "/" + part_name(shard.index, spec.format));
      if (digest.ok() && *digest == shard.output_sha256) {
        ++outcome.shards_skipped;
        continue;
      }
      shard.state = "pending";
    }
    pending.push_back(shard.index);
    rows_pending += shard.rows;
  }
  std::atomic<std::size_t> rows_done{0};
  std::atomic<bool> over_limit{false};
  std::atomic<std::size_t> bad_total{0};
  for (const auto& shard : manifest.shards) {
    if (shard.state == "done") bad_total += shard.bad;
  }
  // The tolerance keeps 29 bad rows of 100 within a rate of 0.29 despite 0.29 * 100 = 28.999...
  std::size_t allowed_bad =
      static_cast<std::size_t>(std::floor(spec.max_error_rate * static_cast<double>(total_rows) + 1e-9));
  std::vector<Status> failures(pending.size());
  int workers = spec.workers > 0 ? spec.workers : default_thread_count();
  auto cancelled = [&spec] { return spec.cancel != nullptr && spec.cancel->load(); };
  parallel_for(pending.size(), workers, [&](std::size_t task) {
    if (over_limit || cancelled()) return;
    std::int64_t shard_started = monotonic_ns();
    ShardRecord& record = manifest.shards[pending[task]];
    auto read = read_shard(spec.data, layout, layout.shards[record.index], text_columns);
    if (!read.ok()) {
      failures[task] = read.status();
      return;
    }
    ShardRows shard;
    shard.table = std::move(read->table);
    shard.row_numbers = std::move(read->source_rows);
    shard.bad = std::move(read->bad_rows);
    // JSON Lines rows may leave out an input: a shard in which none has it is missing it everywhere.
    for (const auto& feature : features) {
      if (shard.table.find(feature.name) != nullptr) continue;
      data::Column missing;
      missing.name = feature.name;
      missing.type = feature.type;
      if (feature.type == data::ColumnType::kNumeric) {
        missing.numbers.assign(shard.row_numbers.size(), std::numeric_limits<float>::quiet_NaN());
      } else {
        missing.codes.assign(shard.row_numbers.size(), data::Column::kMissingCode);
      }
      if (Status added = shard.table.add_column(std::move(missing)); !added.ok()) {
        failures[task] = added;
        return;
      }
    }
    check_numeric_inputs(*model.bundle, shard);
    if ((bad_total += shard.bad.size()) > allowed_bad) over_limit = true;
    auto predictions = model.bundle->predict(shard.table);
    if (!predictions.ok()) {
      failures[task] = predictions.status();
      return;
    }
    const data::Column* ids = shard.table.find(spec.id_column);
    std::string part = format_rows(model, spec, shard, *predictions, spec.id_column.empty() ? nullptr : ids);
    std::string part_sha256 = sha256_hex(part);
    Status written = write_file_atomic(spec.out + "/" + errors_name(record.index), format_errors(shard.bad));
    if (written.ok()) written = write_file_atomic(spec.out + "/" + part_name(record.index, spec.format), part);
    if (!written.ok()) {
      failures[task] = written;
      return;
    }
    crash_point("batch.after_part");  // the part is there, the manifest does not say so yet
    std::lock_guard guard(manifest_mutex);
    record.scored = predictions->rows;
    record.bad = shard.bad.size();
    record.state = "done";
    record.seconds = static_cast<double>(monotonic_ns() - shard_started) * 1e-9;
    record.output_sha256 = part_sha256;
    failures[task] = write_manifest();
    if (progress) progress(rows_done += record.rows, rows_pending);
  });
  for (const auto& failure : failures) {
    if (failure.ok()) continue;
    // Said in the manifest too, so `batch status` does not call the job resumable (a changed input
    // makes another job; a full disk, once freed, lets the same command carry on).
    manifest.state = "failed";
    manifest.reason = failure.message();
    if (Status written = write_manifest(); !written.ok()) {
      log_warn("the job's manifest says nothing of the failure: " + written.message());
    }
    return failure;
  }

  manifest.scored = 0;
  manifest.bad = 0;
  for (const auto& shard : manifest.shards) {
    manifest.scored += shard.scored;
    manifest.bad += shard.bad;
  }
  std::size_t bad_seen = bad_total;
  bool every_shard_done = std::all_of(manifest.shards.begin(), manifest.shards.end(),
                                      [](const ShardRecord& shard) { return shard.state == "done"; });
  if (bad_seen > allowed_bad) {
    // Stopped early, the shards not scored have not been looked at: the count is a floor then.
    manifest.state = "failed";
    manifest.reason = fmt::format(
        "{}{} of {} rows are bad ({:.2f}%), above --max-error-rate {}; errors-*.csv in {} say which and why",
        every_shard_done ? "" : "at least ", bad_seen, total_rows,
        100.0 * static_cast<double>(bad_seen) / static_cast<double>(std::max<std::size_t>(total_rows, 1)),
        spec.max_error_rate, spec.out);
  } else if (!every_shard_done && cancelled()) {
    manifest.state = "cancelled";
    manifest.reason = "cancelled; the same job started again scores the shards left";
  } else {
    manifest.state = "finished";
    manifest.finished_ms = unix_time_ms();
  }
  SLIPWAY_RETURN_IF_ERROR(write_manifest());
  outcome.manifest = manifest;
  outcome.seconds = static_cast<double>(monotonic_ns() - started) * 1e-9;
  return outcome;
}

}  // namespace slipway::batch
