//! Optimizers (`optimizer` and `step` statements) on burn's `burn::optim`.
//!
//! An `optimizer` statement builds burn's SGD (`SgdConfig` with `MomentumConfig` when the
//! momentum is > 0 and `WeightDecayConfig` when the weight decay is > 0); it is stateful: its
//! momentum buffers are keyed by parameter id, which every module handle derived from one
//! `module` statement shares. A `step` takes the module's parameter gradients out of a
//! gradients handle (`GradientsParams::from_module` removes them from it) and returns the
//! stepped module (`Optimizer::step`).

use burn::module::Module;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{GradientsParams, ModuleOptimizer, SgdConfig};
use burn::tensor::Gradients;

use crate::program::SgdSpec;

/// burn's SGD with the statement's hyper-parameters.
pub fn sgd(spec: &SgdSpec) -> ModuleOptimizer {
    let momentum = (spec.momentum > 0.0).then_some(MomentumConfig {
        momentum: spec.momentum,
        dampening: spec.dampening,
        nesterov: spec.nesterov,
    });
    let weight_decay = (spec.weight_decay > 0.0).then_some(WeightDecayConfig {
        penalty: spec.weight_decay as f32,
    });
    SgdConfig::new()
        .with_momentum(momentum)
        .with_weight_decay(weight_decay)
        .init()
}

/// One step of `optim` on `module` with the module's gradients in `grads` (removed from it),
/// at learning rate `lr`: the stepped module ([`crate::modules::NnModule::step`] dispatches to
/// it by kind).
pub fn step<M: Module>(
    optim: &mut ModuleOptimizer,
    module: &M,
    grads: &mut Gradients,
    lr: f64,
) -> M {
    let gp = GradientsParams::from_module(grads, module);
    optim.step(lr, module.clone(), gp)
}
