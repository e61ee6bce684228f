// The decoder's credit and queue machine on virtual time.
#include <catch2/catch.hpp>

#include "actors/decoder/decoder_machine.hpp"

using namespace vidline;
using namespace vidline::decoding;

namespace {

msg::decode_order order(uint64_t attempt) {
  msg::decode_order o;
  o.decoder = "dec";
  o.attempt = attempt;
  o.job.run_id = "r";
  o.job.index = static_cast<uint32_t>(attempt);
  o.latent_sha256 = std::string(64, 'a');
  o.source_host = "a";
  return o;
}

template <class T>
int count(const std::vector<effect>& fx) {
  int n = 0;
  for (auto& e : fx)
    n += std::holds_alternative<T>(e) ? 1 : 0;
  return n;
}

} // namespace

TEST_CASE("credits: two orders are taken, a third without a credit is refused") {
  state s;
  CHECK(s.credits() == 2);
  CHECK(count<fx_fetch>(step(s, ev_order{order(1)}, 0)) == 1);
  CHECK(count<fx_fetch>(step(s, ev_order{order(2)}, 0)) == 1);  // prefetch while 1 decodes
  CHECK(s.credits() == 0);
  CHECK(s.pending() == 1);
  auto fx = step(s, ev_order{order(3)}, 0);
  CHECK(count<fx_fetch>(fx) == 0);
  CHECK(s.refused_orders == 1);
  CHECK(s.holding.size() == 2);
}

TEST_CASE("one decode at a time, oldest fetched first; pending never above one") {
  state s;
  step(s, ev_order{order(1)}, 0);
  step(s, ev_order{order(2)}, 0);
  // 2 arrives first: it decodes; 1 waits.
  CHECK(count<fx_decode>(step(s, ev_fetched{2, "ok", ""}, 1)) == 1);
  CHECK(count<fx_decode>(step(s, ev_fetched{1, "ok", ""}, 2)) == 0);
  CHECK(s.pending() == 1);
  auto fx = step(s, ev_decoded{2, "ok", "", "/out/2", "x", 4}, 5);
  CHECK(count<fx_decode>(fx) == 1);  // 1 starts right away
  CHECK(s.credits() == 1);
  CHECK(s.unacked.size() == 1);
  CHECK(s.status().credits == 1);
  step(s, ev_ack{2}, 6);
  CHECK(s.unacked.empty());
}

TEST_CASE("a resent order is not taken twice, before or after it finished") {
  state s;
  step(s, ev_order{order(1)}, 0);
  CHECK(step(s, ev_order{order(1)}, 0).empty());
  step(s, ev_fetched{1, "ok", ""}, 1);
  step(s, ev_decoded{1, "ok", "", "/o", "x", 1}, 2);
  step(s, ev_ack{1}, 3);
  CHECK(step(s, ev_order{order(1)}, 4).empty());
  CHECK(s.holding.empty());
}

TEST_CASE("a latent that fails verification becomes a corrupt result and frees the credit") {
  state s;
  step(s, ev_order{order(1)}, 0);
  auto fx = step(s, ev_fetched{1, "corrupt", "digest mismatch"}, 1);
  CHECK(count<fx_decode>(fx) == 0);
  CHECK(count<fx_report>(fx) == 1);
  REQUIRE(s.unacked.size() == 1);
  CHECK(s.unacked[0].outcome == "corrupt");
  CHECK(s.credits() == 2);
}
