// Verdicts on their way to the run index on the video's host (actors/coordinator/
// verdicts.hpp): journaled, then sent to the decoder that made the video while it reports
// alive, again every order_resend_s until it answers that revision; a host down gets it
// when it is back, a changed verdict supersedes the one on its way, errors are sent again,
// a run waits in memory for its verdicts, and a restarted coordinator sends them again.
#include <catch2/catch.hpp>

#include "actors/coordinator/records.hpp"
#include "actors/coordinator/scheduler.hpp"
#include "actors/coordinator/verdicts.hpp"
#include "tests/support/sched_fixtures.hpp"

using namespace vidline;
using sched_fixtures::line_of;
using sched_fixtures::run_of;

namespace {

uint64_t seq = 1;

/// Run `id` as it is once finished: two jobs, each video made by decoder "dec" on host "b".
actors::coordinator::run finished(const std::string& id) {
  auto r = run_of(id, 2);
  for (auto& j : r.jobs) {
    j.state = actors::coordinator::job_state::succeeded;
    j.decoder = "dec";
    j.output = "/data/b/outputs/" + id + "/job-" + std::to_string(j.spec.index) + ".mp4";
    j.output_sha256 = std::string(64, 'c');
  }
  r.done = true;
  r.finished_at = 10;
  return r;
}

actors::coordinator::state line_with(const actors::coordinator::run& r) {
  auto s = line_of(1);
  s.runs.push_back(r);
  actors::coordinator::reindex(s);
  return s;
}

std::vector<actors::coordinator::effect> decoder_report(actors::coordinator::state& s, double now) {
  msg::decoder_status st;
  st.decoder = "dec";
  st.host = "b";
  st.epoch = 9;
  st.seq = ++seq;
  st.capacity = 2;
  return actors::coordinator::step(s, actors::coordinator::ev_decoder_status{st}, now);
}

std::vector<actors::coordinator::effect> review(actors::coordinator::state& s, uint32_t index, const char* verdict,
                                  double now) {
  return actors::coordinator::step(s, actors::coordinator::ev_review{"r", index, verdict, false, std::nullopt}, now);
}

std::vector<actors::coordinator::effect> answer(actors::coordinator::state& s, uint32_t index, uint32_t revision,
                                  const char* outcome, double now, std::string error = "") {
  msg::verdict_indexed a;
  a.decoder = "dec";
  a.host = "b";
  a.run_id = "r";
  a.index = index;
  a.revision = revision;
  a.outcome = outcome;
  a.error = std::move(error);
  return actors::coordinator::step(s, actors::coordinator::ev_verdict_indexed{a}, now);
}

std::vector<msg::verdict_index> sent(const std::vector<actors::coordinator::effect>& fx) {
  std::vector<msg::verdict_index> out;
  for (auto& e : fx)
    if (auto* v = std::get_if<actors::coordinator::fx_send_verdict>(&e)) {
      CHECK(v->host == "b");
      out.push_back(v->v);
    }
  return out;
}

/// Where in `fx` job `index` is persisted and its verdict sent (-1: not there).
std::pair<int, int> positions(const std::vector<actors::coordinator::effect>& fx, uint32_t index) {
  int persisted = -1, send = -1;
  for (std::size_t k = 0; k < fx.size(); ++k) {
    if (auto* p = std::get_if<actors::coordinator::fx_persist_job>(&fx[k]); p && p->index == index && persisted < 0)
      persisted = static_cast<int>(k);
    if (auto* v = std::get_if<actors::coordinator::fx_send_verdict>(&fx[k]); v && v->v.index == index && send < 0)
      send = static_cast<int>(k);
  }
  return {persisted, send};
}

std::size_t logs_containing(const std::vector<actors::coordinator::effect>& fx, const std::string& text) {
  std::size_t n = 0;
  for (auto& e : fx)
    if (auto* l = std::get_if<actors::coordinator::fx_log>(&e); l && l->text.find(text) != std::string::npos)
      ++n;
  return n;
}

} // namespace

