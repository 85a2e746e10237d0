#pragma once

// New weights for a loaded package: a weights file (weights.bin) and its manifest (weights.json),
// checked, read and swapped in, in two steps, so that a program serving runs can keep them out
// of only the last one.
//
//   stage_weights     the manifest (its signature first, with a public key) and the package it
//                     names (the one loaded); every constant and custom-object tensor it lists
//                     against what the model holds (names, dtypes, shapes: weights.bin's bytes go
//                     where the model's were), before anything is allocated; weights.bin read
//                     once, through one descriptor, into fresh tensors of the model's sizes while
//                     hashed, and the hash against the manifest's; then the constants copied into
//                     AOTInductor's inactive constant buffer, which no run reads, and each
//                     object's new state built;
//   activate_weights  the objects' states set and the buffers swapped: from then on every run uses
//                     the new set. The caller makes sure that no run is in progress.
// Every failure before activate_weights leaves the model as it was. A refused weights file costs
// no memory beyond the manifest's text and parse: nothing is allocated from its claims.

#include <ATen/Tensor.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <string>
#include <vector>

#include "deploy/runtime/src/weights_manifest.h"

namespace my_ops::deploy::detail {

// Which weights file to load, and how to check it.
struct WeightsCheck {
  std::string weights;     // weights.bin
  std::string manifest;    // "": weights.json beside `weights`
  std::string public_key;  // "": no signature needed
};

// A custom object and the state it takes on activation.
struct ObjectUpdate {
  std::string name;
  c10::IValue object;
  c10::IValue new_state;
  c10::IValue old_state;  // to put back when a later object refuses its new state
};

struct StagedWeights {
  std::string source;
  std::string sha256;  // weights.bin's
  std::vector<ObjectUpdate> objects;
};

// Fails with kIntegrity, naming the file at fault: missing or unreadable files, a signature that
// does not verify, a malformed manifest, weights for another package than the one whose sha256
// is `package_sha256`, weights that do not fit the model (a constant or object missing on either
// side, another dtype or shape, a state tensor the file does not carry: any of which would mix old
// and new weights), a weights file whose size or sha256 is not the manifest's; else with kOther.
StagedWeights stage_weights(torch::inductor::AOTIModelPackageLoader& model,
                            const WeightsCheck& check, const std::string& package_sha256);

// Fails with kIntegrity when an object refuses its new state (its class's own checks); the
// model is then as it was.
void activate_weights(torch::inductor::AOTIModelPackageLoader& model, const StagedWeights& staged);

// Releases the buffer the previous weights were in; call once no run can use them.
void release_previous_weights(torch::inductor::AOTIModelPackageLoader& model);

}  // namespace my_ops::deploy::detail
