// Tests of the results store's bookkeeping for resumed experiments: who
// runs a session (taken atomically), and the attempts left by runs that
// were going when their runner died.
#include "experiments/store.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

namespace heaplab::experiments {
namespace {

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/heaplab_store_test_XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

SessionInfo session(const std::string& id, const std::string& owner) {
  SessionInfo s;
  s.id = id;
  s.experiment = "e";
  s.spec_hash = "h";
  s.cells = 2;
  s.owner = owner;
  return s;
}

// Two heaplabs resuming one session read the same (dead) owner; only the
// first to claim it gets it.
TEST_F(StoreTest, ASessionIsClaimedByOneRunner) {
  Store a(dir_ + "/heaplab.db"), b(dir_ + "/heaplab.db");
  a.add_session(session("s1", "host:1"));
  EXPECT_TRUE(a.claim_session("s1", "host:1", "host:100"));
  EXPECT_FALSE(b.claim_session("s1", "host:1", "host:200"));  // (it read the old owner too)
  EXPECT_EQ(b.session("s1")->owner, "host:100");
  EXPECT_TRUE(b.claim_session("s1", "host:100", "host:200"));
  // An older store's session with no owner at all.
  a.add_session(session("s2", ""));
  EXPECT_TRUE(a.claim_session("s2", "", "host:100"));
}

// A run noted and never stored is an attempt; an interrupted run undoes
// only its own note; a stored run takes its cell's attempts with it.
TEST_F(StoreTest, AttemptsCountRunnersThatDied) {
  Store st(dir_ + "/heaplab.db");
  st.add_session(session("s", "host:1"));
  st.note_attempt("s", "t|glibc|r0");  // the runner died during it
  st.note_attempt("s", "t|glibc|r0");  // resumed: going again
  EXPECT_EQ(st.attempts("s").at("t|glibc|r0"), 2);
  st.forget_attempt("s", "t|glibc|r0");  // Ctrl-C: not a death
  EXPECT_EQ(st.attempts("s").at("t|glibc|r0"), 1);
  st.note_attempt("s", "t|je|r0");
  st.forget_attempt("s", "t|je|r0");
  EXPECT_EQ(st.attempts("s").count("t|je|r0"), 0u);
  RunRow row;
  row.cell = "t|glibc|r0";
  row.trace = "t";
  row.allocator = "glibc";
  row.exit = "ok";
  row.result = nlohmann::json::object();
  st.add_run("s", row);
  EXPECT_TRUE(st.attempts("s").empty());
  EXPECT_EQ(st.done_cells("s").count("t|glibc|r0"), 1u);
}

// A stored result is read within common/json.h's bounds (a store merged
// from elsewhere is outside input): one nested deeper reads as unreadable,
// its row still listed.
TEST_F(StoreTest, ResultsAreReadWithinTheJsonBounds) {
  Store st(dir_ + "/heaplab.db");
  st.add_session(session("s", "host:1"));
  RunRow row;
  row.cell = "t|glibc|r0";
  row.trace = "t";
  row.allocator = "glibc";
  row.exit = "ok";
  row.result = {{"replay", {{"wall_s", 1.5}}}};
  st.add_run("s", row);
  nlohmann::json deep = 1;
  for (int i = 0; i < 100; ++i) deep = nlohmann::json::array({deep});
  row.cell = "t|glibc|r1";
  row.result = {{"deep", deep}};
  st.add_run("s", row);
  const std::vector<RunRow> runs = st.runs("s");
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].result["replay"]["wall_s"], 1.5);
  EXPECT_TRUE(runs[1].result.is_discarded());
}

}  // namespace
}  // namespace heaplab::experiments
