// Batch jobs: every input row is either scored or reported bad, in input order; a rerun of a
// finished job does nothing; an interrupted one finishes only what it had not; a folder that holds
// anything else is refused.
#include "slipway/batch.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include "support/fixtures.h"

namespace slipway::batch {
namespace {

namespace fs = std::filesystem;

class BatchJob : public ::testing::Test {
 protected:
  void SetUp() override {
    auto summary = train::fit(testing::lending_rows(0, 2000), train::TrainRequest{.target = "Class"});
    ASSERT_TRUE(summary.ok()) << summary.status().message();
    model_ = JobModel{summary->bundle, "lending@1", sha256_hex(summary->bundle->serialize())};
  }
  // Every part of the job in `out`, concatenated in shard order, without their header lines.
  std::string rows_of(const std::string& out, const std::string& format = "csv") {
    std::string all;
    for (std::size_t shard = 0;; ++shard) {
      std::string path = out + "/" + fmt_part(shard, format);
      if (!fs::exists(path)) break;
      std::string text = *read_file(path);
      all += format == "csv" ? text.substr(text.find('\n') + 1) : text;
    }
    return all;
  }
  static std::string fmt_part(std::size_t shard, const std::string& format) {
    char name[32];
    std::snprintf(name, sizeof name, "part-%05zu.%s", shard, format.c_str());
    return name;
  }
  JobSpec spec(const std::string& data, const std::string& out) {
    JobSpec job;
    job.data = data;
    job.out = out;
    job.shards = 4;
    job.workers = 2;
    return job;
  }

