#pragma once

// Whether a JSON reader stays linear in its input, for tests that must fail, not hang, when it
// does not. The yardstick is nlohmann's own parser without a callback (linear in its input) on
// the same text, timed in the same process, so that a slow or sanitised build slows both; the
// reader gets 20 times that, and at least a second. The weights fuzz target bounds each input's
// read by 20 times the yardstick per byte. A quadratic reader misses it by orders of
// magnitude at the sizes the tests use (hours against a tenth of a second), so the margin leaves
// room for a noisy machine.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>

namespace my_ops::deploy::detail::parse_cost {

constexpr double kParseCostMargin = 20;
constexpr double kParseCostFloorSeconds = 1;

// How long nlohmann's own parser takes to parse `text` and free the value, at its fastest of
// three: the yardstick (a reader under test frees what it parsed too).
inline double yardstick_seconds(const std::string& text) {
  double fastest = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const auto t0 = std::chrono::steady_clock::now();
    {
      const nlohmann::json parsed = nlohmann::json::parse(text);
    }
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
    fastest = attempt == 0 ? took.count() : std::min(fastest, took.count());
  }
  return fastest;
}

// The yardstick per byte on an array of 2^16 empty objects, for bounds on inputs of any size.
inline double yardstick_seconds_per_byte() {
  std::string text = "[";
  for (int i = 0; i < (1 << 16); ++i) text += "{},";
  text += "{}]";
  return yardstick_seconds(text) / static_cast<double>(text.size());
}

// Runs `read(text)` on its own thread and returns what it returned. If it has not returned
// within the budget, prints why and ends the test binary with status 1: the thread cannot be
// stopped, and waiting for it could take hours.
inline std::string read_within_linear_budget(const std::string& what, const std::string& text,
                                             std::function<std::string(const std::string&)> read) {
  const double yardstick = yardstick_seconds(text);
  const double budget = std::max(kParseCostFloorSeconds, kParseCostMargin * yardstick);

  auto result = std::make_shared<std::promise<std::string>>();
  std::future<std::string> done = result->get_future();
  std::thread([result, text, read = std::move(read)] { result->set_value(read(text)); }).detach();
  if (done.wait_for(std::chrono::duration<double>(budget)) != std::future_status::ready) {
    std::fprintf(stderr,
                 "FAILED: reading %s (%zu bytes) took more than %.2f s, %.0f times nlohmann's own "
                 "parse of the same text (%.3f s): not linear in its input\n",
                 what.c_str(), text.size(), budget, kParseCostMargin, yardstick);
    std::fflush(stderr);
    std::_Exit(1);
  }
  return done.get();
}

}  // namespace my_ops::deploy::detail::parse_cost
