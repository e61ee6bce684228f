// Shots that follow shots in the scheduler (actors/coordinator/graph.hpp): a job waits for
// its source's video, its input is asked for, then it has a key and is queued or reused; a
// source that fails or is cancelled ends its dependents naming it; resume picks a chain up
// in the middle; every step leaves the index as a rebuild would.
#include <catch2/catch.hpp>

#include "actors/coordinator/dispatch_setup.hpp"
#include "actors/coordinator/graph.hpp"
#include "actors/coordinator/records.hpp"
#include "actors/coordinator/scheduler.hpp"
#include "common/sha256.hpp"
#include "config/shot_graph.hpp"
#include "config/shot_identity.hpp"
#include "tests/support/sched_fixtures.hpp"

using namespace vidline;
using actors::coordinator::job_state;
using sched_fixtures::line_of;

namespace {

/// A chain of `n` 5 s shots: job k takes the last frame of job k-1 as "first_frame".
actors::coordinator::run chain(const std::string& id, uint32_t n, bool rerender = false) {
  auto r = sched_fixtures::run_of(id, n);
  r.rerender = rerender;
  for (uint32_t k = 0; k < n; ++k) {
    auto& spec = r.jobs[k].spec;
    spec.shot = "seg" + std::to_string(k);
    spec.workflow = "wf";
    if (k == 0)
      continue;
    msg::job_input in;
    in.name = "first_frame";
    in.from = "seg" + std::to_string(k - 1);
    in.from_index = k - 1;
    in.frame = "last";
    spec.inputs.push_back(in);
  }
  return r;
}

struct line {
  actors::coordinator::state s = line_of(1);
  double now = 0;
  uint64_t pseq = 1, dseq = 1;

  line() {
    step(actors::coordinator::ev_pool_status{sched_fixtures::pool_report("p0", 7, pseq++)});
    decoder_report();
  }

  std::vector<actors::coordinator::effect> step(const actors::coordinator::event& e) {
    auto fx = actors::coordinator::step(s, e, now += 1);
    INFO(actors::coordinator::check_index(s));
    CHECK(actors::coordinator::check_index(s).empty());
    return fx;
  }

  std::vector<actors::coordinator::effect> decoder_report() {
    msg::decoder_status d;
    d.decoder = "dec";
    d.host = "b";
    d.epoch = 3;
    d.seq = dseq++;
    d.capacity = 2;
    return step(actors::coordinator::ev_decoder_status{d});
  }

  actors::coordinator::job& job(const std::string& run, uint32_t i) { return *s.find_job(run, i); }

  /// The job now sampling on p0 is sampled and decoded (its video's digest: its key's).
  std::vector<actors::coordinator::effect> render(const std::string& run, uint32_t i) {
    auto& j = job(run, i);
    REQUIRE(j.state == job_state::sampling);
    msg::sample_result r;
    r.pool = "p0";
    r.host = "a";
    r.attempt = j.attempt;
    r.run_id = run;
    r.index = i;
    r.outcome = msg::outcome::ok;
    r.latent_sha256 = std::string(64, 'c');
    step(actors::coordinator::ev_sample_result{r});
    REQUIRE(j.state == job_state::decoding);
    msg::decode_result d;
    d.decoder = "dec";
    d.host = "b";
    d.attempt = j.attempt;
    d.run_id = run;
    d.index = i;
    d.outcome = msg::outcome::ok;
    d.output = "/out/" + run + "-" + std::to_string(i) + ".mp4";
    d.output_sha256 = to_hex(sha256_of(j.spec.key));  // a video follows from its key
    return step(actors::coordinator::ev_decode_result{d});
  }
};

std::vector<actors::coordinator::fx_make_input> asked(const std::vector<actors::coordinator::effect>& fx) {
  std::vector<actors::coordinator::fx_make_input> out;
  for (auto& e : fx)
    if (auto* m = std::get_if<actors::coordinator::fx_make_input>(&e))
      out.push_back(*m);
  return out;
}

actors::coordinator::ev_input_made made(const actors::coordinator::fx_make_input& m) {
  return {m.run_id, m.index, m.name,
          to_hex(sha256_of(m.output_sha256 + "/" + std::to_string(m.frame))), 32, ""};
}

} // namespace

