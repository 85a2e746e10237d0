#include "my_ops/session.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/multinomial.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/topk.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "deploy/runtime/src/error_text.h"
#include "deploy/runtime/src/model_impl.h"

namespace my_ops::deploy {
namespace {

using detail::translated;

[[noreturn]] void refuse(ExitCode code, std::string message) {
  throw Error(code, std::move(message));
}

void check_sampling(const Sampling& s) {
  if (!(s.temperature >= 0) || !std::isfinite(s.temperature)) {
    refuse(kUsage,
           "Sampling::temperature must be a number >= 0, got " + std::to_string(s.temperature));
  }
  if (s.top_k < 0) refuse(kUsage, "Sampling::top_k must be >= 0, got " + std::to_string(s.top_k));
  if (!(s.top_p > 0 && s.top_p <= 1)) {
    refuse(kUsage, "Sampling::top_p must be in (0, 1], got " + std::to_string(s.top_p));
  }
}

// The next token from one row of logits: Sampling's rule, in the order of Python's pick()
// (deploy/exporter/generate.py), so that a seed draws the same tokens in both.
int64_t pick(const at::Tensor& logits, const Sampling& s, at::Generator& generator) {
  const at::Tensor row = logits.reshape({-1}).to(at::kCPU, at::kFloat);
  if (s.temperature == 0) return row.argmax().item<int64_t>();
  at::Tensor scaled = row.div(s.temperature);
  if (s.top_k > 0 && s.top_k < scaled.numel()) {
    const at::Tensor kth = std::get<0>(at::topk(scaled, s.top_k)).select(0, s.top_k - 1);
    scaled = scaled.masked_fill(scaled.lt(kth), -std::numeric_limits<float>::infinity());
  }
  at::Tensor probs = at::softmax(scaled, -1);
  if (s.top_p < 1) {
    const auto [sorted, order] = at::sort(probs, -1, /*descending=*/true);
    const at::Tensor before = at::cumsum(sorted, -1).sub(sorted);
    // Every token whose predecessors already reach top_p is cut; the first never is.
    probs = probs.index_fill(0, order.masked_select(before.ge(s.top_p)), 0.0);
  }
  return at::multinomial(probs, 1, /*replacement=*/false, generator).item<int64_t>();
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

struct Session::Impl {
  const Model& model;
  detail::DecoderSpec decoder;
  std::unique_ptr<detail::SessionState> state;
  int64_t position = 0;

  // Token ids of `name` that step() may run at the session's position.
  void check_tokens(const std::vector<int64_t>& ids, const std::string& name) const {
    if (ids.empty()) refuse(kInputMismatch, name + " is empty: there is no token to run");
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= decoder.vocab_size) {
        refuse(kInputMismatch, name + "[" + std::to_string(i) + "] = " + std::to_string(ids[i]) +
                                   " is not a token id of the vocabulary (0 .. " +
                                   std::to_string(decoder.vocab_size - 1) + ")");
      }
    }
  }
};

Session::Session(const Model& model) {
  translated([&] {
    const Model::Impl& m = *model.impl_;
    if (!m.decoder || !m.state_specs) {
      refuse(kNotDecoder,
             "the package is not a decoder with a KV cache (export it with --kv-cache): it "
             "cannot generate tokens");
    }
    impl_ = std::make_unique<Impl>(
        Impl{model, *m.decoder, detail::make_state(*m.state_specs, m.device), 0});
  });
}

Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;
Session::~Session() = default;

at::Tensor Session::step(const std::vector<int64_t>& token_ids) {
  return translated([&] {
    Impl& s = *impl_;
    s.check_tokens(token_ids, "token_ids");
    const auto count = static_cast<int64_t>(token_ids.size());
    if (count > s.decoder.cache_length - s.position) {
      refuse(kInputMismatch,
             std::to_string(count) + " tokens at position " + std::to_string(s.position) +
                 " run past the end of the KV cache (" + std::to_string(s.decoder.cache_length) +
                 " positions): reset() the session");
    }
    const at::Tensor ids = at::tensor(token_ids, at::kLong).reshape({1, count});
    const at::Tensor positions = at::arange(s.position, s.position + count, at::kLong);
    const std::vector<at::Tensor> prepared = s.model.prepare({ids, positions});
    const std::vector<at::Tensor> outputs =
        detail::run_on_state(*s.model.impl_, *s.state, prepared);
    s.position += count;
    if (outputs.empty()) refuse(kOther, "the decoder package returned no logits");
    return outputs[0].reshape({-1});
  });
}

Generated Session::generate(const std::vector<int64_t>& prompt_ids,
                            const GenerateOptions& options) {
  return translated([&] {
    Impl& s = *impl_;
    check_sampling(options.sampling);
    if (options.max_new_tokens < 1) {
      refuse(kUsage, "GenerateOptions::max_new_tokens must be at least 1, got " +
                         std::to_string(options.max_new_tokens));
    }
    s.check_tokens(prompt_ids, "the prompt");
    if (options.stop_token) s.check_tokens({*options.stop_token}, "the stop token");
    const auto prompt = static_cast<int64_t>(prompt_ids.size());
    // The last new token is not run: the prompt and max_new_tokens - 1 tokens take positions.
    const int64_t free = s.decoder.cache_length - s.position;
    if (prompt > free || options.max_new_tokens - 1 > free - prompt) {
      refuse(kInputMismatch,
             "a prompt of " + std::to_string(prompt) + " tokens and " +
                 std::to_string(options.max_new_tokens) + " new tokens need " +
                 std::to_string(prompt + options.max_new_tokens - 1) + " positions" +
                 (s.position > 0 ? " (after " + std::to_string(s.position) + " already used)"
                                 : std::string()) +
                 ", the KV cache has " + std::to_string(s.decoder.cache_length));
    }
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(options.sampling.seed);
    Generated out;
    out.prompt_tokens = prompt;
    auto start = std::chrono::steady_clock::now();
    int64_t token = pick(step(prompt_ids), options.sampling, generator);
    out.prefill_seconds = seconds_since(start);
    out.tokens.push_back(token);
    start = std::chrono::steady_clock::now();
    while (static_cast<int64_t>(out.tokens.size()) < options.max_new_tokens &&
           token != options.stop_token) {
      token = pick(step({token}), options.sampling, generator);
      out.tokens.push_back(token);
    }
    out.decode_seconds = seconds_since(start);
    return out;
  });
}

void Session::reset() {
  translated([&] {
    for (at::Tensor& t : impl_->state->memory) t.zero_();
    impl_->position = 0;
  });
}

int64_t Session::position() const { return impl_->position; }
int64_t Session::cache_length() const { return impl_->decoder.cache_length; }
int64_t Session::vocab_size() const { return impl_->decoder.vocab_size; }

double Generated::prefill_tokens_per_second() const {
  return prefill_seconds > 0 ? static_cast<double>(prompt_tokens) / prefill_seconds : 0.0;
}

double Generated::decode_tokens_per_second() const {
  const auto steps = static_cast<double>(tokens.size()) - 1;
  return steps > 0 && decode_seconds > 0 ? steps / decode_seconds : 0.0;
}

}  // namespace my_ops::deploy