TEST_CASE("verdicts: sent to the decoder that made the video, journaled first, until it answers") {
  auto s = line_with(finished("r"));
  decoder_report(s, 11);
  auto fx = review(s, 0, "accept", 12);
  auto v = sent(fx);
  REQUIRE(v.size() == 1);
  CHECK(v[0].decoder == "dec");
  CHECK(v[0].run_id == "r");
  CHECK(v[0].index == 0);
  CHECK(v[0].output == "/data/b/outputs/r/job-0.mp4");
  CHECK(v[0].output_sha256 == std::string(64, 'c'));
  CHECK(v[0].verdict == "accepted");
  CHECK(v[0].revision == 1);
  CHECK(v[0].take_index == -1);
  CHECK(v[0].at_unix == Approx(12));  // the run clock x time_scale 1
  auto [persisted, send] = positions(fx, 0);
  CHECK(persisted >= 0);
  CHECK(persisted < send);  // the journal before the message
  CHECK(s.find_job("r", 0)->verdict_revision == 1);
  CHECK(s.find_job("r", 0)->verdict_indexed == 0);
  CHECK(actors::coordinator::check_index(s).empty());

  // No answer: not again before order_resend_s (2 s), then with the decoder's next report.
  CHECK(sent(decoder_report(s, 13)).empty());
  CHECK(sent(actors::coordinator::step(s, actors::coordinator::ev_tick{}, 14.5)).empty());  // ticks send nothing
  v = sent(decoder_report(s, 14.5));
  REQUIRE(v.size() == 1);
  CHECK(v[0].revision == 1);

  // Answered: journaled, and sent no more.
  fx = answer(s, 0, 1, msg::verdict_outcome::indexed, 15);
  CHECK(positions(fx, 0).first >= 0);
  CHECK(s.find_job("r", 0)->verdict_indexed == 1);
  CHECK(sent(decoder_report(s, 30)).empty());
  CHECK(s.idx.verdicts_due.empty());
  CHECK(actors::coordinator::check_index(s).empty());
  // A late duplicate answer changes nothing.
  CHECK(answer(s, 0, 1, msg::verdict_outcome::indexed, 31).empty());
}

TEST_CASE("verdicts: a decoder's host down when the verdict is given gets it when it is back") {
  auto s = line_with(finished("r"));
  decoder_report(s, 11);
  actors::coordinator::step(s, actors::coordinator::ev_peer{"b", false}, 11.5);
  CHECK(sent(review(s, 1, "reject", 12)).empty());
  CHECK(sent(actors::coordinator::step(s, actors::coordinator::ev_tick{}, 40)).empty());
  CHECK(actors::coordinator::verdict_due(*s.find_job("r", 1)));
  actors::coordinator::step(s, actors::coordinator::ev_peer{"b", true}, 50);
  auto v = sent(decoder_report(s, 50.5));
  REQUIRE(v.size() == 1);
  CHECK(v[0].index == 1);
  CHECK(v[0].verdict == "rejected");
  CHECK(v[0].at_unix == Approx(12));  // when it was given, not when it went
  answer(s, 1, 1, msg::verdict_outcome::indexed, 51);
  CHECK_FALSE(actors::coordinator::verdict_due(*s.find_job("r", 1)));
  CHECK(actors::coordinator::check_index(s).empty());
}

TEST_CASE("verdicts: a changed verdict is a new revision, an answer of the older settles nothing") {
  auto s = line_with(finished("r"));
  decoder_report(s, 11);
  CHECK(sent(review(s, 0, "accept", 12)).at(0).revision == 1);
  // The same verdict again: nothing new, nothing sent, its time kept.
  auto fx = review(s, 0, "accept", 12.5);
  CHECK(sent(fx).empty());
  CHECK(s.find_job("r", 0)->verdict_revision == 1);
  CHECK(s.find_job("r", 0)->reviewed_at == 12);
  // Changed: revision 2 goes at once.
  auto v = sent(review(s, 0, "reject", 13));
  REQUIRE(v.size() == 1);
  CHECK(v[0].revision == 2);
  CHECK(v[0].verdict == "rejected");
  // The answer to revision 1 comes late: revision 2 is still due, and sent again.
  answer(s, 0, 1, msg::verdict_outcome::indexed, 13.5);
  CHECK(s.find_job("r", 0)->verdict_indexed == 0);
  v = sent(decoder_report(s, 15.5));
  REQUIRE(v.size() == 1);
  CHECK(v[0].revision == 2);
  answer(s, 0, 2, msg::verdict_outcome::indexed, 16);
  CHECK(s.find_job("r", 0)->verdict_indexed == 2);
  CHECK(sent(decoder_report(s, 20)).empty());
  CHECK(actors::coordinator::check_index(s).empty());
}