TEST_CASE("a chain runs link by link: each link waits for its source's video and its frame") {
  line l;
  l.step(actors::coordinator::ev_submit{chain("r", 3)});
  CHECK(l.job("r", 0).state == job_state::sampling);
  CHECK(l.job("r", 1).state == job_state::waiting);
  CHECK(l.job("r", 2).state == job_state::waiting);
  CHECK(l.job("r", 1).spec.key.empty());  // its input is not known: no key yet
  CHECK_FALSE(l.job("r", 0).spec.key.empty());
  for (uint32_t k = 0; k < 2; ++k) {
    auto fx = l.render("r", k);
    CHECK(l.job("r", k).state == job_state::succeeded);
    auto m = asked(fx);
    REQUIRE(m.size() == 1);
    CHECK(m[0].index == k + 1);
    CHECK(m[0].name == "first_frame");
    CHECK(m[0].frame == 120);  // the last of 5 x 24 + 1
    CHECK(m[0].frames == 121);
    CHECK(m[0].output_sha256 == l.job("r", k).output_sha256);
    CHECK(m[0].decoder == "dec");
    CHECK(l.job("r", k + 1).state == job_state::waiting);
    // Unanswered, it is asked again after input_resend_s, not before.
    CHECK(asked(l.step(actors::coordinator::ev_tick{})).empty());
    l.now += actors::coordinator::input_resend_s;
    CHECK(asked(l.step(actors::coordinator::ev_tick{})).size() == 1);
    l.step(made(m[0]));
    auto& next = l.job("r", k + 1);
    CHECK(next.state == job_state::sampling);
    CHECK(next.spec.inputs[0].sha256 == made(m[0]).sha256);
    CHECK(next.spec.key == config::job_key(next.spec));
    CHECK_FALSE(next.spec.key.empty());
    // An answer twice changes nothing.
    CHECK(l.step(made(m[0])).empty());
  }
  l.render("r", 2);
  CHECK(l.s.find_run("r")->done);
}

TEST_CASE("a run of the same shots reuses every output, an edit renders it and what follows") {
  line l;
  l.step(actors::coordinator::ev_submit{chain("r", 3)});
  for (uint32_t k = 0; k < 3; ++k) {
    auto m = asked(l.render("r", k));
    if (k < 2)
      l.step(made(m.at(0)));
  }
  // The same list again: the head is reused at once, each link when its frame is made.
  auto fx = l.step(actors::coordinator::ev_submit{chain("again", 3)});
  CHECK(l.job("again", 0).state == job_state::reused);
  CHECK(l.job("again", 0).output == l.job("r", 0).output);
  CHECK(l.job("again", 1).state == job_state::waiting);
  auto m = asked(fx);
  REQUIRE(m.size() == 1);
  CHECK(m[0].output_sha256 == l.job("r", 0).output_sha256);
  fx = l.step(made(m[0]));
  CHECK(l.job("again", 1).state == job_state::reused);
  l.step(made(asked(fx).at(0)));
  CHECK(l.job("again", 2).state == job_state::reused);
  CHECK(l.s.find_run("again")->done);
  CHECK(actors::coordinator::summarize(*l.s.find_run("again")).reused == 3);
  CHECK(l.s.jobs_reused == 3);

  // The middle shot edited: the head is reused, the middle and the tail render.
  auto edited = chain("edit", 3);
  edited.jobs[1].spec.prompt = "another prompt";
  fx = l.step(actors::coordinator::ev_submit{edited});
  CHECK(l.job("edit", 0).state == job_state::reused);
  l.step(made(asked(fx).at(0)));
  CHECK(l.job("edit", 1).state == job_state::sampling);
  l.step(made(asked(l.render("edit", 1)).at(0)));
  CHECK(l.job("edit", 2).state == job_state::sampling);  // its input differs: another key

  // --rerender: nothing reused.
  l.render("edit", 2);
  l.step(actors::coordinator::ev_submit{chain("forced", 3, true)});
  CHECK(l.job("forced", 0).state == job_state::sampling);
}

