// The live coordinator's run clock reads wall time / time_scale (~1e10 s), a plan's starts
// at 0: the scheduler and the auto policy must decide alike whatever the clock's origin.
#include <catch2/catch.hpp>

#include <vector>

#include "nodes/verbs/plan_cmd.hpp"

using namespace vidline;

namespace {

/// The pools the first dispatch of a batch orders, on a line whose pools and decoders all
/// reported at `t0`, the batch submitted then.
std::vector<std::string> first_orders(double t0, const std::string& mode, uint32_t w,
                                      uint32_t h, uint32_t count) {
  auto s = nodes::verbs::load_plan_setup("", "");
  uint64_t seq = 1;
  for (auto& [name, p] : s.state.pools) {
    msg::pool_status st;
    st.pool = name;
    st.host = p.host;
    st.epoch = 7;
    st.seq = seq++;
    actors::coordinator::step(s.state, actors::coordinator::ev_pool_status{st}, t0);
  }
  for (auto& [name, d] : s.state.decoders) {
    msg::decoder_status st;
    st.decoder = name;
    st.host = d.host;
    st.epoch = 7;
    st.credits = 2;
    st.seq = seq++;
    actors::coordinator::step(s.state, actors::coordinator::ev_decoder_status{st}, t0);
  }
  actors::coordinator::run r;
  r.id = "r";
  r.mode = mode;
  for (uint32_t i = 0; i < count; ++i) {
    actors::coordinator::job j;
    j.spec = msg::job_spec{"r", i, 4242 + i, w, h, 5, "p", "x", ""};
    r.jobs.push_back(j);
  }
  std::vector<std::string> pools;
  for (auto& e : actors::coordinator::step(s.state, actors::coordinator::ev_submit{r}, t0))
    if (auto* o = std::get_if<actors::coordinator::fx_send_sample>(&e))
      pools.push_back(o->order.pool);
  return pools;
}

} // namespace

TEST_CASE("auto dispatches alike on a plan's clock and on a live coordinator's") {
  for (auto [w, h, count] : {std::tuple{416u, 736u, 6u}, std::tuple{736u, 1280u, 30u}}) {
    INFO(w << "x" << h << " x " << count);
    auto at_zero = first_orders(0, "auto", w, h, count);
    REQUIRE_FALSE(at_zero.empty());
    CHECK(first_orders(4.4e10, "auto", w, h, count) == at_zero);  // 2026 at time_scale 0.04
    CHECK(first_orders(1.8e11, "auto", w, h, count) == at_zero);  // at time_scale 0.01
  }
  // 416x736 x 6 is best on 4+4 and the XTX (docs/planner.md, auto).
  CHECK(first_orders(4.4e10, "auto", 416, 736, 6)
        == std::vector<std::string>{"four_a", "four_b", "xtx"});
}
