#pragma once

#include <cstdint>

namespace my_ops {

// Output channels per panel of linear_packed's weight (packed_linear.h): two AVX-512 vectors of
// float32, four AVX2 ones, eight NEON ones, one warp's lanes.
inline constexpr int64_t kPanelChannels = 32;

}  // namespace my_ops
