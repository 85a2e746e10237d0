#pragma once

// New weights for a loaded package: a weights file (weights.bin) and its manifest (weights.json),
// checked, read and swapped in, in three steps, so that a program serving runs can keep them out
// of only the last one.
//
//   read_weights      the manifest (its signature first, with a public key), the package it names
//                     (the one loaded), weights.bin read once through one descriptor into fresh
//                     tensors while hashed, the hash against the manifest's;
//   stage_weights     every constant and custom-object tensor checked against what the model
//                     holds (names, dtypes, shapes: weights.bin's bytes go where the model's were),
//                     the constants copied into AOTInductor's inactive constant buffer, which no
//                     run reads, and each object's new state built;
//   activate_weights  the objects' states set and the buffers swapped: from then on every run uses
//                     the new set. The caller makes sure that no run is in progress.
// Every failure before activate_weights leaves the model as it was.

#include <ATen/Tensor.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "deploy/loader/weights_manifest.h"

namespace my_ops::loader {

// Which weights file to load, and how to check it.
struct WeightsCheck {
  std::string weights;     // weights.bin
  std::string manifest;    // "": weights.json beside `weights`
  std::string public_key;  // "": no signature needed
};

// A weights file that matched its manifest, read into tensors (on the CPU).
struct LoadedWeights {
  std::string source;         // the weights file as named, for messages
  std::string manifest_path;  // its manifest
  WeightsManifest manifest;
  std::unordered_map<std::string, at::Tensor> constants;  // by name
  std::vector<std::vector<at::Tensor>> object_tensors;    // as manifest.objects[i].tensors
};

// Fails with kIntegrity, naming the file at fault: missing or unreadable files, a signature that
// does not verify, a malformed manifest, weights for another package than the one whose sha256
// is `package_sha256`, a weights file whose size or sha256 is not the manifest's.
LoadedWeights read_weights(const WeightsCheck& check, const std::string& package_sha256);

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

// Fails with kIntegrity when the weights do not fit the model (a constant or object missing on
// either side, another dtype or shape, a state tensor the file does not carry: any of which would
// mix old and new weights), else with kOther.
StagedWeights stage_weights(torch::inductor::AOTIModelPackageLoader& model,
                            LoadedWeights&& weights);

// Fails with kIntegrity when an object refuses its new state (its class's own checks); the
// model is then as it was.
void activate_weights(torch::inductor::AOTIModelPackageLoader& model, const StagedWeights& staged);

// Releases the buffer the previous weights were in; call once no run can use them.
void release_previous_weights(torch::inductor::AOTIModelPackageLoader& model);

}  // namespace my_ops::loader
