// The real binary, end to end: train, register, inspect, evaluate, predict, and the errors users hit.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "slipway/core.h"
#include "support/test_support.h"

namespace slipway::testing {
namespace {

// A webhook receiver on 127.0.0.1: keeps each request's body and answers 200.
class WebhookReceiver {
 public:
  WebhookReceiver() {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    (void)::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address);  // port 0: any free port
    ::listen(listener_, 8);
    socklen_t length = sizeof address;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~WebhookReceiver() {
    ::shutdown(listener_, SHUT_RDWR);
    ::close(listener_);
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/hook"; }
  std::vector<std::string> bodies() {
    std::lock_guard lock(mutex_);
    return bodies_;
  }

 private:
  void serve() {
    while (true) {
      int connection = ::accept(listener_, nullptr, nullptr);
      if (connection < 0) return;
      std::string request;
      char buffer[4096];
      std::size_t wanted = std::string::npos;
      while (wanted == std::string::npos || request.size() < wanted) {
        ssize_t read = ::recv(connection, buffer, sizeof buffer, 0);
        if (read <= 0) break;
        request.append(buffer, static_cast<std::size_t>(read));
        auto end = request.find("\r\n\r\n");
        auto length = request.find("Content-Length: ");
        if (end != std::string::npos && length != std::string::npos) {
          wanted = end + 4 + std::stoul(request.substr(length + 16));
        }
      }
      {
        std::lock_guard lock(mutex_);
        bodies_.push_back(request.substr(request.find("\r\n\r\n") + 4));
      }
      std::string answer = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
      (void)::send(connection, answer.data(), answer.size(), 0);
      ::close(connection);
    }
  }
  int listener_ = -1;
  int port_ = 0;
  std::mutex mutex_;
  std::vector<std::string> bodies_;
  std::thread thread_;
};

class CliTest : public ::testing::Test {
 protected:
  CommandResult slipway(std::vector<std::string> args) {
    args.insert(args.begin(), {slipway_binary(), "--home", home_.path()});
    return run_command(args);
  }
  CommandResult train_lending(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"--json",   "train",     "--data",  data_path("lending_club.csv"),
                                     "--target", "Class",     "--split", "stratified",
                                     "--slice",  "addr_state"};
    args.insert(args.end(), extra.begin(), extra.end());
    return slipway(args);
  }
  static std::string json_string(const std::string& json, const std::string& key) {
    auto at = json.find("\"" + key + "\":\"");
    if (at == std::string::npos) return "";
    at += key.size() + 4;
    return json.substr(at, json.find('"', at) - at);
  }
  TempDir home_;
};

TEST_F(CliTest, TrainRegisterInspectEvaluatePredict) {
  ASSERT_EQ(slipway({"init"}).exit_code, 0);
  auto trained = train_lending({"--register", "lending"});
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  // --json: exactly one JSON document on stdout.
  EXPECT_EQ(trained.out.front(), '{');
  EXPECT_EQ(trained.out.find('\n'), trained.out.size() - 1);
  EXPECT_NE(trained.out.find("\"duplicate_test_rows\":0"), std::string::npos);
  EXPECT_NE(trained.out.find("\"registered\":{\"model\":\"lending\",\"version\":1}"), std::string::npos);
  EXPECT_NE(trained.out.find("\"value\":\"CA\""), std::string::npos);
  std::string run_id = json_string(trained.out, "run_id");
  std::string sha = json_string(trained.out, "bundle_sha256");
  ASSERT_EQ(run_id.size(), 32u);
  ASSERT_EQ(sha.size(), 64u);

  // Same data, spec and seed: the same bundle bytes, so the same identity.
  auto again = train_lending({"--register", "lending"});
  EXPECT_EQ(json_string(again.out, "bundle_sha256"), sha);

  auto models = slipway({"models"});
  EXPECT_EQ(models.exit_code, 0);
  EXPECT_NE(models.out.find("lending"), std::string::npos);
  auto versions = slipway({"versions", "lending"});
  EXPECT_NE(versions.out.find(sha.substr(0, 12)), std::string::npos);
  auto alias = slipway({"alias", "lending@1", "production"});
  EXPECT_EQ(alias.exit_code, 0) << alias.err;
  EXPECT_NE(slipway({"--json", "versions", "lending"}).out.find("\"aliases\":[\"production\"]"), std::string::npos);
  auto runs = slipway({"runs"});
  EXPECT_NE(runs.out.find(run_id), std::string::npos);
  auto show = slipway({"show", run_id});
  EXPECT_EQ(show.exit_code, 0);
  EXPECT_NE(show.out.find("split: stratified"), std::string::npos);
  EXPECT_NE(show.out.find("test_auc"), std::string::npos);

  auto evaluated = slipway({"eval", "lending@production", "--data", data_path("lending_club.csv"), "--slice", "term"});
  EXPECT_EQ(evaluated.exit_code, 0) << evaluated.err;
  EXPECT_NE(evaluated.out.find("term=term_36"), std::string::npos);

  std::string scored = home_.file("scored.csv");
  auto predicted = slipway({"predict", "lending", "--data", data_path("lending_club.csv"), "--out", scored});
  ASSERT_EQ(predicted.exit_code, 0) << predicted.err;
  auto text = *slipway::read_file(scored);
  EXPECT_EQ(text.substr(0, text.find('\n')), "probability,label");
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 9858);
  auto as_json = slipway({"--json", "predict", "lending@1", "--data", data_path("lending_club.csv")});
  ASSERT_EQ(as_json.exit_code, 0) << as_json.err;
  EXPECT_EQ(as_json.out.rfind("{\"model\":\"lending@1\",\"rows\":9857,\"predictions\":[{\"probability\":", 0), 0u);
}

// `compare` exits like diff: 0 when two models agree within the tolerance, 1 when they do not,
// 2 when the comparison cannot be made.
// Under a file size limit (`ulimit -f`) a write fails with an error naming it, instead of the
// process dying by SIGXFSZ (exit 153); a workspace whose creation was stopped so says so.
TEST_F(CliTest, AFileSizeLimitIsAnErrorNotADeath) {
  auto limited =
      run_command({"/bin/sh", "-c", "ulimit -f 8; exec \"$0\" --home \"$1\" train --data \"$2\" --target Class",
                   slipway_binary(), home_.path() + "/small", data_path("lending_club.csv")});
  EXPECT_EQ(limited.exit_code, 1) << limited.err;
  EXPECT_NE(limited.err.find("error: "), std::string::npos) << limited.err;
  auto runs = run_command({slipway_binary(), "--home", home_.path() + "/small", "runs"});
  EXPECT_NE(runs.exit_code, 0);
  EXPECT_NE(runs.err.find("slipway init"), std::string::npos) << runs.err;
}

TEST_F(CliTest, CompareExitsLikeDiff) {
  ASSERT_EQ(slipway({"init"}).exit_code, 0);
  ASSERT_EQ(train_lending({"--register", "lending"}).exit_code, 0);
  auto trees = train_lending({"--register", "lending", "--model", "gbdt", "--param", "rounds=10", "--no-progress"});
  ASSERT_EQ(trees.exit_code, 0) << trees.err;
  std::string golden = data_path("lending_club.csv");

  auto same = slipway({"compare", "lending@1", "lending@1", "--data", golden, "--tolerance", "0"});
  EXPECT_EQ(same.exit_code, 0) << same.err;
  EXPECT_NE(same.out.find("ok: every output is within the tolerance"), std::string::npos) << same.out;

  auto differ = slipway({"compare", "lending@1", "lending@2", "--data", golden, "--slice", "term", "--worst", "3"});
  EXPECT_EQ(differ.exit_code, 1) << differ.err;
  EXPECT_NE(differ.out.find("worst slice: term="), std::string::npos) << differ.out;
  EXPECT_NE(differ.out.find("largest differences"), std::string::npos);
  EXPECT_NE(differ.out.find("row(s) differ beyond the tolerance"), std::string::npos);

  auto as_json = slipway({"--json", "compare", "lending@1", "lending@2", "--data", golden, "--tolerance", "0.5"});
  EXPECT_EQ(as_json.out.front(), '{');
  EXPECT_EQ(as_json.out.find('\n'), as_json.out.size() - 1);
  EXPECT_NE(as_json.out.find("\"quality\":{\"metric\":\"auc\""), std::string::npos) << as_json.out;
  EXPECT_NE(as_json.out.find(as_json.exit_code == 0 ? "\"within_tolerance\":true" : "\"within_tolerance\":false"),
            std::string::npos);

  ASSERT_EQ(slipway({"train", "--data", data_path("chicago_ridership.csv"), "--target", "ridership", "--model",
                     "linear", "--out", home_.file("chicago.slip")})
                .exit_code,
            0);
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  std::vector<Case> cases = {
      {{"compare", "lending@1", "lending@2", "--data", golden, "--tolerance", "-1"}, "tolerance"},
      {{"compare", "lending@1", "lending@2", "--data", golden, "--tolerance", "nan"}, "tolerance"},
      {{"compare", "lending@1", "ghost", "--data", golden}, "ghost"},
      {{"compare", "lending@1", home_.file("chicago.slip"), "--data", golden}, "different questions"},
      {{"compare", "lending@1", "lending@2", "--data", golden, "--slice", "state"}, "'state'"},
  };
  for (const auto& test_case : cases) {
    auto result = slipway(test_case.args);
    EXPECT_EQ(result.exit_code, 2) << test_case.message << ": " << result.err;
    EXPECT_NE(result.err.find(test_case.message), std::string::npos) << result.err;
  }
}

// Gates: pass, fail per slice, could-not-run; results recorded with the versions; deploy --gate
// refuses a version that fails; approvals and the audit log.
TEST_F(CliTest, GatesApprovalsAndTheAuditLog) {
  ASSERT_EQ(train_lending({"--register", "lending"}).exit_code, 0);
  auto trees = train_lending({"--register", "lending", "--model", "gbdt", "--param", "rounds=10", "--no-progress"});
  ASSERT_EQ(trees.exit_code, 0) << trees.err;
  std::string golden = data_path("lending_club.csv");
  auto same = slipway({"gate", "lending@1", "--baseline", "lending@1", "--data", golden, "--metric", "auc",
                       "--max-drop", "0", "--slice", "term"});
  EXPECT_EQ(same.exit_code, 0) << same.out << same.err;
  EXPECT_NE(same.out.find("passed"), std::string::npos) << same.out;
  EXPECT_NE(same.out.find("term_60"), std::string::npos) << same.out;
  auto impossible =
      slipway({"gate", "lending@2", "--baseline", "lending@1", "--data", golden, "--metric", "auc", "--min", "0.99"});
  EXPECT_EQ(impossible.exit_code, 1) << impossible.err;
  EXPECT_NE(impossible.out.find("FAIL: "), std::string::npos) << impossible.out;
  EXPECT_NE(impossible.out.find("below the minimum 0.99"), std::string::npos) << impossible.out;
  EXPECT_EQ(
      slipway({"gate", "lending@2", "--baseline", "lending@1", "--data", golden, "--metric", "rmse", "--max-drop", "1"})
          .exit_code,
      2);  // not a classifier's metric
  EXPECT_EQ(slipway({"gate", "lending@2", "--baseline", "lending@1", "--data", golden, "--metric", "auc"}).exit_code,
            2);  // no threshold

  ASSERT_EQ(slipway({"deploy", "web", "lending@1", "--require-approval", "no"}).exit_code, 0);
  auto gated =
      slipway({"deploy", "web", "lending@2", "--gate-data", golden, "--gate-metric", "auc", "--gate-min", "0.99"});
  EXPECT_EQ(gated.exit_code, 1);
  EXPECT_NE(gated.err.find("the gate failed, so lending@2 was not deployed"), std::string::npos) << gated.err;
  EXPECT_NE(slipway({"--json", "endpoints"}).out.find("\"version\":1,\"percent\":100"), std::string::npos);

  ASSERT_EQ(slipway({"deploy", "web", "--require-approval", "yes", "--owner", "risk-oncall"}).exit_code, 0);
  auto unapproved = slipway({"deploy", "web", "lending@2"});
  EXPECT_EQ(unapproved.exit_code, 1);
  EXPECT_NE(unapproved.err.find("lending@2 is not approved"), std::string::npos) << unapproved.err;
  EXPECT_NE(slipway({"approve", "lending@2"}).exit_code, 0);  // a note is required
  ASSERT_EQ(slipway({"approve", "lending@2", "--note", "better on the holdout"}).exit_code, 0);
  auto passed =
      slipway({"deploy", "web", "lending@2", "--gate-data", golden, "--gate-metric", "auc", "--gate-max-drop", "0.5"});
  EXPECT_EQ(passed.exit_code, 0) << passed.err;

  auto described = slipway({"describe", "web"});
  EXPECT_NE(described.out.find("Owner: risk-oncall. Takes approved versions only."), std::string::npos)
      << described.out;
  EXPECT_NE(described.out.find("Approved by "), std::string::npos);
  EXPECT_NE(described.out.find("Gate passed against lending@1 (auc max_drop=0.5"), std::string::npos) << described.out;
  ASSERT_EQ(
      slipway({"annotate", "lending@2", "--tag", "stage=production", "--description", "GBDT, 10 rounds"}).exit_code, 0);
  EXPECT_NE(slipway({"versions", "lending"}).out.find("stage=production"), std::string::npos);

  auto audit = slipway({"audit", "--model", "lending", "--since", "1h"});
  ASSERT_EQ(audit.exit_code, 0) << audit.err;
  for (const char* action :
       {"model.register", "gate.pass", "gate.fail", "model.approve", "endpoint.deploy", "model.annotate"}) {
    EXPECT_NE(audit.out.find(action), std::string::npos) << action << "\n" << audit.out;
  }
  EXPECT_EQ(slipway({"audit", "--since", "last week"}).exit_code, 1);
  auto verified = slipway({"verify"});
  EXPECT_EQ(verified.exit_code, 0) << verified.out;  // gate reports are referenced artifacts, not orphans

  // Lineage: data -> run -> bundle -> version -> what exposes it, and back down from the data.
  auto upstream = slipway({"lineage", "lending@2"});
  ASSERT_EQ(upstream.exit_code, 0) << upstream.err;
  for (const char* expected :
       {"data ", "-> (input) train run ", "-> (output) bundle ", "-> (registered) lending@2   <== this",
        "-> (routes 100%) endpoint web", "-> (candidate) gate passed (auc max_drop=0.5)"}) {
    EXPECT_NE(upstream.out.find(expected), std::string::npos) << expected << "\n" << upstream.out;
  }
  EXPECT_EQ(upstream.out.find("(registered) lending@1"), std::string::npos) << upstream.out;  // a sibling, not a source
  auto downstream = slipway({"lineage", golden, "--downstream"});
  ASSERT_EQ(downstream.exit_code, 0) << downstream.err;
  EXPECT_NE(downstream.out.find("(registered) lending@1"), std::string::npos) << downstream.out;
  EXPECT_NE(downstream.out.find("(registered) lending@2"), std::string::npos) << downstream.out;
  EXPECT_EQ(slipway({"lineage", "lending@1", "--dot"}).out.rfind("digraph lineage {", 0), 0u);
  EXPECT_NE(slipway({"--json", "lineage", "lending@1"}).out.find("\"start\":\"version:lending@1\""), std::string::npos);
  EXPECT_NE(slipway({"lineage", "ghost@1"}).exit_code, 0);

  // Retire: refused while an endpoint routes to the version; then kept, but not deployable.
  auto in_use = slipway({"retire", "lending@2"});
  EXPECT_EQ(in_use.exit_code, 1);
  EXPECT_NE(in_use.err.find("endpoint 'web' routes to lending@2"), std::string::npos) << in_use.err;
  ASSERT_EQ(slipway({"retire", "lending@1"}).exit_code, 0);
  EXPECT_NE(slipway({"versions", "lending"}).out.find("retired"), std::string::npos);
  EXPECT_NE(slipway({"deploy", "web", "lending@1"}).err.find("is retired"), std::string::npos);
  auto collected = slipway({"gc"});
  EXPECT_EQ(collected.exit_code, 0) << collected.err;
  EXPECT_NE(collected.out.find("a dry run"), std::string::npos) << collected.out;
}

// A finished run trained again from its record gives the same bundle; changed data is refused.
TEST_F(CliTest, ReproduceGivesTheSameBundleAndRefusesChangedData) {
  std::string data = home_.file("loans.csv");
  std::filesystem::copy_file(data_path("lending_club.csv"), data);
  auto trained = slipway({"--json", "train", "--data", data, "--target", "Class", "--model", "gbdt", "--param",
                          "rounds=15", "--no-progress"});
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  std::string run = json_string(trained.out, "run_id");
  ASSERT_FALSE(run.empty()) << trained.out;
  auto same = slipway({"reproduce", run});
  EXPECT_EQ(same.exit_code, 0) << same.out << same.err;
  EXPECT_NE(same.out.find("identical"), std::string::npos) << same.out;
  EXPECT_EQ(slipway({"runs"}).out.find(run), slipway({"runs"}).out.rfind(run));  // no new run recorded here

  std::ofstream(data, std::ios::app)
      << "1000,term_36,10.0,B1,CA,Verified,50000,emp_3,0,0,10.0,0,0,0,0,0,10,0,0,0,0,0,good\n";
  auto changed = slipway({"reproduce", run});
  EXPECT_EQ(changed.exit_code, 2);
  EXPECT_NE(changed.err.find("has changed"), std::string::npos) << changed.err;
  EXPECT_EQ(slipway({"reproduce", "0123456789abcdef0123456789abcdef"}).exit_code, 2);

  // A test file named by a relative path, from the folder it is in: the replay reads it by the
  // absolute path the run recorded and gives the same bytes.
  std::string rows = slipway::read_file(data_path("lending_club.csv")).value();
  std::size_t header_end = rows.find('\n') + 1;
  std::size_t cut = header_end;
  for (int line = 0; line < 2000; ++line) cut = rows.find('\n', cut) + 1;
  write_text(home_.file("holdout.csv"), rows.substr(0, cut));
  write_text(home_.file("fit.csv"), rows.substr(0, header_end) + rows.substr(cut));
  auto relative = run_command({"/bin/sh", "-c",
                               "cd '" + home_.path() + "' && exec '" + slipway_binary() + "' --home '" + home_.path() +
                                   "' --json train --data fit.csv --test holdout.csv --target Class --no-progress"});
  ASSERT_EQ(relative.exit_code, 0) << relative.err;
  auto replayed = slipway({"reproduce", json_string(relative.out, "run_id")});
  EXPECT_EQ(replayed.exit_code, 0) << replayed.out << replayed.err;
  EXPECT_NE(replayed.out.find("identical"), std::string::npos) << replayed.out;
}

// The step cache: a train or eval whose inputs match an earlier one is reused and says so;
// --no-cache, changed data or changed parameters compute again.
TEST_F(CliTest, TrainAndEvalReuseAnEarlierStepWithTheSameInputs) {
  std::string data = home_.file("loans.csv");
  std::filesystem::copy_file(data_path("lending_club.csv"), data);
  std::vector<std::string> train = {"--json",     "train",   "--data",       data,      "--target",
                                    "Class",      "--model", "gbdt",         "--param", "rounds=12",
                                    "--register", "loans",   "--no-progress"};
  auto first = slipway(train);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(json_string(first.out, "cached_from"), "");
  auto second = slipway(train);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(json_string(second.out, "cached_from"), json_string(first.out, "run_id"));
  EXPECT_NE(json_string(second.out, "run_id"), json_string(first.out, "run_id"));  // a run of its own
  EXPECT_EQ(json_string(second.out, "bundle_sha256"), json_string(first.out, "bundle_sha256"));
  EXPECT_NE(second.out.find("\"registered\":{\"model\":\"loans\",\"version\":2}"), std::string::npos) << second.out;
  EXPECT_NE(second.out.find("\"test_rows\":1971"), std::string::npos) << second.out;
  EXPECT_NE(second.err.find("reused run " + json_string(first.out, "run_id")), std::string::npos) << second.err;
  auto shown = slipway({"show", json_string(second.out, "run_id")});
  EXPECT_NE(shown.out.find("cached_from"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("test_auc"), std::string::npos) << shown.out;

  auto forced = train;
  forced.push_back("--no-cache");
  EXPECT_EQ(json_string(slipway(forced).out, "cached_from"), "");
  auto other_params = train;
  other_params[7] = "rounds=13";
  EXPECT_EQ(json_string(slipway(other_params).out, "cached_from"), "");

  std::vector<std::string> eval = {"--json", "eval", "loans@1", "--data", data, "--slice", "term"};
  auto evaluated = slipway(eval);
  ASSERT_EQ(evaluated.exit_code, 0) << evaluated.err;
  EXPECT_NE(evaluated.out.find("\"cached\":false"), std::string::npos);
  auto again = slipway(eval);
  EXPECT_NE(again.out.find("\"cached\":true"), std::string::npos) << again.out;
  auto metrics_of = [](const std::string& out) { return out.substr(out.find("\"metrics\"")); };
  EXPECT_EQ(metrics_of(again.out), metrics_of(evaluated.out));  // every digit, every slice
  eval.push_back("--no-cache");
  EXPECT_NE(slipway(eval).out.find("\"cached\":false"), std::string::npos);

  // The same path with other bytes is other data, for both steps.
  std::ofstream(data, std::ios::app)
      << "1000,term_36,10.0,B1,CA,Verified,50000,emp_3,0,0,10.0,0,0,0,0,0,10,0,0,0,0,0,good\n";
  eval.pop_back();
  EXPECT_NE(slipway(eval).out.find("\"cached\":false"), std::string::npos);
  EXPECT_EQ(json_string(slipway(train).out, "cached_from"), "");
}

// slipway batch as a user runs it: killed at the worst moment and at random moments, it resumes
// into exactly the rows of an uninterrupted run; run again it does nothing; lineage shows it.
TEST_F(CliTest, BatchResumesAfterKillsIntoTheRowsOfAnUninterruptedRun) {
  ASSERT_EQ(train_lending({"--register", "lending"}).exit_code, 0);
  // Ten copies of the lending rows: 98,570 rows, enough to kill a job mid-way.
  std::string big = home_.file("big.csv");
  {
    std::string text = *slipway::read_file(data_path("lending_club.csv"));
    std::string body = text.substr(text.find('\n') + 1);
    std::ofstream out(big);
    out << text;
    for (int copy = 1; copy < 10; ++copy) out << body;
  }
  auto parts_of = [](const std::string& out) {
    std::string all;
    for (int shard = 0; std::filesystem::exists(out + "/part-" + std::string(5 - std::to_string(shard).size(), '0') +
                                                std::to_string(shard) + ".csv");
         ++shard) {
      std::string name =
          out + "/part-" + std::string(5 - std::to_string(shard).size(), '0') + std::to_string(shard) + ".csv";
      all += *slipway::read_file(name);
    }
    return all;
  };
  std::vector<std::string> job = {"batch",     "lending@1", "--data", big,          "--shards",      "24",
                                  "--workers", "1",         "--id",   "addr_state", "--no-progress", "--out"};
  auto with_out = [&](const std::string& out) {
    auto args = job;
    args.push_back(out);
    return args;
  };
  auto whole = slipway(with_out(home_.file("whole")));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_NE(whole.out.find("rows       98570 in the input: 98570 scored, 0 bad"), std::string::npos) << whole.out;
  std::string expected = parts_of(home_.file("whole"));
  ASSERT_FALSE(expected.empty());

  // The worst moment: a part written, the manifest not yet saying so.
  std::vector<std::string> args = {slipway_binary(), "--home", home_.path()};
  for (const auto& arg : with_out(home_.file("cut"))) args.push_back(arg);
  EXPECT_EQ(run_command(args, {"SLIPWAY_CRASH_AT=batch.after_part"}).exit_code, 128 + 9);
  EXPECT_NE(slipway({"batch", "status", home_.file("cut")}).out.find("state      interrupted: no process runs it"),
            std::string::npos);
  // Then kills at moments the job does not choose, each run carrying on from the last.
  for (int delay_ms : {25, 50, 75, 100}) {
    ChildProcess run(args);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    run.signal(SIGKILL);
    run.wait();
  }
  auto resumed = slipway(with_out(home_.file("cut")));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(parts_of(home_.file("cut")), expected);  // no row lost, none twice, the same bytes

  auto again = slipway(with_out(home_.file("cut")));
  EXPECT_NE(again.out.find("already finished: nothing to do"), std::string::npos) << again.out;
  auto status = slipway({"--json", "batch", "status", home_.file("cut")});
  EXPECT_NE(status.out.find("\"state\":\"finished\""), std::string::npos) << status.out;
  auto lineage = slipway({"--json", "lineage", "lending@1", "--downstream"});
  EXPECT_NE(lineage.out.find("\"type\":\"batch\""), std::string::npos) << lineage.out;

  auto other = slipway({"batch", "lending@1", "--data", data_path("lending_club.csv"), "--out", home_.file("cut")});
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(other.err.find("holds another batch job"), std::string::npos) << other.err;
  EXPECT_NE(slipway({"batch", "lending@1", "--data", big}).err.find("--out is required"), std::string::npos);
  EXPECT_NE(slipway({"batch", "status", home_.file("nowhere")}).exit_code, 0);
}

// The lending data set shuffled, each row with an id (loan_id) first; written in row ranges, as
// is or shifted.
class LoanFiles {
 public:
  enum class Shift {
    kNone,
    kAmountAndState,  // funded_amnt times 3, addr_state all "CA"
    kRatesUp,         // int_rate (the model's most important input) 15 points higher
  };
  LoanFiles() {
    std::istringstream lines(*slipway::read_file(data_path("lending_club.csv")));
    std::getline(lines, header_);
    for (std::string line; std::getline(lines, line);) rows_.push_back(line);
    std::mt19937 random(7);
    std::shuffle(rows_.begin(), rows_.end(), random);
  }
  std::size_t size() const { return rows_.size(); }
  void write(const std::string& path, std::size_t begin, std::size_t end, Shift shift = Shift::kNone) const {
    std::ofstream out(path);
    out << "loan_id," << header_ << "\n";
    for (std::size_t index = begin; index < end; ++index) {
      std::string row = rows_[index];
      // Fields: funded_amnt, term, int_rate, sub_grade, addr_state, ...
      auto field_start = [&row](int field) {
        std::size_t start = 0;
        for (int skipped = 0; skipped < field; ++skipped) start = row.find(',', start) + 1;
        return start;
      };
      auto replace_field = [&](int field, const std::function<std::string(const std::string&)>& value) {
        std::size_t start = field_start(field), end = row.find(',', start);
        row = row.substr(0, start) + value(row.substr(start, end - start)) + row.substr(end);
      };
      if (shift == Shift::kAmountAndState) {
        replace_field(0, [](const std::string& amount) {
          return amount.empty() ? amount : std::to_string(std::stod(amount) * 3);
        });
        replace_field(4, [](const std::string&) { return std::string("CA"); });
      } else if (shift == Shift::kRatesUp) {
        replace_field(
            2, [](const std::string& rate) { return rate.empty() ? rate : std::to_string(std::stod(rate) + 15); });
      }
      out << "L" << index << "," << row << "\n";
    }
  }

 private:
  std::string header_;
  std::vector<std::string> rows_;
};

// Retraining by policy: due on a drift alert (once per alert), on a schedule, or forced; the
// candidate continues boosting from the baseline on the new rows, is gated against it, registered
// only when it passes, and deployed only as the policy says; each retraining is in lineage.
TEST_F(CliTest, RetrainingFollowsItsPolicy) {
  LoanFiles loans;
  loans.write(home_.file("train.csv"), 0, 6000);
  loans.write(home_.file("new.csv"), 6000, loans.size(), LoanFiles::Shift::kRatesUp);
  std::string new_rows = home_.file("new.csv");
  ASSERT_EQ(slipway({"train", "--data", home_.file("train.csv"), "--target", "Class", "--model", "gbdt", "--param",
                     "rounds=30", "--ignore", "loan_id", "--register", "loans", "--no-progress"})
                .exit_code,
            0);
  // Mistakes are refused, each with what to do instead.
  auto refused = [&](std::vector<std::string> arguments) {
    arguments.insert(arguments.begin(), {"retrain", "policy"});
    auto result = slipway(arguments);
    EXPECT_NE(result.exit_code, 0);
    return result.err;
  };
  EXPECT_NE(refused({"loans"}).find("has no retrain policy"), std::string::npos);
  EXPECT_NE(refused({"loans", "--on", "drift"}).find("needs data"), std::string::npos);
  EXPECT_NE(refused({"loans", "--on", "drfit", "--data", new_rows}).find("did you mean 'drift'"), std::string::npos);
  EXPECT_NE(refused({"loans", "--on", "schedule", "--data", new_rows}).find("needs every"), std::string::npos);
  EXPECT_NE(refused({"loans", "--data", new_rows, "--deploy", "canary:150"}).find("from 0.01 to 99.99"),
            std::string::npos);
  // A share that rounds to 100% would store the stable route at 0% when the policy deploys.
  EXPECT_NE(refused({"loans", "--data", new_rows, "--deploy", "canary:99.999"}).find("rounds to 100"),
            std::string::npos);
  EXPECT_NE(refused({"loans", "--data", new_rows, "--endpoint", "web", "--deploy", "rollout:1e-300,100"})
                .find("a rollout step must be a percentage"),
            std::string::npos);
  EXPECT_NE(refused({"loans", "--data", new_rows, "--deploy", "full"}).find("needs the endpoint"), std::string::npos);
  EXPECT_NE(refused({"loans", "--data", new_rows, "--endpoint", "web", "--deploy", "rollout:10,50"}).find("end at 100"),
            std::string::npos);
  EXPECT_NE(refused({"loans", "--data", new_rows, "--gate-max-drop", "nan"}).find("finite"), std::string::npos);
  EXPECT_NE(refused({"loans", "--data", "traffic"}).find("id_column"), std::string::npos);
  EXPECT_NE(refused({"nobody", "--data", new_rows}).find("no model named 'nobody'"), std::string::npos);
  ASSERT_EQ(
      slipway({"retrain", "policy", "loans", "--on", "drift", "--data", new_rows, "--cooldown", "0", "--rounds", "10"})
          .exit_code,
      0);
  auto shown = slipway({"retrain", "policy", "loans"});
  EXPECT_NE(shown.out.find("rounds              10 "), std::string::npos) << shown.out;

  // Due once monitoring records the drift, and only once per alert.
  EXPECT_NE(slipway({"retrain", "loans", "--dry-run"}).out.find("not due: no drift alert fired"), std::string::npos);
  ASSERT_EQ(slipway({"monitor", "loans", "--data", new_rows, "--alert"}).exit_code, 0);
  auto dry = slipway({"retrain", "loans", "--dry-run"});
  EXPECT_NE(dry.out.find("would retrain: drift: input:int_rate firing for"), std::string::npos) << dry.out;
  auto retrained = slipway({"--json", "retrain", "loans", "--no-progress"});
  ASSERT_EQ(retrained.exit_code, 0) << retrained.err;
  EXPECT_NE(retrained.out.find("\"state\":\"registered\""), std::string::npos) << retrained.out;
  EXPECT_NE(retrained.out.find("\"candidate\":\"loans@2\""), std::string::npos) << retrained.out;
  EXPECT_NE(retrained.out.find("\"gate\":{\"data\":\"the new rows' held-out split (771 rows)\",\"metric\":\"auc\""),
            std::string::npos)
      << retrained.out;
  EXPECT_NE(slipway({"retrain", "loans"}).out.find("not due: no drift alert fired since the last retraining"),
            std::string::npos);
  auto lineage = slipway({"--json", "lineage", "loans@2"});
  EXPECT_NE(lineage.out.find("\"kind\":\"input (warm start)\""), std::string::npos) << lineage.out;
  EXPECT_NE(lineage.out.find("\"type\":\"retrain\""), std::string::npos) << lineage.out;

  // A gate it cannot pass: rejected, nothing registered, the failed gate kept in lineage.
  ASSERT_EQ(slipway({"retrain", "policy", "loans", "--gate-min", "0.99"}).exit_code, 0);
  auto rejected = slipway({"retrain", "loans", "--force"});
  ASSERT_EQ(rejected.exit_code, 0) << rejected.err;
  EXPECT_NE(rejected.out.find("  rejected (the gate failed (auc min=0.99): overall: "), std::string::npos)
      << rejected.out;
  EXPECT_EQ(slipway({"versions", "loans"}).out.find("\n3 "), std::string::npos);  // no version 3
  EXPECT_NE(slipway({"lineage", "loans@2", "--downstream"}).out.find("gate FAILED (retraining #2)"), std::string::npos);

  // Too few new rows to judge by: failed, and said so.
  ASSERT_EQ(slipway({"retrain", "policy", "loans", "--min-rows", "100000"}).exit_code, 0);
  auto too_few = slipway({"retrain", "loans", "--force"});
  EXPECT_EQ(too_few.exit_code, 1);
  EXPECT_NE(too_few.out.find("failed (3857 new rows, fewer than the policy's min_rows 100000)"), std::string::npos)
      << too_few.out;
  ASSERT_EQ(slipway({"retrain", "policy", "loans", "--min-rows", "200"}).exit_code, 0);

  // Killed after training: the next retraining finds it interrupted.
  ASSERT_EQ(slipway({"retrain", "policy", "loans", "--gate-max-drop", "0.5"}).exit_code, 0);
  EXPECT_NE(slipway({"retrain", "policy", "loans"}).out.find("min=0.99,max_drop=0.5"), std::string::npos);
  ASSERT_EQ(slipway({"retrain", "policy", "loans", "--gate", "max_drop=0"}).exit_code, 0);
  EXPECT_EQ(run_command({slipway_binary(), "--home", home_.path(), "retrain", "loans", "--force"},
                        {"SLIPWAY_CRASH_AT=retrain.after_train"})
                .exit_code,
            128 + 9);
  // On a schedule, with the rows and baseline of an earlier retraining: nothing to do.
  ASSERT_EQ(slipway({"retrain", "policy", "loans", "--on", "schedule", "--every", "1s"}).exit_code, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  auto scheduled = slipway({"retrain", "loans"});
  ASSERT_EQ(scheduled.exit_code, 0) << scheduled.err;
  EXPECT_NE(scheduled.out.find("loans: schedule: every 1s"), std::string::npos) << scheduled.out;
  EXPECT_NE(scheduled.out.find("nothing to do: the rows and the baseline are those of retraining #2 (rejected)"),
            std::string::npos)
      << scheduled.out;
  auto history = slipway({"retrain", "history", "loans"});
  EXPECT_NE(history.out.find("interrupted"), std::string::npos) << history.out;
  EXPECT_NE(history.out.find("rejected"), std::string::npos) << history.out;

  // Deployed as the policy says: a canary beside the endpoint's version.
  ASSERT_EQ(slipway({"deploy", "web", "loans@2"}).exit_code, 0);
  ASSERT_EQ(slipway({"retrain", "policy", "loans", "--endpoint", "web", "--deploy", "canary:20"}).exit_code, 0);
  auto deployed = slipway({"retrain", "loans", "--force"});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.err;
  EXPECT_NE(deployed.out.find("deployed: loans@3 to web: canary 20%"), std::string::npos) << deployed.out;
  EXPECT_NE(slipway({"endpoints"}).out.find("loans@3 20%, loans@2 80%"), std::string::npos);
  auto every_policy = slipway({"retrain", "--due"});
  EXPECT_EQ(every_policy.exit_code, 0) << every_policy.err;
  EXPECT_NE(every_policy.out.find("loans: "), std::string::npos) << every_policy.out;
  auto verified = slipway({"verify"});
  EXPECT_EQ(verified.exit_code, 0) << verified.out;  // the rejected gate's report is referenced, not orphaned
  EXPECT_NE(slipway({"retrain"}).err.find("give a model NAME, or --due"), std::string::npos);
  EXPECT_NE(slipway({"retrain", "policy", "loans", "--remove"}).out.find("removed"), std::string::npos);
  EXPECT_NE(slipway({"retrain", "loans"}).err.find("has no retrain policy"), std::string::npos);
}

// Skew of a file against the training distribution the bundle carries: a shifted copy (one
// numeric input scaled, one category remapped) is flagged on exactly those inputs; an unshifted
// hold-out on none.
TEST_F(CliTest, MonitorFlagsExactlyTheShiftedInputs) {
  LoanFiles loans;
  auto write_rows = [&](const std::string& name, std::size_t begin, std::size_t end, bool shift) {
    loans.write(home_.file(name), begin, end, shift ? LoanFiles::Shift::kAmountAndState : LoanFiles::Shift::kNone);
  };
  write_rows("train.csv", 0, 7000, false);
  write_rows("same.csv", 7000, loans.size(), false);
  write_rows("shifted.csv", 7000, loans.size(), true);
  ASSERT_EQ(slipway({"train", "--data", home_.file("train.csv"), "--target", "Class", "--model", "gbdt", "--param",
                     "rounds=30", "--ignore", "loan_id", "--register", "loans", "--no-progress"})
                .exit_code,
            0);
  auto same = slipway({"--json", "monitor", "loans", "--data", home_.file("same.csv")});
  ASSERT_EQ(same.exit_code, 0) << same.err;
  EXPECT_NE(same.out.find("\"drifted_inputs\":0,"), std::string::npos) << same.out;
  auto shifted = slipway({"--json", "monitor", "loans", "--data", home_.file("shifted.csv")});
  ASSERT_EQ(shifted.exit_code, 0) << shifted.err;
  EXPECT_NE(shifted.out.find("\"drifted_inputs\":2,"), std::string::npos) << shifted.out;
  for (const char* input : {"funded_amnt", "addr_state"}) {
    auto at = shifted.out.find(std::string("\"name\":\"") + input + "\"");
    ASSERT_NE(at, std::string::npos) << input;
    auto drifted = shifted.out.find("\"drifted\":", at);
    EXPECT_EQ(shifted.out.substr(drifted, 14), "\"drifted\":true") << input;
  }
  auto text_report =
      slipway({"monitor", "loans", "--data", home_.file("shifted.csv"), "--html", home_.file("drift.html")});
  EXPECT_NE(text_report.out.find("2 of 22 inputs drifted"), std::string::npos) << text_report.out;
  EXPECT_NE(same.out.find("\"attribution_drifted_inputs\":0"), std::string::npos) << same.out;
  // Attribution drift: the model's most important input (int_rate) and its companion sub_grade
  // held constant lose their share of the mean |TreeSHAP| attribution.
  {
    std::ifstream in(home_.file("same.csv"));
    std::ofstream out(home_.file("flat.csv"));
    std::string line;
    std::getline(in, line);
    out << line << "\n";
    while (std::getline(in, line)) {
      std::vector<std::string> fields;
      std::stringstream split(line);
      for (std::string field; std::getline(split, field, ',');) fields.push_back(field);
      fields[3] = "13.0";  // int_rate (after loan_id, funded_amnt, term)
      fields[4] = "C1";    // sub_grade
      for (std::size_t index = 0; index < fields.size(); ++index) out << (index ? "," : "") << fields[index];
      out << "\n";
    }
  }
  auto flat = slipway({"monitor", "loans", "--data", home_.file("flat.csv")});
  ASSERT_EQ(flat.exit_code, 0) << flat.err;
  EXPECT_NE(flat.out.find("moved by more than 0.1): "), std::string::npos) << flat.out;
  EXPECT_NE(flat.out.find("; int_rate 0."), std::string::npos) << flat.out;
  std::string page = *slipway::read_file(home_.file("drift.html"));
  EXPECT_EQ(page.rfind("<!doctype html>", 0), 0u);
  EXPECT_NE(page.find("<h2 id=\"funded_amnt\">funded_amnt <span class=\"drift\">drifted</span></h2><svg"),
            std::string::npos);
  EXPECT_EQ(page.find("<script"), std::string::npos);  // self-contained, readable offline
  EXPECT_EQ(page.find("http"), std::string::npos);
  // A baseline file instead of training: the same file is no drift at all.
  auto against_file = slipway(
      {"--json", "monitor", "loans", "--data", home_.file("shifted.csv"), "--baseline", home_.file("shifted.csv")});
  EXPECT_NE(against_file.out.find("\"drifted_inputs\":0,"), std::string::npos) << against_file.out;
  EXPECT_NE(slipway({"monitor", "loans"}).err.find("no request log for 'loans'"), std::string::npos);

  // Labels that arrive later, joined by id: the performance on the hold-out is the test's.
  auto ingested = slipway(
      {"labels", "ingest", home_.file("same.csv"), "--model", "loans", "--id-col", "loan_id", "--label-col", "Class"});
  ASSERT_EQ(ingested.exit_code, 0) << ingested.err;
  EXPECT_NE(ingested.out.find("2857 labels for loans (2857 new, 0 replaced)"), std::string::npos) << ingested.out;
  auto measured = slipway({"--json", "monitor", "loans", "--data", home_.file("same.csv"), "--id-col", "loan_id"});
  ASSERT_EQ(measured.exit_code, 0) << measured.err;
  EXPECT_NE(measured.out.find("\"performance\":{\"rows\":2857,\"unlabelled\":0,\"metrics\":{\"auc\":"),
            std::string::npos)
      << measured.out;
  auto measured_text = slipway({"monitor", "loans", "--data", home_.file("same.csv"), "--id-col", "loan_id"});
  EXPECT_NE(measured_text.out.find("performance on 2857 labelled rows (0 without a label): auc "), std::string::npos)
      << measured_text.out;
  auto sliced = slipway(
      {"--json", "monitor", "loans", "--data", home_.file("same.csv"), "--id-col", "loan_id", "--slice", "term"});
  ASSERT_EQ(sliced.exit_code, 0) << sliced.err;
  EXPECT_NE(sliced.out.find("\"slices\":[{\"value\":\"term_36\",\"rows\":"), std::string::npos) << sliced.out;
  EXPECT_NE(slipway({"monitor", "loans", "--data", home_.file("same.csv"), "--slice", "term"}).err.find("--id-col too"),
            std::string::npos);
  EXPECT_NE(slipway({"labels", "ingest", home_.file("same.csv"), "--model", "nobody", "--id-col", "loan_id",
                     "--label-col", "Class"})
                .exit_code,
            0);

  // Alerts: a webhook hears each change once; nothing while the state holds.
  WebhookReceiver receiver;
  auto fired = slipway({"monitor", "loans", "--data", home_.file("shifted.csv"), "--webhook", receiver.url()});
  ASSERT_EQ(fired.exit_code, 0) << fired.err;
  EXPECT_NE(fired.out.find("alert     input:funded_amnt FIRING"), std::string::npos) << fired.out;
  ASSERT_EQ(receiver.bodies().size(), 1u);
  std::string body = receiver.bodies()[0];
  EXPECT_NE(body.find("{\"subject\":\"input:funded_amnt\",\"state\":\"firing\""), std::string::npos) << body;
  EXPECT_NE(body.find("{\"subject\":\"input:addr_state\",\"state\":\"firing\""), std::string::npos) << body;
  EXPECT_EQ(body.find("input:term"), std::string::npos) << body;  // never fired: not news
  ASSERT_EQ(slipway({"monitor", "loans", "--data", home_.file("shifted.csv"), "--webhook", receiver.url()}).exit_code,
            0);
  EXPECT_EQ(receiver.bodies().size(), 1u);  // no repeat
  auto resolved = slipway({"monitor", "loans", "--data", home_.file("same.csv"), "--webhook", receiver.url(),
                           "--id-col", "loan_id", "--min-metric", "auc=0.99"});
  ASSERT_EQ(resolved.exit_code, 0) << resolved.err;
  ASSERT_EQ(receiver.bodies().size(), 2u);
  EXPECT_NE(receiver.bodies()[1].find("{\"subject\":\"input:addr_state\",\"state\":\"resolved\""), std::string::npos);
  EXPECT_NE(receiver.bodies()[1].find("{\"subject\":\"metric:auc\",\"state\":\"firing\""), std::string::npos)
      << receiver.bodies()[1];
  // A webhook that is down: the change is not recorded, so the next run sends it again.
  auto down =
      slipway({"monitor", "loans", "--data", home_.file("shifted.csv"), "--webhook", "http://127.0.0.1:1/hook"});
  EXPECT_NE(down.exit_code, 0);
  EXPECT_NE(down.err.find("stay unrecorded"), std::string::npos) << down.err;
  ASSERT_EQ(slipway({"monitor", "loans", "--data", home_.file("shifted.csv"), "--webhook", receiver.url()}).exit_code,
            0);
  EXPECT_EQ(receiver.bodies().size(), 3u);
  EXPECT_NE(slipway({"monitor", "loans", "--data", home_.file("same.csv"), "--alert", "--min-metric", "auc"}).exit_code,
            0);
  EXPECT_NE(slipway({"monitor", "nothing", "--data", home_.file("same.csv")}).exit_code, 0);
}

TEST_F(CliTest, ProfileReportsEveryStagePerRequestSize) {
  ASSERT_EQ(train_lending({"--register", "lending"}).exit_code, 0);
  auto profiled = slipway({"--json", "profile", "lending", "--data", data_path("lending_club.csv"),
                           "--rows-per-request", "1,4", "--duration", "200ms", "--no-progress"});
  ASSERT_EQ(profiled.exit_code, 0) << profiled.err;
  EXPECT_EQ(profiled.out.find('\n'), profiled.out.size() - 1);
  EXPECT_NE(profiled.out.find("\"model\":\"lending@1\""), std::string::npos) << profiled.out;
  EXPECT_NE(profiled.out.find("\"rows_per_request\":4"), std::string::npos);
  EXPECT_NE(profiled.out.find("\"stage\":\"transport\""), std::string::npos);
  EXPECT_NE(profiled.out.find("\"bottleneck\":"), std::string::npos);
  auto text = slipway({"profile", "lending", "--data", data_path("lending_club.csv"), "--rows-per-request", "2",
                       "--duration", "100ms", "--no-progress"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("model compute"), std::string::npos) << text.out;
  for (const char* bad : {"0", "1,,2", "-3", "x"}) {
    auto refused = slipway({"profile", "lending", "--data", data_path("lending_club.csv"), "--rows-per-request", bad});
    EXPECT_EQ(refused.exit_code, 1) << bad;
    EXPECT_NE(refused.err.find("--rows-per-request"), std::string::npos) << refused.err;
  }
  auto too_short = slipway({"profile", "lending", "--data", data_path("lending_club.csv"), "--duration", "5ms"});
  EXPECT_NE(too_short.err.find("--duration"), std::string::npos) << too_short.err;
}

// The candidate table end to end: candidates built, measured through the real server, registered
// as versions with their optimization record, recommended; and the refusals.
TEST_F(CliTest, OptimizeRegistersMeasuredCandidates) {
  auto trained = train_lending({"--register", "trees", "--model", "gbdt", "--param", "rounds=24", "--no-progress"});
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  std::string markdown = home_.file("table.md");
  std::vector<std::string> command = {"--json",
                                      "optimize",
                                      "trees@1",
                                      "--data",
                                      data_path("lending_club.csv"),
                                      "--slice",
                                      "term",
                                      "--slo",
                                      "p95<=100ms@100rps,auc_drop<=0.05",
                                      "--price-per-hour",
                                      "0.35",
                                      "--duration",
                                      "300ms",
                                      "--candidates",
                                      "quantize,prune,serving",
                                      "--register",
                                      "--no-progress"};
  std::vector<std::string> with_markdown = command;
  with_markdown.insert(with_markdown.end(), {"--markdown", markdown});
  auto optimized = slipway(with_markdown);
  ASSERT_EQ(optimized.exit_code, 0) << optimized.err;
  EXPECT_EQ(optimized.out.find('\n'), optimized.out.size() - 1);
  EXPECT_NE(optimized.out.find("\"name\":\"quantize\""), std::string::npos) << optimized.out;
  EXPECT_NE(optimized.out.find("\"version\":\"trees@2\""), std::string::npos) << optimized.out;
  EXPECT_NE(optimized.out.find("\"recommended\":\""), std::string::npos);
  auto table = *slipway::read_file(markdown);
  EXPECT_NE(table.find("| candidate |"), std::string::npos) << table;
  EXPECT_NE(table.find("**Recommended:**"), std::string::npos);
  auto versions = slipway({"--json", "versions", "trees"});
  EXPECT_NE(versions.out.find("\"version\":3"), std::string::npos) << versions.out;
  EXPECT_NE(versions.out.find("\"optimization\":{\"baseline\":\"trees@1\""), std::string::npos) << versions.out;
  EXPECT_NE(slipway({"versions", "trees"}).out.find("quantize (layout=quantized"), std::string::npos);

  // The same run resumed: every candidate was registered by the first, so none is measured or
  // registered again, and the table is the one the records hold.
  std::vector<std::string> resumed_command = command;
  resumed_command.push_back("--resume");
  auto resumed = slipway(resumed_command);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("\"version\":\"trees@2\""), std::string::npos) << resumed.out;
  EXPECT_EQ(slipway({"--json", "versions", "trees"}).out, versions.out);
  std::vector<std::string> resume_only = command;
  resume_only.erase(std::find(resume_only.begin(), resume_only.end(), "--register"));
  resume_only.push_back("--resume");
  EXPECT_NE(slipway(resume_only).err.find("add --register"), std::string::npos);

  auto measured_only = slipway({"optimize", "trees@1", "--data", data_path("lending_club.csv"), "--candidates",
                                "quantize", "--duration", "200ms", "--no-progress"});
  ASSERT_EQ(measured_only.exit_code, 0) << measured_only.err;
  EXPECT_NE(measured_only.out.find("recommended:"), std::string::npos) << measured_only.out;
  EXPECT_EQ(slipway({"--json", "versions", "trees"}).out, versions.out);  // nothing new registered

  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  std::vector<Case> cases = {
      {{"--slo", "p95<=5ms"}, "p95<=5ms"},
      {{"--slo", "cost<=0.01/1k"}, "--price-per-hour"},
      {{"--candidates", "magic"}, "unknown candidate technique 'magic'"},
      {{"--tolerance", "-1"}, "--tolerance"},
      {{"--duration", "1ms"}, "--duration"},
      {{"--slice", "nope"}, "'nope'"},
      {{"--markdown", "/nonexistent-folder/table.md"}, "--markdown"},
  };
  for (const auto& test_case : cases) {
    std::vector<std::string> args = {"optimize", "trees", "--data", data_path("lending_club.csv"), "--no-progress"};
    args.insert(args.end(), test_case.args.begin(), test_case.args.end());
    auto result = slipway(args);
    EXPECT_EQ(result.exit_code, 1) << test_case.message;
    EXPECT_NE(result.err.find(test_case.message), std::string::npos) << result.err;
  }
}

TEST_F(CliTest, TimeOrderedSplitOnChicago) {
  auto trained = slipway({"train", "--data", data_path("chicago_ridership.csv"), "--target", "ridership", "--model",
                          "linear", "--split", "time:date", "--out", home_.file("chicago.slip")});
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  EXPECT_NE(trained.out.find("0 test rows not later than train"), std::string::npos);
  EXPECT_NE(trained.out.find("rmse"), std::string::npos);
  // A bundle file is a valid REF.
  auto evaluated =
      slipway({"--json", "eval", home_.file("chicago.slip"), "--data", data_path("chicago_ridership.csv")});
  EXPECT_EQ(evaluated.exit_code, 0) << evaluated.err;
  EXPECT_NE(evaluated.out.find("\"r2\":"), std::string::npos);
}

TEST_F(CliTest, SpecFileWithFlagOverrides) {
  write_text(home_.file("spec.yaml"),
             "data: " + data_path("lending_club.csv") +
                 "\ntarget: Class\nsplit: stratified\nparams:\n  l2: 10\nregister: from-spec\n");
  auto trained = slipway({"--json", "train", "--spec", home_.file("spec.yaml"), "--seed", "7"});
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  EXPECT_NE(trained.out.find("\"model\":\"from-spec\""), std::string::npos);
  auto show = slipway({"show", json_string(trained.out, "run_id")});
  EXPECT_NE(show.out.find("l2 = 10"), std::string::npos);
  EXPECT_NE(show.out.find("seed: 7"), std::string::npos);

  write_text(home_.file("bad.yaml"), "data: x.csv\ntargte: y\n");
  auto bad = slipway({"train", "--spec", home_.file("bad.yaml")});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("unknown key 'targte'"), std::string::npos);
}

TEST_F(CliTest, BadInputGetsOneClearSentenceAndWritesNothing) {
  write_text(home_.file("broken.csv"), "a,b,y\n1,2,x\n3,4\n");
  write_text(home_.file("one_class.csv"), "a,y\n1,x\n2,x\n3,x\n4,x\n5,x\n");
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  std::vector<Case> cases = {
      {{"eval", "ghost", "--data", data_path("lending_club.csv")}, "no Slipway workspace"},
      {{"train", "--data", home_.file("broken.csv"), "--target", "y"}, "broken.csv:3: expected 3 fields"},
      {{"train", "--data", data_path("lending_club.csv"), "--target", "Klass"}, "no column named 'Klass'"},
      {{"train", "--data", data_path("lending_club.csv"), "--target", "Class", "--slice", "state"},
       "no column named 'state'"},
      {{"train", "--data", home_.file("one_class.csv"), "--target", "y"}, "a single class ('x')"},
      {{"train", "--data", data_path("lending_club.csv"), "--target", "Class", "--param", "l2=-3"}, "parameter 'l2'"},
      {{"train", "--data", data_path("lending_club.csv"), "--target", "Class", "--split", "time"}, "needs a column"},
      {{"train", "--data", data_path("lending_club.csv"), "--target", "Class", "--register", "../evil"},
       "invalid model name"},
  };
  for (const auto& test_case : cases) {
    auto result = slipway(test_case.args);
    EXPECT_EQ(result.exit_code, 1) << test_case.message;
    EXPECT_EQ(result.err.rfind("error: ", result.err.size()), result.err.rfind("error: ")) << result.err;
    EXPECT_NE(result.err.find(test_case.message), std::string::npos) << result.err;
  }
  // None of those created a model version.
  ASSERT_EQ(slipway({"init"}).exit_code, 0);
  auto models = slipway({"--json", "models"});
  EXPECT_EQ(models.out, "{\"models\":[]}\n");
  EXPECT_NE(slipway({"versions", "ghost"}).err.find("no model named 'ghost'"), std::string::npos);
  EXPECT_EQ(slipway({"--help"}).exit_code, 0);
  EXPECT_NE(slipway({"train", "--help"}).out.find("--test-fraction"), std::string::npos);
}

// A run killed right after a checkpoint resumes from it to the very bytes the uninterrupted run
// writes; the per-round metrics are in `show`; a warm start continues a registered model.
TEST_F(CliTest, GbdtCheckpointResumeHistoryAndWarmStart) {
  ASSERT_EQ(slipway({"init"}).exit_code, 0);
  std::vector<std::string> gbdt = {"--model",
                                   "gbdt",
                                   "--param",
                                   "rounds=40",
                                   "--param",
                                   "subsample=0.8",
                                   "--param",
                                   "early_stopping_rounds=30",
                                   "--checkpoint-every",
                                   "10",
                                   "--no-progress"};
  auto whole = train_lending(gbdt);
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  std::string whole_sha = json_string(whole.out, "bundle_sha256");

  std::vector<std::string> args = {
      slipway_binary(), "--home", home_.path(), "--json",     "train",   "--data",     data_path("lending_club.csv"),
      "--target",       "Class",  "--split",    "stratified", "--slice", "addr_state", "--no-cache"};
  args.insert(args.end(), gbdt.begin(), gbdt.end());
  auto killed = run_command(args, {"SLIPWAY_CRASH_AT=train.after_checkpoint"});
  EXPECT_EQ(killed.exit_code, 128 + 9);
  auto runs = slipway({"runs"});
  auto running = runs.out.find("RUNNING");
  ASSERT_NE(running, std::string::npos) << runs.out;
  std::string killed_run = runs.out.substr(runs.out.rfind('\n', running) + 1, 32);
  // `verify` finds the run whose process died; --repair marks it INTERRUPTED, which resumes too.
  auto found = slipway({"verify"});
  EXPECT_EQ(found.exit_code, 1);
  EXPECT_NE(found.out.find("run " + killed_run + " was left RUNNING: process "), std::string::npos) << found.out;
  auto repaired = slipway({"--json", "verify", "--repair"});
  EXPECT_EQ(repaired.exit_code, 0) << repaired.out;
  EXPECT_NE(repaired.out.find("\"interrupted_runs\":[{\"run_id\":\"" + killed_run), std::string::npos) << repaired.out;
  EXPECT_NE(slipway({"runs"}).out.find("INTERRUPTED"), std::string::npos);
  // `runs` filters by state and experiment (as /api/runs does).
  auto interrupted = slipway({"runs", "--status", "interrupted"});
  EXPECT_EQ(interrupted.exit_code, 0) << interrupted.err;
  EXPECT_NE(interrupted.out.find(killed_run), std::string::npos) << interrupted.out;
  EXPECT_EQ(interrupted.out.find("FINISHED"), std::string::npos) << interrupted.out;
  EXPECT_EQ(slipway({"runs", "--status", "FINISHED"}).out.find(killed_run), std::string::npos);
  EXPECT_EQ(slipway({"runs", "--experiment", "nothing-here"}).out.find(killed_run), std::string::npos);
  EXPECT_NE(slipway({"runs", "--experiment", "default"}).out.find(killed_run), std::string::npos);
  EXPECT_NE(slipway({"runs", "--status", "done"}).exit_code, 0);
  // ... and by model family, target and parameter values, which the store does not index.
  EXPECT_NE(slipway({"runs", "--model", "gbdt", "--target", "Class"}).out.find(killed_run), std::string::npos);
  EXPECT_EQ(slipway({"runs", "--model", "logistic"}).out.find(killed_run), std::string::npos);
  EXPECT_EQ(slipway({"runs", "--target", "int_rate"}).out.find(killed_run), std::string::npos);
  EXPECT_NE(slipway({"runs", "--param", "subsample=0.8"}).out.find(killed_run), std::string::npos);
  EXPECT_EQ(slipway({"runs", "--param", "subsample=0.9"}).out.find(killed_run), std::string::npos);
  EXPECT_NE(slipway({"runs", "--param", "subsample"}).exit_code, 0);
  // --ids: the run ids alone, one per line, for `train --resume "$(...)"`.
  EXPECT_EQ(slipway({"runs", "--status", "INTERRUPTED", "--limit", "1", "--ids"}).out, killed_run + "\n");
  EXPECT_EQ(slipway({"runs", "--status", "FAILED", "--ids"}).out, "");

  auto resumed = slipway({"--json", "train", "--resume", killed_run, "--no-progress"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("resuming run " + killed_run + " from its checkpoint after 10 rounds"), std::string::npos);
  EXPECT_EQ(json_string(resumed.out, "run_id"), killed_run);
  EXPECT_EQ(json_string(resumed.out, "bundle_sha256"), whole_sha);
  auto finished_again = slipway({"train", "--resume", killed_run});
  EXPECT_EQ(finished_again.exit_code, 1);
  EXPECT_NE(finished_again.err.find("has finished"), std::string::npos);

  auto shown = slipway({"--json", "show", killed_run});
  EXPECT_NE(shown.out.find("\"history\":{\"train_logloss\":[[1,"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("\"validation_logloss\":[[1,"), std::string::npos);
  EXPECT_NE(slipway({"show", killed_run}).out.find("per round ("), std::string::npos);

  ASSERT_EQ(train_lending({"--model", "gbdt", "--param", "rounds=5", "--register", "trees"}).exit_code, 0);
  auto warm = train_lending(
      {"--model", "gbdt", "--param", "rounds=5", "--init-model", "trees@1", "--out", home_.file("warm.bundle")});
  ASSERT_EQ(warm.exit_code, 0) << warm.err;
  auto warm_run = slipway({"show", json_string(warm.out, "run_id")});
  EXPECT_NE(warm_run.out.find("init_model = trees@1 sha256:"), std::string::npos) << warm_run.out;
  auto importance = slipway({"--json", "explain", home_.file("warm.bundle"), "--importance"});
  EXPECT_EQ(importance.exit_code, 0) << importance.err;
  // Contributions to a file: --json still prints what was written, as JSON.
  auto contributions = slipway({"explain", home_.file("warm.bundle"), "--data", data_path("lending_club.csv"), "--out",
                                home_.file("contributions.csv"), "--json"});
  EXPECT_EQ(contributions.exit_code, 0) << contributions.err;
  EXPECT_EQ(contributions.out.rfind("{\"model\":", 0), 0u) << contributions.out;
  EXPECT_NE(contributions.out.find("\"out\":"), std::string::npos) << contributions.out;

  // Logs are coloured on a terminal (script(1) gives the command one) unless NO_COLOR is set.
  std::string predict = slipway_binary() + " --home " + home_.path() + " predict trees --data " +
                        data_path("lending_club.csv") + " --out /dev/null";
  auto coloured = run_command({"/usr/bin/script", "-qec", predict, "/dev/null"});
  EXPECT_NE(coloured.out.find("\x1b["), std::string::npos) << coloured.out << coloured.err;
  auto plain = run_command({"/usr/bin/script", "-qec", predict, "/dev/null"}, {"NO_COLOR=1"});
  EXPECT_NE(plain.out.find(" info "), std::string::npos) << plain.out;
  EXPECT_EQ(plain.out.find("\x1b["), std::string::npos) << plain.out;
}

// Regression: an infinite feature value made train and eval spin forever in the AUC. Now the
// reader refuses it with the column and line, and rows with an empty target are counted aloud.
TEST_F(CliTest, InfinitiesAreRefusedAndDroppedTargetsCounted) {
  ASSERT_EQ(slipway({"init"}).exit_code, 0);
  std::string csv = "x,y,label\n";
  for (int row = 0; row < 200; ++row) {
    csv += std::to_string(row % 17) + "," + std::to_string((row * 7) % 13) + "," + (row % 3 == 0 ? "yes" : "no") + "\n";
  }
  csv += "4,5,\n4,6,\n";  // two rows without a target
  write_text(home_.file("clean.csv"), csv);
  write_text(home_.file("infinite.csv"), csv + "3,inf,yes\n");
  auto refused = slipway({"train", "--data", home_.file("infinite.csv"), "--target", "label", "--model", "gbdt"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.err.find("infinite.csv:204: column 'y' holds 'inf'"), std::string::npos) << refused.err;
  auto trained = slipway({"--json", "train", "--data", home_.file("clean.csv"), "--target", "label", "--model", "gbdt",
                          "--register", "small"});
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  EXPECT_NE(trained.err.find("whose target 'label' is empty"), std::string::npos) << trained.err;
  auto evaluated = slipway({"eval", "small", "--data", home_.file("infinite.csv")});
  EXPECT_EQ(evaluated.exit_code, 1);
  EXPECT_NE(evaluated.err.find("column 'y' holds 'inf'"), std::string::npos) << evaluated.err;
  auto clean = slipway({"--json", "eval", "small", "--data", home_.file("clean.csv")});
  ASSERT_EQ(clean.exit_code, 0) << clean.err;
  EXPECT_NE(clean.out.find("\"rows_missing_target\":2"), std::string::npos) << clean.out;
}

// Commands that only read leave slipway.db as it was, and work for a user who may not write the
// workspace; `verify` checks artifacts and exits 1 on a problem.
TEST_F(CliTest, ReadOnlyCommandsWriteNothingAndVerifyReportsProblems) {
  auto trained = train_lending({"--register", "lending"});
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  std::string run_id = json_string(trained.out, "run_id");
  std::string sha = json_string(trained.out, "bundle_sha256");
  std::string database = home_.file("slipway.db");
  auto bytes_before = *slipway::read_file(database);
  auto time_before = std::filesystem::last_write_time(database);
  std::vector<std::vector<std::string>> readers = {
      {"models"},
      {"versions", "lending"},
      {"runs"},
      {"show", run_id},
      {"eval", "lending", "--data", data_path("lending_club.csv"), "--no-cache"},  // without, it records its result
      {"predict", "lending@1", "--data", data_path("lending_club.csv"), "--out", home_.file("scores.csv")},
      {"token", "list"},
      {"serving-config", "lending"},
      {"verify"},
  };
  for (const auto& args : readers) {
    auto result = slipway(args);
    EXPECT_EQ(result.exit_code, 0) << args[0] << ": " << result.err;
  }
  EXPECT_EQ(*slipway::read_file(database), bytes_before);
  EXPECT_TRUE(std::filesystem::last_write_time(database) == time_before);

  const std::string setpriv = "/usr/bin/setpriv";
  if (::geteuid() == 0 && std::filesystem::exists(setpriv)) {  // root ignores permissions: act as nobody
    std::filesystem::permissions(home_.path(), std::filesystem::perms(0755));
    auto as_nobody = run_command({setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", slipway_binary(),
                                  "--home", home_.path(), "--json", "versions", "lending"});
    EXPECT_EQ(as_nobody.exit_code, 0) << as_nobody.err;
    EXPECT_NE(as_nobody.out.find(sha), std::string::npos);
    // eval runs for a user who cannot write the step cache; it just is not cached.
    auto eval_as_nobody =
        run_command({setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", slipway_binary(), "--home",
                     home_.path(), "--json", "eval", "lending", "--data", data_path("lending_club.csv")});
    EXPECT_EQ(eval_as_nobody.exit_code, 0) << eval_as_nobody.err;
    EXPECT_NE(eval_as_nobody.out.find("\"cached\":false"), std::string::npos) << eval_as_nobody.out;
    auto write_as_nobody = run_command({setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", slipway_binary(),
                                        "--home", home_.path(), "alias", "lending@1", "production"});
    EXPECT_EQ(write_as_nobody.exit_code, 1);
    EXPECT_NE(write_as_nobody.err.find("no write permission"), std::string::npos) << write_as_nobody.err;
    // serve, too, runs for a user who cannot write the workspace.
    ChildProcess server({setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", slipway_binary(), "--home",
                         home_.path(), "serve", "--port", "0"});
    std::string address = server.read_line(20000);
    auto colon = address.rfind(':');
    ASSERT_NE(colon, std::string::npos) << address;
    int port = std::stoi(address.substr(colon + 1));
    EXPECT_EQ(http_request(port, "GET", "/v2/models/lending/ready").status, 200);
    server.signal(SIGTERM);
    EXPECT_EQ(server.wait(), 0);
    EXPECT_EQ(*slipway::read_file(database), bytes_before);
  }

  // A corrupt bundle: reported with the rows that name it, moved aside on --repair.
  std::string artifact = home_.path() + "/artifacts/sha256/" + sha.substr(0, 2) + "/" + sha.substr(2);
  write_text(artifact, "not a bundle");
  auto corrupt = slipway({"verify"});
  EXPECT_EQ(corrupt.exit_code, 1);
  EXPECT_NE(corrupt.out.find("artifact " + sha + " is corrupt"), std::string::npos) << corrupt.out;
  EXPECT_NE(corrupt.out.find("named by model lending@1"), std::string::npos) << corrupt.out;
  auto repaired = slipway({"--json", "verify", "--repair"});
  EXPECT_EQ(repaired.exit_code, 1);
  EXPECT_NE(repaired.out.find("\"quarantined_to\":\"" + home_.path() + "/artifacts/quarantine/" + sha),
            std::string::npos)
      << repaired.out;
  EXPECT_NE(repaired.out.find("\"problems\":1}"), std::string::npos) << repaired.out;
  EXPECT_FALSE(std::filesystem::exists(artifact));
}

// The conventions users notice: usage errors exit 2 with a suggestion, global flags after the
// subcommand, the program name in --version, and junk names refused before any work.
TEST_F(CliTest, UsageConventions) {
  ASSERT_EQ(slipway({"init"}).exit_code, 0);
  auto typo = slipway({"traon"});
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_NE(typo.err.find("did you mean 'train'?"), std::string::npos) << typo.err;
  EXPECT_EQ(typo.err.find("A subcommand is required"), std::string::npos) << typo.err;
  EXPECT_EQ(slipway({"serve", "--port", "99999"}).exit_code, 2);
  EXPECT_EQ(slipway({"loadtest", "http://127.0.0.1:1/", "--rate", "-3"}).exit_code, 2);
  // Global flags after the command, -q and --home included.
  auto after = run_command({slipway_binary(), "models", "--home", home_.path(), "-q", "--json"});
  EXPECT_EQ(after.exit_code, 0) << after.err;
  EXPECT_EQ(after.out.rfind("{\"models\"", 0), 0u) << after.out;
  EXPECT_TRUE(after.err.empty()) << after.err;
  EXPECT_EQ(slipway({"train", "--no-such-flag"}).exit_code, 2);
  EXPECT_EQ(slipway({"runs", "--limit", "-5"}).exit_code, 2);
  auto models = slipway({"models", "--json"});
  EXPECT_EQ(models.exit_code, 0) << models.err;
  EXPECT_EQ(models.out.front(), '{');
  auto version = run_command({slipway_binary(), "--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out.rfind("slipway ", 0), 0u) << version.out;
  auto empty_register = train_lending({"--register", ""});
  EXPECT_EQ(empty_register.exit_code, 1);
  EXPECT_NE(empty_register.err.find("--register needs a model name"), std::string::npos);
  // `--resume "$(slipway runs --status INTERRUPTED --limit 1 --ids)"` when there is no such run.
  auto empty_resume = slipway({"train", "--resume", ""});
  EXPECT_EQ(empty_resume.exit_code, 1);
  EXPECT_NE(empty_resume.err.find("--resume needs a run id"), std::string::npos) << empty_resume.err;
  auto empty_import = slipway({"import", "xgboost", "model.json", "--register", ""});
  EXPECT_EQ(empty_import.exit_code, 1);
  EXPECT_NE(empty_import.err.find("--register needs a model name"), std::string::npos);
  EXPECT_NE(train_lending({"--experiment", "two\nlines"}).err.find("control characters"), std::string::npos);
  EXPECT_NE(train_lending({"--experiment", std::string(10'000, 'x')}).err.find("1 to 128"), std::string::npos);
  EXPECT_EQ(slipway({"runs"}).out.find("two"), std::string::npos);  // nothing was started
}

// Ctrl-C while training marks the run INTERRUPTED and says how to resume it, rather than
// leaving it RUNNING until `verify --repair`; the process exits 128 + SIGINT. The signal comes
// twice, a millisecond apart, as `timeout -s INT` delivers it (to the process, then to its group):
// the second must not end the process before the run is marked.
TEST_F(CliTest, InterruptedTrainingMarksItsRun) {
  ASSERT_EQ(slipway({"init"}).exit_code, 0);
  ChildProcess training({slipway_binary(), "--home", home_.path(), "train", "--data", data_path("lending_club.csv"),
                         "--target", "Class", "--model", "gbdt", "--param", "rounds=100000", "--param",
                         "learning_rate=0.001", "--checkpoint-every", "10", "--no-progress"});
  bool running = false;
  for (int attempt = 0; attempt < 300 && !running; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    running = slipway({"runs"}).out.find("RUNNING") != std::string::npos;
  }
  ASSERT_TRUE(running) << "the run never started";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  training.signal(SIGINT);
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  training.signal(SIGINT);
  EXPECT_EQ(training.wait(), 128 + SIGINT);
  auto runs = slipway({"runs"});
  EXPECT_NE(runs.out.find("INTERRUPTED"), std::string::npos) << runs.out;
  EXPECT_EQ(runs.out.find("RUNNING"), std::string::npos) << runs.out;
  EXPECT_EQ(slipway({"verify"}).exit_code, 0);  // nothing left for --repair
}

}  // namespace
}  // namespace slipway::testing