TEST_CASE("a run reuses the videos of its collection folder by key, the cluster's first") {
  // The keys and videos of a chain rendered once, on a line since forgotten.
  std::vector<actors::coordinator::held_output> made_before;
  std::vector<std::string> keys;
  {
    line first;
    first.step(actors::coordinator::ev_submit{chain("r", 3)});
    for (uint32_t k = 0; k < 3; ++k) {
      auto m = asked(first.render("r", k));
      if (k < 2)
        first.step(made(m.at(0)));
      const auto& j = first.job("r", k);
      keys.push_back(j.spec.key);
      made_before.push_back({"seg" + std::to_string(k) + ".mp4", j.output_sha256, "dec", "r", k,
                             true});
    }
  }
  // A fresh line: only the collection folder holds them.
  line l;
  auto offered = chain("again", 3);
  for (uint32_t k = 0; k < 3; ++k)
    offered.collected[keys[k]] = made_before[k];
  auto fx = l.step(actors::coordinator::ev_submit{offered});
  auto& head = l.job("again", 0);
  CHECK(head.state == job_state::reused);
  CHECK(head.reused_from == "collection");
  CHECK(head.output == "seg0.mp4");
  CHECK(head.output_sha256 == made_before[0].sha256);
  CHECK(head.sample_attempts == 0);
  // Its frame is asked from the collected video's digest, and each link is reused in turn.
  auto m = asked(fx);
  REQUIRE(m.size() == 1);
  CHECK(m[0].output_sha256 == made_before[0].sha256);
  fx = l.step(made(m[0]));
  CHECK(l.job("again", 1).state == job_state::reused);
  CHECK(l.job("again", 1).reused_from == "collection");
  l.step(made(asked(fx).at(0)));
  CHECK(l.job("again", 2).state == job_state::reused);
  CHECK(l.s.find_run("again")->done);
  CHECK(actors::coordinator::summarize(*l.s.find_run("again")).reused == 3);

  // The journal keeps a run's collection (a link reused after a restart needs it).
  const auto back = actors::coordinator::run_from_record(actors::coordinator::run_record(*l.s.find_run("again")));
  REQUIRE(back.collected.size() == 3);
  CHECK(back.collected.at(keys[1]).sha256 == made_before[1].sha256);
  CHECK(back.collected.at(keys[1]).collection);
  CHECK(actors::coordinator::job_from_record(actors::coordinator::job_record(l.job("again", 1))).reused_from
        == "collection");

  // A file altered in the folder is not offered: that link renders, the rest is reused.
  auto partly = chain("partly", 3);
  partly.collected[keys[0]] = made_before[0];
  partly.collected[keys[2]] = made_before[2];
  fx = l.step(actors::coordinator::ev_submit{partly});
  CHECK(l.job("partly", 0).state == job_state::reused);
  l.step(made(asked(fx).at(0)));
  CHECK(l.job("partly", 1).state == job_state::sampling);
  l.step(made(asked(l.render("partly", 1)).at(0)));
  CHECK(l.job("partly", 2).state == job_state::reused);  // its frame is the same: its key too

  // An output the cluster holds goes first (its decoder's host serves it).
  auto twice = chain("twice", 3);
  twice.collected[keys[0]] = made_before[0];
  twice.collected[keys[1]] = made_before[1];
  REQUIRE(l.job("partly", 1).spec.key == keys[1]);
  fx = l.step(actors::coordinator::ev_submit{twice});
  l.step(made(asked(fx).at(0)));
  CHECK(l.job("twice", 1).state == job_state::reused);
  CHECK(l.job("twice", 1).reused_from == "cluster");
  CHECK(l.job("twice", 1).output == l.job("partly", 1).output);

  // --rerender: the folder is not looked at either.
  auto forced = chain("forced", 3, true);
  forced.collected = offered.collected;
  l.step(actors::coordinator::ev_submit{forced});
  CHECK(l.job("forced", 0).state == job_state::sampling);
}

