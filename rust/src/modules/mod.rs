//! Module kinds (`module`, `transform`, `apply`, `param` statements) on burn's `burn::nn`.
//!
//! Each kind is one file here, holding all that is particular to it: the statement's fields as
//! serde reads them, the checks that turn them into a validated spec, the shapes of its
//! parameters (PyTorch's layout) and of its forward's output (the element budget), building the
//! burn module, its forward, and how burn's parameters map to PyTorch's names and layouts. The
//! kind implements [`ModuleKind`]; the [`module_kinds!`] table at the end of this file is the
//! one list of kinds. From it come the enums that hold one variant per kind (the document's
//! `module` tag [`ModuleDoc`], the validated [`ModuleSpec`], burn's [`NnModule`]), their
//! dispatch, and [`KINDS`], the names the `grad-scale` fault accepts ([`crate::fault`]).
//! Adding a kind is one file and one line in the table.
//!
//! Modules are built on the autodiff device with their parameters as `Param::from_tensor`
//! (require grad). Where burn's layout differs from PyTorch's (Linear's weight is
//! `[d_input, d_output]`, PyTorch's `[d_output, d_input]`), the kind transposes the data when
//! the module is built and says so ([`ModuleKind::transposed`]), and the run reports the tensor
//! in PyTorch's layout (a declared layout difference).

// One file per kind (Rust needs a `mod` line for each); the `module_kinds!` table at the end
// of this file is the list of kinds that everything else derives from.
mod batch_norm;
mod common;
mod conv2d;
mod dropout;
mod embedding;
mod group_norm;
mod layer_norm;
mod linear;
mod prelu;
mod rms_norm;

use std::fmt;

use burn::module::Module;
use burn::optim::ModuleOptimizer;
use burn::tensor::{Device, FloatDType, Gradients};
use serde::Deserialize;
use serde::de::DeserializeOwned;

pub use batch_norm::BatchNormSpec;
pub use common::transpose_data;
pub use conv2d::Conv2dSpec;
pub use dropout::DropoutSpec;
pub use embedding::EmbeddingSpec;
pub use group_norm::GroupNormSpec;
pub use layer_norm::LayerNormSpec;
pub use linear::LinearSpec;
pub use prelu::PReluSpec;
pub use rms_norm::RmsNormSpec;

use crate::document::{ParamName, Transform};
use crate::dtype::ProgramDType;
use crate::ops;
use crate::program;
use crate::value::DynTensor;

/// A module kind: its validated spec (the implementing type), its statement as serde reads it,
/// and its burn module.
pub trait ModuleKind: Clone + fmt::Debug + Sized {
    /// The statement's fields as serde reads them (unknown fields rejected). Every kind's has
    /// an `id: String` field: the statement's id.
    type Doc: DeserializeOwned + fmt::Debug;
    /// burn's module.
    type Burn: Module;

    /// Why a `step` may not act on a module of this kind (the resolver's error), or `None`.
    const NOT_STEPPED: Option<&'static str> = None;

    /// Validates a statement into a spec (burn's config `init` asserts some of the same
    /// rules: a statement that would make it panic is rejected here). Tensor data must be
    /// values of the program's `dtype`.
    fn parse(doc: Self::Doc, dtype: ProgramDType) -> Result<Self, String>;

    /// The shape of a parameter or buffer in PyTorch's layout; `None` when the module has none
    /// of that name.
    fn param_shape(&self, param: ParamName) -> Option<Vec<usize>>;

    /// The forward's output shape for an input shape, as burn computes it; `None` when the
    /// input does not fit (burn would panic).
    fn apply_shape(&self, x: &[usize]) -> Option<Vec<usize>>;

    /// Checks the statement an `apply` feeds to the forward; any value by default.
    fn check_input(&self, _input: &program::Kind) -> Result<(), String> {
        Ok(())
    }

    /// Builds the module on `device` (the autodiff device) with parameters of `dtype`.
    fn build(&self, device: &Device, dtype: FloatDType) -> Self::Burn;

    /// The module's forward on `x` (an input that [`ModuleKind::apply_shape`] may reject
    /// makes burn panic, which the caller catches).
    fn forward(m: &Self::Burn, x: DynTensor) -> DynTensor;

    /// A parameter tensor as burn stores it (`.val()`), or a running statistic
    /// (`value_sync()`: `value()` may lag one update behind); `None` when the kind has no such
    /// parameter.
    fn param(m: &Self::Burn, param: ParamName) -> Option<DynTensor>;

    /// Whether burn stores `param` transposed from PyTorch's layout.
    fn transposed(_param: ParamName) -> bool {
        false
    }
}

/// The module after a burn `Module` method (the original is left untouched).
fn transformed<M: Module>(m: &M, transform: Transform) -> M {
    match transform {
        Transform::Valid => m.valid(),
        Transform::Train => m.clone().train(),
        Transform::NoGrad => m.clone().no_grad(),
        Transform::Freeze => m.clone().freeze(),
        Transform::Unfreeze => m.clone().unfreeze(),
    }
}

