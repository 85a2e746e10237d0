#pragma once

#include <ATen/core/Tensor.h>
#include <torch/custom_class.h>

#include <string>
#include <tuple>

namespace my_ops {

// An RMSNorm layer whose forward runs the rms_norm op (forward_residual: fused_add_rms_norm),
// usable from TorchScript and torch.export as torch.classes.my_ops.RMSNorm.
class RMSNorm : public torch::CustomClassHolder {
 public:
  using State = std::tuple<at::Tensor, double>;
  using Flattened =
      std::tuple<std::tuple<std::string, at::Tensor>, std::tuple<std::string, double>>;

  RMSNorm(at::Tensor weight, double eps);

  at::Tensor forward(const at::Tensor& x) const;
  std::tuple<at::Tensor, at::Tensor> forward_residual(const at::Tensor& x,
                                                      const at::Tensor& residual) const;

  const at::Tensor& weight() const { return weight_; }
  double eps() const { return eps_; }

  State get_state() const { return {weight_, eps_}; }
  static c10::intrusive_ptr<RMSNorm> from_state(State state);
  // (name, value) pairs, the layout torch.export expects from a torchbind object's flattening.
  Flattened flatten() const;

 private:
  at::Tensor weight_;
  double eps_;
};

}  // namespace my_ops