TEST_CASE("a latent handed over: asked from its host once the source has its video, in the key") {
  line l;
  auto r = chain("r", 2);
  r.jobs[1].spec.inputs[0] = {};
  auto& in = r.jobs[1].spec.inputs[0];
  in.name = "init_latent";
  in.from = "seg0";
  in.from_index = 0;
  in.latent = true;
  auto again = r;
  again.id = "again";
  for (auto& j : again.jobs)
    j.spec.run_id = "again";
  l.step(actors::coordinator::ev_submit{r});
  CHECK(l.job("r", 1).state == job_state::waiting);
  auto m = asked(l.render("r", 0));
  REQUIRE(m.size() == 1);
  CHECK(m[0].latent);
  CHECK(m[0].name == "init_latent");
  CHECK(m[0].output_sha256 == l.job("r", 0).latent_sha256);
  CHECK(m[0].latent_host == "a");
  CHECK(m[0].source == 0);
  // Until it is handed over, its host keeps it (not released with its job done).
  std::set<std::string> wanted;
  actors::coordinator::latents_wanted(l.s, wanted);
  CHECK(wanted == std::set<std::string>{l.job("r", 0).latent_sha256});
  // Made: the latent's own digest is the input's, and enters the key.
  l.step(actors::coordinator::ev_input_made{"r", 1, "init_latent", m[0].output_sha256, 4096, ""});
  auto& taker = l.job("r", 1);
  CHECK(taker.state == job_state::sampling);
  CHECK(taker.spec.inputs[0].sha256 == l.job("r", 0).latent_sha256);
  CHECK(taker.spec.inputs[0].bytes == 4096);
  CHECK(taker.spec.key == config::job_key(taker.spec));
  auto other = taker.spec;
  other.inputs[0].sha256 = std::string(64, 'd');
  CHECK(config::job_key(other) != taker.spec.key);  // another latent, another key
  wanted.clear();
  actors::coordinator::latents_wanted(l.s, wanted);
  CHECK(wanted.empty());
  l.render("r", 1);
  // The same list again: the source renders (only a render makes a latent to hand over),
  // the taker, given the same latent, is reused.
  l.step(actors::coordinator::ev_submit{again});
  CHECK(l.job("again", 0).state == job_state::sampling);
  m = asked(l.render("again", 0));
  REQUIRE(m.size() == 1);
  l.step(actors::coordinator::ev_input_made{"again", 1, "init_latent", m[0].output_sha256, 4096, ""});
  CHECK(l.job("again", 1).state == job_state::reused);
  // An answer without a digest fails the taker, naming its source.
  auto third = r;
  third.id = "third";
  for (auto& j : third.jobs)
    j.spec.run_id = "third";
  l.step(actors::coordinator::ev_submit{third});
  m = asked(l.render("third", 0));
  REQUIRE(m.size() == 1);
  l.step(actors::coordinator::ev_input_made{"third", 1, "init_latent", "", 0, ""});
  CHECK(l.job("third", 1).state == job_state::failed);
  CHECK(l.job("third", 1).error.find("input init_latent from shot seg0 (job 0)") != std::string::npos);
}

TEST_CASE("a source that fails for good fails its dependents naming it, resume goes on") {
  line l;
  l.step(actors::coordinator::ev_submit{chain("r", 3)});
  auto& j0 = l.job("r", 0);
  msg::sample_result r;
  r.pool = "p0";
  r.host = "a";
  r.attempt = j0.attempt;
  r.run_id = "r";
  r.index = 0;
  r.outcome = msg::outcome::fatal;
  r.error = "the model refused";
  l.step(actors::coordinator::ev_sample_result{r});
  CHECK(j0.state == job_state::failed);
  for (uint32_t k : {1u, 2u}) {
    CHECK(l.job("r", k).state == job_state::failed);
    CHECK(l.job("r", k).error
          == "an input's source shot seg0 (job 0) failed: pool p0: the model refused");
  }
  CHECK(l.s.find_run("r")->done);
  // Resume: the head renders again, the links wait for it.
  l.step(actors::coordinator::ev_resume{"r", std::nullopt});
  CHECK(l.job("r", 0).state == job_state::sampling);
  CHECK(l.job("r", 1).state == job_state::waiting);
  CHECK(l.job("r", 2).state == job_state::waiting);
  auto m = asked(l.render("r", 0));
  REQUIRE(m.size() == 1);
  l.step(made(m[0]));
  CHECK(l.job("r", 1).state == job_state::sampling);
}

TEST_CASE("an input that cannot be made fails the job and what follows it, naming why") {
  line l;
  auto fx = l.step(actors::coordinator::ev_submit{chain("r", 3)});
  auto m = asked(l.render("r", 0));
  auto e = made(m.at(0));
  e.sha256.clear();
  e.error = "the video is not on the coordinator's host";
  l.step(e);
  CHECK(l.job("r", 1).state == job_state::failed);
  CHECK(l.job("r", 1).error == "input first_frame from shot seg0 (job 0): the video is not on "
                               "the coordinator's host");
  CHECK(l.job("r", 2).state == job_state::failed);
}