/// The registry: `Variant = "name": SpecType;` per kind, in the order serde lists the kinds
/// in its errors. It generates the enums with one variant per kind and their dispatch to
/// [`ModuleKind`].
macro_rules! module_kinds {
    ($( $variant:ident = $name:literal : $kind:ident ;)*) => {
        /// The names of the module kinds, in the registry's order.
        pub const KINDS: &[&str] = &[$($name),*];

        /// A `module` statement as serde reads it, tagged by its `"module"` field.
        #[derive(Debug, Deserialize)]
        #[serde(tag = "module")]
        pub enum ModuleDoc {
            $( #[serde(rename = $name)] $variant(<$kind as ModuleKind>::Doc), )*
        }

        impl ModuleDoc {
            pub fn id(&self) -> &str {
                match self {
                    $( ModuleDoc::$variant(s) => &s.id, )*
                }
            }
        }

        /// How a module is built (`kind: "module"`): a validated spec of its kind.
        #[derive(Clone, Debug)]
        pub enum ModuleSpec {
            $( $variant($kind), )*
        }

        impl ModuleSpec {
            /// Validates a `module` statement ([`ModuleKind::parse`]).
            pub fn parse(doc: ModuleDoc, dtype: ProgramDType) -> Result<ModuleSpec, String> {
                match doc {
                    $( ModuleDoc::$variant(s) => $kind::parse(s, dtype).map(ModuleSpec::$variant), )*
                }
            }

            /// The kind's name in the format.
            pub fn name(&self) -> &'static str {
                match self {
                    $( ModuleSpec::$variant(_) => $name, )*
                }
            }

            /// See [`ModuleKind::param_shape`].
            pub fn param_shape(&self, param: ParamName) -> Option<Vec<usize>> {
                match self {
                    $( ModuleSpec::$variant(s) => s.param_shape(param), )*
                }
            }

            /// See [`ModuleKind::apply_shape`].
            pub fn apply_shape(&self, x: &[usize]) -> Option<Vec<usize>> {
                match self {
                    $( ModuleSpec::$variant(s) => s.apply_shape(x), )*
                }
            }

            /// See [`ModuleKind::check_input`].
            pub fn check_input(&self, input: &program::Kind) -> Result<(), String> {
                match self {
                    $( ModuleSpec::$variant(s) => s.check_input(input), )*
                }
            }

            /// See [`ModuleKind::NOT_STEPPED`].
            pub fn not_stepped(&self) -> Option<&'static str> {
                match self {
                    $( ModuleSpec::$variant(_) => <$kind as ModuleKind>::NOT_STEPPED, )*
                }
            }
        }

        /// A module handle: burn's module of its kind.
        #[derive(Clone, Debug)]
        pub enum NnModule {
            $( $variant(<$kind as ModuleKind>::Burn), )*
        }

        impl NnModule {
            /// Builds the module on `device` (the autodiff device).
            pub fn build(spec: &ModuleSpec, device: &Device, dtype: FloatDType) -> Self {
                match spec {
                    $( ModuleSpec::$variant(s) => NnModule::$variant(s.build(device, dtype)), )*
                }
            }

            /// The module after a burn `Module` method (the original is left untouched).
            pub fn transform(&self, transform: Transform) -> Self {
                match self {
                    $( NnModule::$variant(m) => NnModule::$variant(transformed(m, transform)), )*
                }
            }

            /// The module's forward on `x`.
            pub fn forward(&self, x: DynTensor) -> DynTensor {
                match self {
                    $( NnModule::$variant(m) => $kind::forward(m, x), )*
                }
            }

            /// A parameter tensor as burn stores it ([`ModuleKind::param`]); see
            /// [`NnModule::transposed`] for its layout.
            pub fn param(&self, param: ParamName) -> DynTensor {
                let t = match self {
                    $( NnModule::$variant(m) => $kind::param(m, param), )*
                };
                t.unwrap_or_else(|| panic!("validated: the module has the parameter {param:?}"))
            }

            /// Whether `param` is stored transposed from PyTorch's layout.
            pub fn transposed(&self, param: ParamName) -> bool {
                match self {
                    $( NnModule::$variant(_) => $kind::transposed(param), )*
                }
            }

            /// One step of `optim` on the module with its gradients in `grads` (removed from
            /// it), at learning rate `lr`: the stepped module.
            pub fn step(&self, optim: &mut ModuleOptimizer, grads: &mut Gradients, lr: f64) -> Self {
                match self {
                    $( NnModule::$variant(m) => {
                        if <$kind as ModuleKind>::NOT_STEPPED.is_some() {
                            unreachable!("validated: a {} module is not stepped", $name);
                        }
                        NnModule::$variant(crate::optim::step(optim, m, grads, lr))
                    } )*
                }
            }
        }
    };
}

module_kinds! {
    Linear = "linear": LinearSpec;
    Dropout = "dropout": DropoutSpec;
    BatchNorm = "batch_norm": BatchNormSpec;
    LayerNorm = "layer_norm": LayerNormSpec;
    RmsNorm = "rms_norm": RmsNormSpec;
    GroupNorm = "group_norm": GroupNormSpec;
    Conv2d = "conv2d": Conv2dSpec;
    Embedding = "embedding": EmbeddingSpec;
    PRelu = "prelu": PReluSpec;
}

impl ModuleSpec {
    /// (name, elements) of the tensors the module holds.
    pub fn tensors(&self) -> Vec<(String, u64)> {
        [
            ParamName::Weight,
            ParamName::Bias,
            ParamName::RunningMean,
            ParamName::RunningVar,
        ]
        .into_iter()
        .filter_map(|p| {
            self.param_shape(p)
                .map(|s| (format!("{p:?}").to_lowercase(), ops::numel(&s)))
        })
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind of the registry is a value of the document's `module` tag, under its name.
    #[test]
    fn every_kind_is_a_module_tag() {
        for name in KINDS {
            let doc = serde_json::json!({"module": name, "id": "m"});
            let e = ModuleDoc::deserialize(&doc).unwrap_err().to_string();
            assert!(e.starts_with("missing field"), "{name}: {e}");
        }
        let e = ModuleDoc::deserialize(&serde_json::json!({"module": "conv"})).unwrap_err();
        assert!(
            e.to_string().starts_with(&format!(
                "unknown variant `conv`, expected one of `{}`",
                KINDS.join("`, `")
            )),
            "{e}"
        );
    }
}