  testing::TempDir dir_;
  JobModel model_;
};

TEST_F(BatchJob, ScoresEveryRowInOrderAndARerunDoesNothing) {
  std::string data = testing::data_path("lending_club.csv");
  auto first = run_job(model_, spec(data, dir_.file("out")));
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ(first->manifest.state, "finished");
  EXPECT_EQ(first->manifest.rows, 9857u);
  EXPECT_EQ(first->manifest.scored, 9857u);
  EXPECT_EQ(first->manifest.bad, 0u);
  EXPECT_FALSE(first->already_finished);
  // The rows are the in-process predictions of the whole file, in order, as the same floats.
  auto table = data::read_csv(data);
  auto predictions = model_.bundle->predict(*table);
  std::istringstream lines(rows_of(dir_.file("out")));
  std::string line;
  std::size_t row = 0;
  while (std::getline(lines, line)) {
    ASSERT_LT(row, predictions->rows);
    EXPECT_EQ(line.substr(0, line.find(',')), std::to_string(row + 1));
    auto fields_after_model = line.substr(line.find("lending@1,") + 10);
    EXPECT_EQ(std::stof(fields_after_model.substr(0, fields_after_model.find(','))), predictions->scores[row]) << line;
    ++row;
  }
  EXPECT_EQ(row, 9857u);
  auto again = run_job(model_, spec(data, dir_.file("out")));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->already_finished);
  EXPECT_EQ(read_job(dir_.file("out"))->key, first->manifest.key);
}

TEST_F(BatchJob, AnInterruptedJobFinishesOnlyWhatItHadNot) {
  std::string data = testing::data_path("lending_club.csv");
  auto whole = run_job(model_, spec(data, dir_.file("whole")));
  ASSERT_TRUE(whole.ok());
  // As a kill leaves it: shard 2 never recorded, its part half there, a temp file about.
  ASSERT_TRUE(run_job(model_, spec(data, dir_.file("cut"))).ok());
  auto manifest = *read_job(dir_.file("cut"));
  manifest.state = "running";
  manifest.shards[2].state = "pending";
  ASSERT_TRUE(write_file_atomic(dir_.file("cut") + "/manifest.json", manifest.to_json()).ok());
  testing::write_text(dir_.file("cut") + "/" + fmt_part(2, "csv"), "row,model\n1,half");
  testing::write_text(dir_.file("cut") + "/.part-00003.csv.tmp-0123456789ab", "junk");
  // A part whose bytes differ from the record is scored again too.
  testing::write_text(dir_.file("cut") + "/" + fmt_part(3, "csv"), "tampered");
  auto resumed = run_job(model_, spec(data, dir_.file("cut")));
  ASSERT_TRUE(resumed.ok()) << resumed.status().message();
  EXPECT_EQ(resumed->shards_skipped, 2u);
  EXPECT_EQ(rows_of(dir_.file("cut")), rows_of(dir_.file("whole")));
  EXPECT_FALSE(fs::exists(dir_.file("cut") + "/.part-00003.csv.tmp-0123456789ab"));
}

// A finished job run again checks its parts: one changed since is scored again, not trusted.
TEST_F(BatchJob, AFinishedJobWhosePartChangedScoresItAgain) {
  std::string data = testing::data_path("lending_club.csv");
  ASSERT_TRUE(run_job(model_, spec(data, dir_.file("whole"))).ok());
  ASSERT_TRUE(run_job(model_, spec(data, dir_.file("out"))).ok());
  testing::write_text(dir_.file("out") + "/" + fmt_part(1, "csv"), "row,model\n1,tampered\n");
  auto again = run_job(model_, spec(data, dir_.file("out")));
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_FALSE(again->already_finished);
  EXPECT_EQ(again->shards_skipped, 3u);
  EXPECT_EQ(again->manifest.state, "finished");
  EXPECT_EQ(rows_of(dir_.file("out")), rows_of(dir_.file("whole")));
}

// A cancelled job scores no shard after the cancel, says so, and resumes when run again.
TEST_F(BatchJob, ACancelledJobStopsAndResumesLater) {
  std::string data = testing::data_path("lending_club.csv");
  ASSERT_TRUE(run_job(model_, spec(data, dir_.file("whole"))).ok());
  std::atomic<bool> cancel{false};
  JobSpec cancelled = spec(data, dir_.file("out"));
  cancelled.workers = 1;
  cancelled.cancel = &cancel;
  auto stopped = run_job(model_, cancelled, [&](std::size_t, std::size_t) { cancel = true; });
  ASSERT_TRUE(stopped.ok()) << stopped.status().message();
  EXPECT_EQ(stopped->manifest.state, "cancelled");
  EXPECT_NE(stopped->manifest.reason.find("cancelled"), std::string::npos);
  std::size_t done = 0;
  for (const auto& shard : stopped->manifest.shards) done += shard.state == "done" ? 1 : 0;
  EXPECT_EQ(done, 1u);  // the first shard finished and cancelled the rest
  EXPECT_EQ(read_job(dir_.file("out"))->state, "cancelled");
  auto resumed = run_job(model_, spec(data, dir_.file("out")));
  ASSERT_TRUE(resumed.ok()) << resumed.status().message();
  EXPECT_EQ(resumed->manifest.state, "finished");
  EXPECT_EQ(resumed->shards_skipped, 1u);
  EXPECT_EQ(rows_of(dir_.file("out")), rows_of(dir_.file("whole")));
}

// An input rewritten while the job reads it fails the job, and its manifest says so (`batch
// status` must not call it resumable: the rewritten input is another job).
TEST_F(BatchJob, AnInputChangedMidJobFailsItInTheManifestToo) {
  std::string data = dir_.file("loans.csv");
  fs::copy_file(testing::data_path("lending_club.csv"), data);
  JobSpec job = spec(data, dir_.file("out"));
  job.workers = 1;
  bool rewritten = false;
  auto outcome = run_job(model_, job, [&](std::size_t, std::size_t) {
    if (rewritten) return;
    rewritten = true;
    std::ofstream(data, std::ios::app) << "\n";
  });
  ASSERT_FALSE(outcome.ok());
  EXPECT_NE(outcome.status().message().find("changed"), std::string::npos) << outcome.status().message();
  auto manifest = read_job(dir_.file("out"));
  ASSERT_TRUE(manifest.ok());
  EXPECT_EQ(manifest->state, "failed");
  EXPECT_EQ(manifest->reason, outcome.status().message());
}

TEST_F(BatchJob, BadRowsGoToTheErrorsFilesUntilTheRateIsPassed) {
  std::string data = dir_.file("rows.csv");
  std::string text = *read_file(testing::data_path("lending_club.csv"));
  std::istringstream input(text);
  std::string header, line, out;
  std::getline(input, header);
  out = header + "\n";
  for (int row = 1; row <= 200 && std::getline(input, line); ++row) {
    if (row == 7) line = "12000" + line.substr(line.find(','));   // fine
    if (row == 10) line = "abc" + line.substr(line.find(','));    // funded_amnt is not a number
    if (row == 20) line = "1e999" + line.substr(line.find(','));  // infinite
    if (row == 30) line = "1,2,3";                                // wrong field count
    out += line + "\n";
  }
  testing::write_text(data, out);
  JobSpec job = spec(data, dir_.file("bad"));
  job.max_error_rate = 0.01;  // 2 of 200 allowed: 3 are bad
  job.workers = 1;
  auto failed = run_job(model_, job);
  ASSERT_TRUE(failed.ok()) << failed.status().message();
  EXPECT_EQ(failed->manifest.state, "failed");
  EXPECT_NE(failed->manifest.reason.find("3 of 200 rows are bad (1.50%), above --max-error-rate 0.01"),
            std::string::npos)
      << failed->manifest.reason;
  EXPECT_EQ(read_job(dir_.file("bad"))->state, "failed");
  job.max_error_rate = 0.02;
  auto finished = run_job(model_, job);
  ASSERT_TRUE(finished.ok()) << finished.status().message();
  EXPECT_EQ(finished->manifest.scored, 197u);
  EXPECT_EQ(finished->manifest.bad, 3u);
  std::string errors;
  for (int shard = 0; shard < 4; ++shard) {
    std::string part = *read_file(dir_.file("bad") + "/errors-0000" + std::to_string(shard) + ".csv");
    errors += part.substr(part.find('\n') + 1);
  }
  EXPECT_NE(errors.find("10,,\"input 'funded_amnt' holds 'abc', not a finite number\""), std::string::npos) << errors;
  EXPECT_NE(errors.find("20,,\"input 'funded_amnt' holds '1e999', not a finite number\""), std::string::npos) << errors;
  EXPECT_NE(errors.find("30,31,\"expected 23 fields as in the header, found 3\""), std::string::npos) << errors;
  std::string scored = rows_of(dir_.file("bad"));
  EXPECT_EQ(scored.find("\n10,"), std::string::npos);
  EXPECT_NE(scored.find("\n11,"), std::string::npos);
}

TEST_F(BatchJob, AFolderThatHoldsAnythingElseIsRefused) {
  std::string data = testing::data_path("lending_club.csv");
  ASSERT_TRUE(run_job(model_, spec(data, dir_.file("out"))).ok());
  JobSpec other = spec(data, dir_.file("out"));
  other.format = "jsonl";  // another output spec: another job
  auto refused = run_job(model_, other);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("holds another batch job"), std::string::npos);
  fs::create_directories(dir_.file("busy"));
  testing::write_text(dir_.file("busy") + "/notes.txt", "mine");
  EXPECT_NE(run_job(model_, spec(data, dir_.file("busy"))).status().message().find("is not empty"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir_.file("busy") + "/.slipway-batch.lock"));  // a refused folder is left as it was
  // A first manifest write killed mid-way leaves only its temp file: the folder is still the job's.
  fs::create_directories(dir_.file("killed"));
  testing::write_text(dir_.file("killed") + "/.manifest.json.tmp-0123456789ab", "{");
  EXPECT_TRUE(run_job(model_, spec(data, dir_.file("killed"))).ok());
  // A manifest that does not describe the input is not trusted.
  auto manifest = *read_job(dir_.file("killed"));
  manifest.state = "running";
  manifest.shards[1].first_row += 1;
  ASSERT_TRUE(write_file_atomic(dir_.file("killed") + "/manifest.json", manifest.to_json()).ok());
  EXPECT_EQ(run_job(model_, spec(data, dir_.file("killed"))).status().code(), StatusCode::kDataLoss);
  JobSpec bad = spec(data, dir_.file("x"));
  bad.max_error_rate = 2;
  EXPECT_EQ(run_job(model_, bad).status().code(), StatusCode::kInvalidArgument);
  bad = spec(dir_.file("missing.csv"), dir_.file("x"));
  EXPECT_EQ(run_job(model_, bad).status().code(), StatusCode::kNotFound);
  testing::write_text(dir_.file("narrow.csv"), "funded_amnt\n1\n");
  auto narrow = run_job(model_, spec(dir_.file("narrow.csv"), dir_.file("narrow")));
  EXPECT_NE(narrow.status().message().find("the input has no column 'term'"), std::string::npos)
      << narrow.status().message();
}