TEST_CASE("verdicts: a write that failed is sent again, logged once, no line or refused settle it") {
  auto s = line_with(finished("r"));
  decoder_report(s, 11);
  review(s, 0, "accept", 12);
  auto fx = answer(s, 0, 1, msg::verdict_outcome::error, 12.5, "cannot fsync index.jsonl: EIO");
  CHECK(logs_containing(fx, "cannot fsync index.jsonl: EIO") == 1);
  CHECK(positions(fx, 0).first < 0);  // nothing to journal
  CHECK(actors::coordinator::verdict_due(*s.find_job("r", 0)));
  CHECK(sent(decoder_report(s, 14.5)).size() == 1);
  fx = answer(s, 0, 1, msg::verdict_outcome::error, 15, "cannot fsync index.jsonl: EIO");
  CHECK(logs_containing(fx, "EIO") == 0);  // the same error: said once
  // An answer this build does not know is no confirmation either.
  answer(s, 0, 1, "maybe", 15.5);
  CHECK(actors::coordinator::verdict_due(*s.find_job("r", 0)));
  fx = answer(s, 0, 1, msg::verdict_outcome::no_line, 16);
  CHECK(logs_containing(fx, "holds no line of its video") == 1);
  CHECK_FALSE(actors::coordinator::verdict_due(*s.find_job("r", 0)));

  review(s, 1, "reject", 17);
  fx = answer(s, 1, 1, msg::verdict_outcome::refused, 17.5, "run_id is not a safe name");
  CHECK(logs_containing(fx, "refused its verdict") == 1);
  CHECK_FALSE(actors::coordinator::verdict_due(*s.find_job("r", 1)));
  CHECK(s.idx.verdicts_due.empty());
  CHECK(actors::coordinator::check_index(s).empty());
}

TEST_CASE("verdicts: a job with no decoder's video is not sent, a decoder not in the config is said") {
  auto r = finished("r");
  r.jobs[0].decoder.clear();  // no video of a decoder (a record older than decoders named)
  r.jobs[1].decoder = "gone";
  auto s = line_with(r);
  decoder_report(s, 11);
  CHECK(sent(review(s, 0, "accept", 12)).empty());
  CHECK_FALSE(actors::coordinator::verdict_due(*s.find_job("r", 0)));
  auto fx = review(s, 1, "accept", 13);
  CHECK(sent(fx).empty());
  CHECK(logs_containing(fx, "decoder gone is not in the config") == 1);
  // Retention does not wait for a decoder that cannot answer.
  CHECK(actors::coordinator::runs_with_verdicts_due(s).empty());
}

TEST_CASE("verdicts: a run waits in memory for its verdicts, a restarted coordinator sends them again") {
  auto s = line_with(finished("r"));
  s.p.finished_run_memory_s = 0;  // forgotten at the first tick once finished
  decoder_report(s, 11);
  actors::coordinator::step(s, actors::coordinator::ev_peer{"b", false}, 11.5);
  review(s, 0, "accept", 12);
  actors::coordinator::step(s, actors::coordinator::ev_tick{}, 100);
  REQUIRE(s.find_run("r") != nullptr);  // held: its verdict is not in the index yet

  // The coordinator restarts: its state from the journal's records.
  auto back = line_of(1);
  back.p.finished_run_memory_s = 0;
  back.runs.push_back(actors::coordinator::run_from_record(actors::coordinator::run_record(*s.find_run("r"))));
  for (auto& j : s.find_run("r")->jobs)
    back.runs.back().jobs.push_back(actors::coordinator::job_from_record(actors::coordinator::job_record(j)));
  actors::coordinator::reindex(back);
  CHECK(actors::coordinator::check_index(back).empty());
  CHECK(back.find_job("r", 0)->verdict_revision == 1);
  CHECK(back.find_job("r", 0)->verdict_indexed == 0);
  actors::coordinator::step(back, actors::coordinator::ev_tick{}, 101);
  REQUIRE(back.find_run("r") != nullptr);
  auto v = sent(decoder_report(back, 102));  // the host is back
  REQUIRE(v.size() == 1);
  CHECK(v[0].revision == 1);
  CHECK(v[0].verdict == "accepted");
  answer(back, 0, 1, msg::verdict_outcome::indexed, 103);
  actors::coordinator::step(back, actors::coordinator::ev_tick{}, 104);
  CHECK(back.find_run("r") == nullptr);  // nothing more to wait for: forgotten

  // A record of a verdict journaled before verdicts went to the run index: sent once more.
  auto old = actors::coordinator::job_record(s.find_run("r")->jobs[0]);
  old.erase("verdict_revision");
  old.erase("verdict_indexed");
  auto j = actors::coordinator::job_from_record(old);
  CHECK(j.verdict_revision == 1);
  CHECK(j.verdict_indexed == 0);
  CHECK(actors::coordinator::verdict_due(j));
  // A job without a verdict writes neither field (records stay small).
  CHECK_FALSE(actors::coordinator::job_record(s.find_run("r")->jobs[1]).contains("verdict_revision"));
}
