#pragma once

// What each tier's panel blocks (cpu_<tier>.cpp) use to fill their table.

#include <array>
#include <cstddef>
#include <utility>

#include "ops/packed_linear/cpu_vec.h"

namespace my_ops::cpu_vec {

// blocks_of<Kernel>(std::make_index_sequence<Rows>())[R - 1] is Kernel<R>::run for R up to Rows;
// the entries past Rows stay null.
template <template <int> class Kernel, size_t... R>
constexpr std::array<PanelBlock, kMaxPanelBlockRows> blocks_of(std::index_sequence<R...>) {
  return {&Kernel<static_cast<int>(R) + 1>::run...};
}

}  // namespace my_ops::cpu_vec
