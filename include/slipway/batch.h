// slipway/batch.h — batch scoring jobs: a model over a CSV or JSON Lines file, in shards, into a
// folder that a rerun never scores twice.
//
// A job is named by its key, the sha256 of what decides its output: the bundle's hash, the input
// file's digest and the output spec (format, id column, shard count). Its folder holds
// manifest.json (the key, the model, the input, the spec, per shard its rows, bad rows, state,
// time and output digest), part-NNNNN.{csv,jsonl} (the scored rows of shard N, in input order)
// and errors-NNNNN.csv (its bad rows: row number, line, reason); .slipway-batch.lock is held while
// a process runs it. Each part and the manifest are
// written atomically (temp file, fsync, rename), the manifest after its part, so a job killed at
// any moment resumes its unfinished shards and ends with exactly the rows of an uninterrupted
// run; a finished job run again does nothing and says so; a folder holding another job's output
// (or anything else) is refused.
//
// Threads: run_job scores up to `workers` shards at once, each on one thread; callbacks come
// from those threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "slipway/core.h"
#include "slipway/model.h"

namespace slipway::batch {

struct JobSpec {
  std::string data;            // the input: .jsonl or .ndjson is JSON Lines, anything else CSV
  std::string out;             // the job's folder (created; empty or this job's)
  std::string format = "csv";  // of the output: csv or jsonl
  std::size_t shards = 0;      // 0: one per 16 MiB of input, at most 1024
  int workers = 0;             // shards scored at once; 0: every core
  // The job fails once more than this share of the input's rows are bad (the count is said).
  double max_error_rate = 0.01;
  std::string id_column;  // an input column copied into every output row (the row number always is)
  // Set (by another thread) to stop: no shard starts after it, those scoring finish, and the job
  // ends in state "cancelled" (the same job run again resumes it). Null: never cancelled.
  const std::atomic<bool>* cancel = nullptr;
};

// The model a job scores with.
struct JobModel {
  std::shared_ptr<const model::Bundle> bundle;
  std::string description;  // "name@version" or the bundle file, written in every output row
  std::string sha256;
};

struct ShardRecord {
  std::size_t index = 0;
  std::size_t first_row = 0;  // data rows [first_row, first_row + rows), numbered from 1
  std::size_t rows = 0;
  std::size_t scored = 0;
  std::size_t bad = 0;
  std::string state = "pending";  // pending or done
  double seconds = 0;
  std::string output_sha256;  // of its part file, once done
};

struct JobManifest {
  std::string key;
  std::string model;
  std::string bundle_sha256;
  std::string input;
  std::string input_sha256;
  std::string format;
  std::string id_column;
  double max_error_rate = 0;
  std::string state;   // running, finished, failed or cancelled
  std::string reason;  // why it failed
  std::size_t rows = 0;
  std::size_t scored = 0;
  std::size_t bad = 0;
  std::int64_t started_ms = 0;
  std::int64_t finished_ms = 0;
  std::vector<ShardRecord> shards;

  std::string to_json() const;
  static Result<JobManifest> parse(std::string_view json, std::string_view source);
};

// The key of a job: sha256 of the bundle hash, the input digest and the output spec.
std::string job_key(const std::string& bundle_sha256, const std::string& input_sha256, const std::string& format,
                    const std::string& id_column, std::size_t shards);

struct JobOutcome {
  JobManifest manifest;
  bool already_finished = false;   // the folder held this job, finished: nothing was done
  std::size_t shards_skipped = 0;  // done by an earlier, interrupted run
  double seconds = 0;
};

// Called as shards finish: rows done so far (of the shards this run scores) and their total.
using JobProgress = std::function<void(std::size_t rows_done, std::size_t rows_total)>;

// Runs (or resumes, or recognizes as done) the job. A job whose bad rows pass max_error_rate
// stops and ends in state "failed", the count in manifest.reason (a rerun with a higher rate
// carries on). Errors: InvalidArgument for a bad spec or an input the model cannot read at all
// (a missing column); NotFound for a missing input; FailedPrecondition for a folder that holds
// something else, or another process running the same job; DataLoss for a manifest that does not
// describe the input.
Result<JobOutcome> run_job(const JobModel& model, const JobSpec& spec, const JobProgress& progress = nullptr);

// The manifest in `out`; NotFound when the folder holds no job.
Result<JobManifest> read_job(const std::string& out);
// True while a process runs the job in `out` (a "running" manifest without one was interrupted).
bool job_running(const std::string& out);

}  // namespace slipway::batch