TEST_CASE("cancelling a shot cancels what depends on it, not what it depends on") {
  line l;
  l.step(actors::coordinator::ev_submit{chain("r", 4)});
  l.step(made(asked(l.render("r", 0)).at(0)));
  l.step(actors::coordinator::ev_cancel{"r", 1u});
  CHECK(l.job("r", 0).state == job_state::succeeded);
  for (uint32_t k : {1u, 2u, 3u})
    CHECK(l.job("r", k).state == job_state::cancelled);
  CHECK(l.s.find_run("r")->done);
}

TEST_CASE("a restarted coordinator asks again for the inputs of a chain stopped mid-way") {
  line l;
  l.step(actors::coordinator::ev_submit{chain("r", 3)});
  auto m = asked(l.render("r", 0));
  REQUIRE(m.size() == 1);
  // The journal's records, read back into a fresh state (the answer never came).
  actors::coordinator::state fresh = line_of(1);
  actors::coordinator::run back = *l.s.find_run("r");
  back.jobs.clear();
  for (auto& j : l.s.find_run("r")->jobs)
    back.jobs.push_back(actors::coordinator::job_from_record(actors::coordinator::job_record(j)));
  back = [&] {
    auto r = actors::coordinator::run_from_record(actors::coordinator::run_record(back));
    r.jobs = back.jobs;
    return r;
  }();
  fresh.runs.push_back(back);
  actors::coordinator::reindex(fresh);
  CHECK(fresh.runs[0].jobs[1].state == job_state::waiting);
  CHECK(fresh.runs[0].jobs[1].spec.inputs.at(0).from_index == 0);
  auto fx = actors::coordinator::step(fresh, actors::coordinator::ev_tick{}, 100);
  auto again = asked(fx);
  REQUIRE(again.size() == 1);
  CHECK(again[0].index == 1);
  CHECK(again[0].output_sha256 == m[0].output_sha256);
  actors::coordinator::step(fresh, made(again[0]), 101);
  CHECK(fresh.runs[0].jobs[1].state == job_state::queued);
}

TEST_CASE("jobs of a shot list go critical path first: a chain's head before lone shots") {
  std::vector<msg::shot> shots;
  auto shot = [&](const std::string& name, const std::string& from = "") {
    msg::shot s;
    s.name = name;
    s.prompt = "p";
    s.width = 416;
    s.height = 736;
    s.seconds = 5;
    if (!from.empty()) {
      msg::job_input in;
      in.name = "reference";
      in.from = from;
      in.frame = "last";
      s.inputs.push_back(in);
    }
    shots.push_back(s);
  };
  shot("lone1");
  shot("lone2");
  shot("c3", "c2");
  shot("c2", "c1");
  shot("c1");
  auto jobs = actors::coordinator::shot_jobs(shots, "r", "", "");
  std::vector<std::string> order;
  for (auto& j : jobs)
    order.push_back(j.shot);
  // Ranks 3, 2 for the chain's head and middle; its tail and the lone shots 1, in file order.
  CHECK(order == std::vector<std::string>{"c1", "c2", "lone1", "lone2", "c3"});
  CHECK(jobs[1].inputs.at(0).from_index == 0);  // c2 takes from c1, now job 0
  CHECK(jobs[4].inputs.at(0).from_index == 1);  // c3 from c2
  CHECK(config::graph::sequence_parts(shots, jobs).empty());
  // Without the ranks (what a list would get in file order, for the planner to compare):
  // the file's order, the inputs still pointing at their sources' jobs.
  auto plain = actors::coordinator::shot_jobs(shots, "r", "", "", nullptr, false);
  std::vector<std::string> file_order;
  for (auto& j : plain)
    file_order.push_back(j.shot);
  CHECK(file_order == std::vector<std::string>{"lone1", "lone2", "c3", "c2", "c1"});
  CHECK(plain[2].inputs.at(0).from_index == 3);  // c3 takes from c2, job 3
  CHECK(plain[3].inputs.at(0).from_index == 4);  // c2 from c1
}
