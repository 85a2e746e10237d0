#pragma once

// The Model and CheckedPackage implementations, shared by the units of the API (model.cpp,
// session.cpp).

#include <ATen/Tensor.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "deploy/runtime/src/input_signature.h"
#include "deploy/runtime/src/manifest.h"
#include "deploy/runtime/src/private_dir.h"
#include "deploy/runtime/src/verified_copy.h"
#include "deploy/runtime/src/weights.h"
#include "deploy/runtime/src/weights_manifest.h"
#include "my_ops/model.h"

namespace my_ops::deploy {
namespace detail {

// One sequence's state: a copy of every buffer a package's runs update, zeroed. `views` are what
// the package is handed (AOTInductor user-managed constants): tensors on `memory` that do not own
// it, since AOTInductor keeps a reference to each constant it is given and never drops it; the
// memory goes with this object.
struct SessionState {
  uint64_t id = 0;  // unique in the process, never 0
  std::vector<at::Tensor> memory;
  std::unordered_map<std::string, at::Tensor> views;
};

// A zeroed state of `specs`' tensors, on `device` (the CPU when unset).
std::unique_ptr<SessionState> make_state(const ConstantSpecs& specs,
                                         const std::optional<c10::Device>& device);

}  // namespace detail

struct CheckedPackage::Impl {
  OpenOptions options;
  std::string public_key;  // options.public_key, "" when unset
  std::unique_ptr<detail::PrivateDir> dir;
  detail::VerifiedCopy package;
  std::vector<detail::VerifiedCopy> libraries;
  std::optional<detail::Manifest> manifest;  // none with verify = false
  std::optional<detail::CheckedWeights> weights;
};

struct Model::Impl {
  // Keeps the private folder, and so the copies and the extracted package, alive.
  std::unique_ptr<CheckedPackage::Impl> package;
  // The weights file a CPU model runs on, mapped: declared before the runner, to be unmapped
  // after it is destroyed. Replaced once a swap has taken the runs off it.
  detail::StagedWeights weights;
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> runner;
  std::optional<std::vector<detail::InputSpec>> signature;
  std::optional<c10::Device> device;  // the package's, when not the CPU
  // What a package compiled without its weights takes, from its metadata.
  std::optional<detail::ConstantSpecs> constant_specs;
  Metadata metadata;

  // Runs share `runs`; the swap of an update takes it alone. A run first passes through
  // `turnstile`, which a waiting swap holds, so that a steady stream of runs cannot keep the
  // swap out.
  mutable std::shared_mutex runs;
  mutable std::mutex turnstile;
  // One update at a time: each stages into the one inactive buffer.
  std::mutex updating;
  long updates = 0;  // names each update's copy of its weights file; under `updating`
  // weights.bin's sha256 of the last update; written with `runs` held alone.
  std::string weights_sha256;

  // A package with state (a decoder's KV cache, from its metadata): the buffers its runs update
  // and, for a decoder, its cache and vocabulary. Each run of such a package takes `runs` alone
  // and first hands the package the state it runs on (run_on_state).
  std::optional<detail::ConstantSpecs> state_specs;
  std::optional<detail::DecoderSpec> decoder;
  std::unique_ptr<detail::SessionState> own_state;  // run()'s
  // The id of the state the package holds now (0: none of ours, as after a weights update);
  // under `runs` held alone.
  mutable uint64_t bound_state = 0;
};

namespace detail {

// A run of a package with state on `state`: it takes the model's runs alone, hands the package
// `state` when it holds another, and runs it on `prepared` (Model::prepare's).
std::vector<at::Tensor> run_on_state(const Model::Impl& impl, SessionState& state,
                                     const std::vector<at::Tensor>& prepared);

}  // namespace detail
}  // namespace my_ops::deploy