// Shards are byte ranges cut on record boundaries, read one at a time: a quoted newline, blank
// lines and CRLF endings number rows and lines as the whole file does, whatever the shard count.
TEST_F(BatchJob, ShardsCutOnRecordsNumberRowsAsTheWholeFile) {
  std::string text = *read_file(testing::data_path("lending_club.csv"));
  std::istringstream input(text);
  std::string header, line, out;
  std::getline(input, header);
  out = header + "\r\n\r\n";
  for (int row = 1; row <= 300 && std::getline(input, line); ++row) {
    if (row == 40)
      line = line.substr(0, line.find("\"term_")) + "\"term\n36\"" + line.substr(line.find(',', line.find("\"term_")));
    if (row == 90) line = "abc" + line.substr(line.find(','));  // bad: a number that is not
    if (row == 120) line = "1,2,3";                             // bad: three fields
    out += line + (row % 50 == 0 ? "\r\n\r\n" : "\r\n");
  }
  testing::write_text(dir_.file("rows.csv"), out);
  auto errors_and_rows = [&](std::size_t shards, const std::string& folder) {
    JobSpec job = spec(dir_.file("rows.csv"), dir_.file(folder));
    job.shards = shards;
    job.max_error_rate = 0.5;
    auto done = run_job(model_, job);
    EXPECT_TRUE(done.ok()) << done.status().message();
    std::string errors;
    for (std::size_t shard = 0; shard < shards; ++shard) {
      char name[48];
      std::snprintf(name, sizeof name, "/errors-%05zu.csv", shard);
      std::string part = *read_file(dir_.file(folder) + name);
      errors += part.substr(part.find('\n') + 1);
    }
    return std::make_pair(errors, rows_of(dir_.file(folder)));
  };
  auto whole = errors_and_rows(1, "one");
  EXPECT_EQ(whole.first,
            "90,,\"input 'funded_amnt' holds 'abc', not a finite number\"\n"
            "120,125,\"expected 23 fields as in the header, found 3\"\n");
  EXPECT_NE(whole.second.find("\n300,lending@1,"), std::string::npos);
  EXPECT_EQ(errors_and_rows(7, "seven"), whole);
  EXPECT_EQ(errors_and_rows(64, "many"), whole);  // more shards than some records: empty ones

  // A malformed record in a late shard is named by its line in the file, as a whole read names it.
  std::string broken = out + "12\"3,x\n";
  testing::write_text(dir_.file("broken.csv"), broken);
  auto whole_error = run_job(model_, spec(dir_.file("broken.csv"), dir_.file("broken1")));
  JobSpec sharded = spec(dir_.file("broken.csv"), dir_.file("broken7"));
  sharded.shards = 7;
  auto shard_error = run_job(model_, sharded);
  EXPECT_NE(whole_error.status().message().find(":310:3: quote inside an unquoted field"), std::string::npos)
      << whole_error.status().message();
  EXPECT_EQ(shard_error.status().message(), whole_error.status().message());
  // A last line that is a lone CR is a (bad) row to the reader, and so to the scan.
  std::string twenty = header + "\n";
  {
    std::istringstream rows(text);
    std::string skip_header, row_text;
    std::getline(rows, skip_header);
    for (int row = 0; row < 20 && std::getline(rows, row_text); ++row) twenty += row_text + "\n";
  }
  testing::write_text(dir_.file("cr.csv"), twenty + "\r");
  JobSpec cr = spec(dir_.file("cr.csv"), dir_.file("cr"));
  cr.max_error_rate = 1;
  auto with_cr = run_job(model_, cr);
  EXPECT_TRUE(with_cr.ok()) << with_cr.status().message();

  // A record that never ends (an unterminated quote) is refused before anything is held.
  std::string endless = header + "\n\"" + std::string((std::size_t{65} << 20), 'x');
  testing::write_text(dir_.file("endless.csv"), endless);
  auto refused = run_job(model_, spec(dir_.file("endless.csv"), dir_.file("endless")));
  EXPECT_NE(refused.status().message().find("longer than 64 MiB (an unterminated quote"), std::string::npos)
      << refused.status().message();
  JobSpec one_shard = spec(dir_.file("endless.csv"), dir_.file("endless"));
  one_shard.shards = 1;
  testing::write_text(dir_.file("big.csv"), header + "\n" + std::string((std::size_t{257} << 20), '\n'));
  one_shard.data = dir_.file("big.csv");
  EXPECT_NE(run_job(model_, one_shard).status().message().find("give more --shards"), std::string::npos);
}

