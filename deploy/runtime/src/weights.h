#pragma once

// Weights files (weights.bin and its manifest, weights.json): the weights a package compiled
// without them runs on (the export writes them beside model.pt2), or new ones for any package.
// Three steps, so that nothing of a file is used before it checks out and a program serving runs
// keeps them out of only the last:
//
//   check_weights     before any code of the package runs: the manifest (its signature first,
//                     with a public key) and the package it names (the one loaded);
//   stage_weights     once the package is loaded: every constant and custom-object tensor the
//                     manifest lists against what the model holds or, for a package without its
//                     weights, the constants its metadata lists (names, dtypes, shapes), and the
//                     file's size against its tensors', before a byte of weights.bin is read;
//                     then weights.bin copied into the private folder through one descriptor
//                     while hashed, its size and sha256 against the manifest's; the private copy
//                     mapped (MAP_PRIVATE) and the model given tensors on the mapping: a CPU model
//                     computes on them as they are (AOTInductor's user-managed constants, no copy),
//                     a CUDA model gets them copied to its device; into the buffer runs read (a
//                     package without its weights) or the inactive one, and each object's new state
//                     built;
//   activate_weights  the objects' states set and, for an update, the buffers swapped: from then
//                     on every run uses the new set. The caller makes sure no run is in progress.
// Every failure before activate_weights leaves the model as it was. A refused weights file costs
// no memory beyond the manifest's text and parse: nothing is mapped or allocated from its claims
// before they are checked.

#include <ATen/Tensor.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "deploy/runtime/src/verified_copy.h"
#include "deploy/runtime/src/weights_manifest.h"

namespace my_ops::deploy::detail {

// Which weights file to load, and how to check it.
struct WeightsCheck {
  std::string weights;     // weights.bin
  std::string manifest;    // "": weights.json beside `weights`
  std::string public_key;  // "": no signature needed
};

// A weights file whose manifest checked out.
struct CheckedWeights {
  std::string source;  // weights.bin as the caller named it
  std::string manifest_path;
  WeightsManifest manifest;
};

// A custom object and the state it takes on activation.
struct ObjectUpdate {
  std::string name;
  c10::IValue object;
  c10::IValue new_state;
  c10::IValue old_state;  // to put back when a later object refuses its new state
};

class Mapping;

struct StagedWeights {
  std::string source;
  std::string sha256;  // weights.bin's
  // What a CPU model computes on. AOTInductor takes a user-managed constant as a new reference
  // that it never releases, so the tensors on the mapping do not own it: the mapping is unmapped
  // when this is destroyed, which must come after the last run on them (after the swap that
  // replaces them, or after the model).
  std::shared_ptr<Mapping> mapping;
  std::vector<ObjectUpdate> objects;
};

// Where stage_weights puts the constants: the buffer runs read (a package compiled without its
// weights, before its first run) or the inactive one (an update, swapped in by activate_weights).
enum class WeightsBuffer { kActive, kInactive };

// c10's dtype of one of the weights files' dtype names (weights_element_size's); kIntegrity for
// another.
c10::ScalarType dtype_named(const std::string& name);

// Fails with kIntegrity, naming the file at fault: a missing or unreadable manifest, a signature
// that does not verify, a malformed manifest, weights for another package than the one whose
// sha256 is `package_sha256` ("": any package, for a package loaded unverified, whose weights
// still have to fit it and match their manifest). With `optional`, a manifest that does not exist
// is no weights file: nullopt.
std::optional<CheckedWeights> check_weights(const WeightsCheck& check,
                                            const std::string& package_sha256,
                                            bool optional = false);

// `specs`: for a package compiled without its weights, the constants its metadata lists; null for
// one that holds them. `copy`: the private copy of weights.bin to make. Fails with kIntegrity when
// the weights do not fit the model (a constant or object missing on either side, another dtype or
// shape, a state tensor the file does not carry: any of which would mix old and new weights, or
// a file larger than its tensors), when weights.bin is missing or its size or sha256 is not the
// manifest's; kPackageCorrupt when the package holds a constant its metadata does not list; else
// kOther.
StagedWeights stage_weights(torch::inductor::AOTIModelPackageLoader& model,
                            const CheckedWeights& checked, const ConstantSpecs* specs,
                            WeightsBuffer buffer, bool on_cpu, const std::string& copy);

// Fails with kIntegrity when an object refuses its new state (its class's own checks); the
// model is then as it was. Swaps the constant buffers for kInactive.
void activate_weights(torch::inductor::AOTIModelPackageLoader& model, const StagedWeights& staged,
                      WeightsBuffer buffer);

// Releases the buffer the previous weights were in; call once no run can use them.
void release_previous_weights(torch::inductor::AOTIModelPackageLoader& model);

}  // namespace my_ops::deploy::detail
