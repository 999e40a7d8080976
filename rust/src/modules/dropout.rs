//! `dropout` with probability `p` in [0, 1]: no parameters, its forward keeps the input's
//! shape.

use burn::nn::{Dropout, DropoutConfig};
use burn::tensor::{Device, FloatDType};
use serde::Deserialize;

use super::ModuleKind;
use crate::document::ParamName;
use crate::dtype::ProgramDType;
use crate::map;
use crate::value::DynTensor;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DropoutDoc {
    pub id: String,
    pub p: f64,
}

#[derive(Clone, Debug)]
pub struct DropoutSpec {
    pub p: f64,
}

impl ModuleKind for DropoutSpec {
    type Doc = DropoutDoc;
    type Burn = Dropout;

    fn parse(s: DropoutDoc, _dtype: ProgramDType) -> Result<Self, String> {
        if !(0.0..=1.0).contains(&s.p) {
            return Err(format!("\"p\" must be in [0, 1], got {}", s.p));
        }
        Ok(DropoutSpec { p: s.p })
    }

    fn param_shape(&self, _param: ParamName) -> Option<Vec<usize>> {
        None
    }

    fn apply_shape(&self, x: &[usize]) -> Option<Vec<usize>> {
        Some(x.to_vec())
    }

    fn build(&self, _device: &Device, _dtype: FloatDType) -> Dropout {
        DropoutConfig::new(self.p).init()
    }

    fn forward(m: &Dropout, x: DynTensor) -> DynTensor {
        map!(x, t => m.forward(t))
    }

    fn param(_m: &Dropout, _param: ParamName) -> Option<DynTensor> {
        None
    }
}