TEST_F(BatchJob, JsonLinesInAndOut) {
  std::string data = dir_.file("rows.jsonl");
  auto table = testing::lending_rows(0, 50);
  std::string text;
  for (std::size_t row = 0; row < table.row_count(); ++row) {
    JsonWriter json;
    json.begin_object();
    for (const auto& column : table.columns()) {
      json.key(column.name);
      if (column.type == data::ColumnType::kNumeric) {
        json.value(column.numbers[row]);
      } else {
        json.value(column.text_at(row));
      }
    }
    json.end_object();
    text += json.str() + "\n";
  }
  // A key no row has is misspelt, refused at once; one that some shards lack is missing there.
  testing::write_text(dir_.file("typo.jsonl"), "{\"funded_amont\": 1000}\n{\"int_rate\": 9.5}\n");
  auto typo = run_job(model_, spec(dir_.file("typo.jsonl"), dir_.file("typo")));
  EXPECT_NE(typo.status().message().find("has the input 'funded_amnt'"), std::string::npos) << typo.status().message();
  // An id that a float would change keeps every digit (the row's inputs are missing: imputed).
  testing::write_text(data, text + "{\"addr_state\": 12345678901}\n");
  JobSpec job = spec(data, dir_.file("out"));
  job.format = "jsonl";
  job.id_column = "addr_state";
  auto done = run_job(model_, job);
  ASSERT_TRUE(done.ok()) << done.status().message();
  EXPECT_EQ(done->manifest.scored, 51u);
  EXPECT_NE(rows_of(dir_.file("out"), "jsonl").find("{\"row\":51,\"addr_state\":\"12345678901\""), std::string::npos);
  std::string rows = rows_of(dir_.file("out"), "jsonl");
  EXPECT_EQ(rows.rfind("{\"row\":1,\"addr_state\":\"", 0), 0u) << rows.substr(0, 200);
  EXPECT_NE(rows.find("\"model\":\"lending@1\",\"probability\":"), std::string::npos);
  auto predictions = model_.bundle->predict(table);
  auto first = rows.find("\"probability\":") + 14;
  EXPECT_EQ(std::stof(rows.substr(first, rows.find(',', first) - first)), predictions->scores[0]);
}

}  // namespace
}  // namespace slipway::batch
