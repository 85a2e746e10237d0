#pragma once

// Generating tokens with a decoder package: a package exported with a KV cache
// (`my-ops-export --kv-cache LEN`, my_ops.llama in Python), whose runs take the new tokens' ids
// [1, T] and their positions [T] and return the last token's logits [1, vocab], and keep the keys
// and values of every token run so far in buffers of the package.
//
//   my_ops::deploy::Model model = my_ops::deploy::Model::open(options);
//   my_ops::deploy::Session session(model);
//   my_ops::deploy::GenerateOptions generate;
//   generate.max_new_tokens = 64;
//   std::vector<int64_t> tokens = session.generate(prompt_ids, generate).tokens;
//
// A Session owns one sequence: its own copy of the package's state, zeroed, and the position
// its next token goes to. It hands the package that state before each of its runs when another
// session (or Model::run) ran last, so that several sessions of one model each continue their
// own sequence.
//
// Threads: a Session is for one thread at a time. Runs of one model's sessions (and its run())
// take turns: each holds the model alone for the length of one run, since the package holds one
// state at a time. Sessions of different models are independent. The Model must outlive its
// sessions. Each switch between sessions leaves a few bytes per state tensor with AOTInductor,
// which keeps a reference to every tensor it is handed: sessions are for sequences, not for
// switching at every token by the million.
//
// Token ids in and out: there is no tokenizer here.

#include <ATen/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "my_ops/error.h"
#include "my_ops/model.h"

namespace my_ops::deploy {

// How the next token is picked from the last logits. temperature 0 is greedy (the first of the
// largest logits); above 0, the logits are divided by it, cut to the top_k largest (0: all) and
// to the smallest set whose probabilities reach top_p (1: all), and a token is drawn with a
// generator seeded with `seed` (LibTorch's CPU generator: my_ops.deploy.Sampling in Python draws
// the same tokens from the same logits).
struct Sampling {
  double temperature = 0.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 0;
};

struct GenerateOptions {
  int64_t max_new_tokens = 0;  // at least 1
  Sampling sampling;
  // Generation ends after this token (it is returned); unset: after max_new_tokens.
  std::optional<int64_t> stop_token;
};

struct Generated {
  std::vector<int64_t> tokens;  // the new tokens
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0;  // the prompt's run
  double decode_seconds = 0;   // the runs after it, one per new token but the last
  double prefill_tokens_per_second() const;
  double decode_tokens_per_second() const;
};

class Session {
 public:
  // Fails with kNotDecoder for a package that is not a decoder with a KV cache.
  explicit Session(const Model& model);
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;
  ~Session();

  // Runs the package on `token_ids` at the session's next positions and returns the last one's
  // logits [vocab] (float, on the package's device); the position advances by their number.
  // Fails with kInputMismatch, before anything runs, for no tokens, an id outside the
  // vocabulary, or more tokens than the cache has positions left.
  at::Tensor step(const std::vector<int64_t>& token_ids);

  // Continues the sequence with `prompt_ids` (one run) and then up to max_new_tokens new tokens
  // (one run each but the last, which is returned without being run: it is the next call's
  // prompt when the sequence goes on). Fails with kUsage for bad options and kInputMismatch for a
  // prompt step() would refuse or too many new tokens for the cache (the prompt and
  // max_new_tokens - 1 tokens take positions), before anything runs: the session is then as it
  // was.
  Generated generate(const std::vector<int64_t>& prompt_ids, const GenerateOptions& options);

  // Starts a new sequence: the state zeroed, the next token at position 0.
  void reset();

  int64_t position() const;      // the next token's
  int64_t cache_length() const;  // the positions a sequence may take
  int64_t vocab_size() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace my_ops::deploy
