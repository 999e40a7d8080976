//! Optimizers (`optimizer` and `step` statements) on burn's `burn::optim`.
//!
//! An `optimizer` statement builds burn's SGD (`SgdConfig` with `MomentumConfig` when the
//! momentum is > 0 and `WeightDecayConfig` when the weight decay is > 0); it is stateful: its
//! momentum buffers are keyed by parameter id, which every module handle derived from one
//! `module` statement shares. A `step` takes the module's parameter gradients out of a
//! gradients handle (`GradientsParams::from_module` removes them from it) and returns the
//! stepped module (`Optimizer::step`).

use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{GradientsParams, ModuleOptimizer, SgdConfig};
use burn::tensor::Gradients;

use crate::nn::NnModule;
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
/// at learning rate `lr`: the stepped module.
pub fn step(
    optim: &mut ModuleOptimizer,
    module: &NnModule,
    grads: &mut Gradients,
    lr: f64,
) -> NnModule {
    match module {
        NnModule::Linear(m) => {
            let gp = GradientsParams::from_module(grads, m);
            NnModule::Linear(optim.step(lr, m.clone(), gp))
        }
        NnModule::Dropout(m) => {
            let gp = GradientsParams::from_module(grads, m);
            NnModule::Dropout(optim.step(lr, m.clone(), gp))
        }
        NnModule::LayerNorm(m) => {
            let gp = GradientsParams::from_module(grads, m);
            NnModule::LayerNorm(optim.step(lr, m.clone(), gp))
        }
        NnModule::RmsNorm(m) => {
            let gp = GradientsParams::from_module(grads, m);
            NnModule::RmsNorm(optim.step(lr, m.clone(), gp))
        }
        NnModule::GroupNorm(m) => {
            let gp = GradientsParams::from_module(grads, m);
            NnModule::GroupNorm(optim.step(lr, m.clone(), gp))
        }
        NnModule::Conv2d(m) => {
            let gp = GradientsParams::from_module(grads, m);
            NnModule::Conv2d(optim.step(lr, m.clone(), gp))
        }
        NnModule::Embedding(m) => {
            let gp = GradientsParams::from_module(grads, m);
            NnModule::Embedding(optim.step(lr, m.clone(), gp))
        }
        NnModule::BatchNorm(_) => unreachable!("validated: a batch_norm module is not stepped"),
    }
}
