// my_ops/session.h on //deploy:decoder_package (a small LLaMA with a KV cache of 64 positions):
// a step-by-step decode against one run over the whole sequence, sessions interleaved and
// alone, Model::run between them, and the refusals, after which a session goes on.

#include "my_ops/session.h"

#include <ATen/ops/allclose.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/tensor.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "deploy/runtime/tests/runfiles.h"
#include "my_ops/model.h"

namespace {

using my_ops::deploy::Error;
using my_ops::deploy::ExitCode;
using my_ops::deploy::GenerateOptions;
using my_ops::deploy::Model;
using my_ops::deploy::OpenOptions;
using my_ops::deploy::Session;

constexpr int64_t kCache = 64;
constexpr int64_t kVocab = 512;

using my_ops::deploy::testing::file_of;
using my_ops::deploy::testing::runfile;

Model open(const char* variable) {
  OpenOptions options;
  options.package = file_of(variable, "model.pt2");
  options.op_libraries = {runfile(std::getenv("MY_OPS_LIBRARY"))};
  return Model::open(options);
}

const Model& decoder() {
  static const Model model = open("MY_OPS_DECODER_PACKAGE");
  return model;
}

std::vector<int64_t> prompt(int64_t first, int64_t length) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < length; ++i) ids.push_back((first + 37 * i) % kVocab);
  return ids;
}

GenerateOptions greedy(int64_t n) {
  GenerateOptions options;
  options.max_new_tokens = n;
  return options;
}

ExitCode code_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.code();
  }
  return ExitCode::kOk;
}

TEST(Session, TheModelDescribesItsDecoderAndState) {
  const auto& md = decoder().metadata();
  ASSERT_TRUE(md.decoder.has_value());
  EXPECT_EQ(md.decoder->cache_length, kCache);
  EXPECT_EQ(md.decoder->vocab_size, kVocab);
  EXPECT_EQ(md.state,
            (std::vector<std::string>{"layers.0.attention.k_cache", "layers.0.attention.v_cache",
                                      "layers.1.attention.k_cache", "layers.1.attention.v_cache"}));
}

// Each decode step's logits are those of one run over the whole sequence so far in a fresh
// session: the cache holds what a full run computes.
TEST(Session, StepsOnTheCacheMatchOneRunOverTheWholeSequence) {
  Session stepwise(decoder());
  std::vector<int64_t> sequence = prompt(3, 6);
  at::Tensor logits = stepwise.step(sequence);
  for (int i = 0; i < 12; ++i) {
    Session whole(decoder());
    const at::Tensor expected = whole.step(sequence);
    // float32 through two layers, summed in another order over 1 or T rows: well within 1e-4.
    EXPECT_TRUE(at::allclose(logits, expected, 1e-4, 1e-4)) << "at length " << sequence.size();
    sequence.push_back(logits.argmax().item<int64_t>());
    logits = stepwise.step({sequence.back()});
  }
  EXPECT_EQ(stepwise.position(), 6 + 12);
}

TEST(Session, InterleavedSessionsProduceTheTokensEachProducesAlone) {
  const auto a_prompt = prompt(5, 9);
  const auto b_prompt = prompt(11, 3);
  const auto alone_a = Session(decoder()).generate(a_prompt, greedy(15)).tokens;
  const auto alone_b = Session(decoder()).generate(b_prompt, greedy(15)).tokens;
  ASSERT_NE(alone_a, alone_b);
  Session a(decoder());
  Session b(decoder());
  std::vector<int64_t> got_a{a.step(a_prompt).argmax().item<int64_t>()};
  std::vector<int64_t> got_b{b.step(b_prompt).argmax().item<int64_t>()};
  while (got_a.size() < 15) {
    got_a.push_back(a.step({got_a.back()}).argmax().item<int64_t>());
    // The model's own state runs in between, and changes neither session's.
    decoder().run({at::tensor(std::vector<int64_t>{1, 2}).reshape({1, 2}), at::arange(2)});
    got_b.push_back(b.step({got_b.back()}).argmax().item<int64_t>());
  }
  EXPECT_EQ(got_a, alone_a);
  EXPECT_EQ(got_b, alone_b);
}

TEST(Session, ResetStartsOverAndGenerateContinuesASequence) {
  Session session(decoder());
  const auto whole = session.generate(prompt(7, 5), greedy(11)).tokens;
  session.reset();
  EXPECT_EQ(session.position(), 0);
  const auto first = session.generate(prompt(7, 5), greedy(4)).tokens;
  EXPECT_EQ(session.position(), 5 + 3);
  const auto rest = session.generate({first.back()}, greedy(7)).tokens;
  std::vector<int64_t> joined(first.begin(), first.end());
  joined.insert(joined.end(), rest.begin(), rest.end());
  EXPECT_EQ(joined, whole);
}

TEST(Session, SamplingIsSeededAndStopsAtTheStopToken) {
  GenerateOptions options = greedy(20);
  options.sampling = {0.9, 8, 0.95, 77};
  const auto first = Session(decoder()).generate(prompt(2, 4), options).tokens;
  EXPECT_EQ(Session(decoder()).generate(prompt(2, 4), options).tokens, first);
  options.sampling.seed = 78;
  EXPECT_NE(Session(decoder()).generate(prompt(2, 4), options).tokens, first);
  GenerateOptions stopping = greedy(30);
  const auto tokens = Session(decoder()).generate(prompt(9, 4), stopping).tokens;
  stopping.stop_token = tokens[4];
  const auto stopped = Session(decoder()).generate(prompt(9, 4), stopping).tokens;
  EXPECT_EQ(stopped.back(), tokens[4]);
  EXPECT_LE(stopped.size(), 5u);
}

TEST(Session, RefusalsLeaveTheSessionAsItWas) {
  Session session(decoder());
  const auto expected = Session(decoder()).generate(prompt(4, 3), greedy(6)).tokens;
  EXPECT_EQ(code_of([&] { session.generate({}, greedy(3)); }), ExitCode::kInputMismatch);
  EXPECT_EQ(code_of([&] { session.generate({1, kVocab}, greedy(3)); }), ExitCode::kInputMismatch);
  EXPECT_EQ(code_of([&] { session.generate({-1}, greedy(3)); }), ExitCode::kInputMismatch);
  EXPECT_EQ(code_of([&] { session.generate(prompt(1, 60), greedy(6)); }), ExitCode::kInputMismatch);
  EXPECT_EQ(code_of([&] { session.generate({1}, greedy(0)); }), ExitCode::kUsage);
  GenerateOptions bad = greedy(3);
  bad.sampling.top_p = 0;
  EXPECT_EQ(code_of([&] { session.generate({1}, bad); }), ExitCode::kUsage);
  EXPECT_EQ(session.position(), 0);
  EXPECT_EQ(session.generate(prompt(4, 3), greedy(6)).tokens, expected);
}

TEST(Session, AStepPastTheEndOfTheCacheIsRefused) {
  Session session(decoder());
  session.step(prompt(1, kCache));
  EXPECT_EQ(code_of([&] { session.step({1}); }), ExitCode::kInputMismatch);
  EXPECT_EQ(session.position(), kCache);
}

TEST(Session, APackageWithoutStateIsNotADecoder) {
  const Model model = open("MY_OPS_DEFAULT_PACKAGE");
  EXPECT_TRUE(model.metadata().state.empty());
  EXPECT_FALSE(model.metadata().decoder.has_value());
  EXPECT_EQ(code_of([&] { Session session(model); }), ExitCode::kNotDecoder);
}

}  // namespace
