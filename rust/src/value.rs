//! A float tensor of dynamic rank (1 to 4) over burn's statically ranked `Tensor<D>`.

use burn::tensor::{
    Bool, Device, FloatDType, Int, Shape, Tensor, TensorCreationOptions, TensorData,
};

/// Highest rank a program may use.
pub const MAX_RANK: usize = 4;

/// A float tensor of rank 1 to 4.
#[derive(Clone, Debug)]
pub enum DynTensor {
    R1(Tensor<1>),
    R2(Tensor<2>),
    R3(Tensor<3>),
    R4(Tensor<4>),
}

/// Applies a rank-generic expression to the tensor inside a [`DynTensor`] and returns its
/// result unchanged: `apply!(x, t => t.is_tracked())`.
#[macro_export]
macro_rules! apply {
    ($x:expr, $t:ident => $body:expr) => {
        match $x {
            $crate::value::DynTensor::R1($t) => $body,
            $crate::value::DynTensor::R2($t) => $body,
            $crate::value::DynTensor::R3($t) => $body,
            $crate::value::DynTensor::R4($t) => $body,
        }
    };
}

/// Applies a rank-preserving expression: `map!(x, t => t.exp())`.
#[macro_export]
macro_rules! map {
    ($x:expr, $t:ident => $body:expr) => {
        match $x {
            $crate::value::DynTensor::R1($t) => $crate::value::DynTensor::R1($body),
            $crate::value::DynTensor::R2($t) => $crate::value::DynTensor::R2($body),
            $crate::value::DynTensor::R3($t) => $crate::value::DynTensor::R3($body),
            $crate::value::DynTensor::R4($t) => $crate::value::DynTensor::R4($body),
        }
    };
}

/// Builds a [`DynTensor`] of the given rank from an expression whose output rank is inferred
/// from the variant: `of_rank!(rank, t.reshape(shape))`. Panics for ranks outside 1..=4.
#[macro_export]
macro_rules! of_rank {
    ($rank:expr, $what:expr, $body:expr) => {
        match $rank {
            1 => $crate::value::DynTensor::R1($body),
            2 => $crate::value::DynTensor::R2($body),
            3 => $crate::value::DynTensor::R3($body),
            4 => $crate::value::DynTensor::R4($body),
            r => panic!(
                "{}: rank {r} is not supported (burn tensors here have rank 1 to {})",
                $what,
                $crate::value::MAX_RANK
            ),
        }
    };
}

/// The autodiff state of a tensor, as burn reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Flags {
    pub is_autodiff: bool,
    pub is_tracked: bool,
    pub is_require_grad: bool,
}

impl DynTensor {
    /// Creates a tensor from row-major f32 data on `device`.
    #[cfg(test)]
    pub fn from_f32(data: Vec<f32>, shape: &[usize], device: &Device) -> Self {
        let data = TensorData::new(data, shape.to_vec());
        of_rank!(shape.len(), "tensor", Tensor::from_data(data, device))
    }

    /// Creates a tensor of `dtype` from row-major f64 data on `device` (the data are values of
    /// `dtype`: the program's dtype checked them).
    pub fn from_f64(data: Vec<f64>, shape: &[usize], device: &Device, dtype: FloatDType) -> Self {
        let data = TensorData::new(data, shape.to_vec());
        let options = TensorCreationOptions::new(device.clone()).with_dtype(dtype.into());
        of_rank!(shape.len(), "tensor", Tensor::from_data(data, options))
    }

    /// The tensor's dtype as PyTorch names it (`float32`, `float64`, `float16`, `bfloat16`).
    pub fn dtype_name(&self) -> &'static str {
        crate::dtype::dtype_name(apply!(self, t => t.dtype()))
    }

    /// Reads the shape and the data as f64 (row-major; exact for every float dtype).
    pub fn read_f64(&self) -> (Vec<usize>, Vec<f64>) {
        let data = apply!(self, t => t.try_to_vec_as::<f64>())
            .unwrap_or_else(|e| panic!("reading tensor data failed: {e:?}"));
        (self.dims(), data)
    }

    pub fn rank(&self) -> usize {
        apply!(self, t => t.rank())
    }

    pub fn dims(&self) -> Vec<usize> {
        apply!(self, t => t.dims().to_vec())
    }

    /// Reads the shape and the data as f32 (row-major).
    #[cfg(test)]
    pub fn read(&self) -> (Vec<usize>, Vec<f32>) {
        let data = apply!(self, t => t.try_to_vec_as::<f32>())
            .unwrap_or_else(|e| panic!("reading tensor data failed: {e:?}"));
        (self.dims(), data)
    }

    pub fn flags(&self) -> Flags {
        apply!(self, t => Flags {
            is_autodiff: t.is_autodiff(),
            is_tracked: t.is_tracked(),
            is_require_grad: t.is_require_grad(),
        })
    }

    /// `burn::Tensor::reshape` to any rank 1..=4.
    pub fn reshape(self, shape: &[usize]) -> Self {
        let target = Shape::from(shape.to_vec());
        of_rank!(shape.len(), "reshape", apply!(self, t => t.reshape(target)))
    }

    /// Adds leading size-1 dims up to `rank` (`unsqueeze` in burn); a no-op at the same rank.
    pub fn promote(self, rank: usize) -> Self {
        if rank == self.rank() {
            return self;
        }
        assert!(
            rank > self.rank(),
            "cannot promote rank {} to {rank}",
            self.rank()
        );
        of_rank!(rank, "rank promotion", apply!(self, t => t.unsqueeze()))
    }

    pub fn detach(self) -> Self {
        map!(self, t => t.detach())
    }

    pub fn without_autodiff(self) -> Self {
        map!(self, t => t.without_autodiff())
    }

    pub fn autodiff(self) -> Self {
        map!(self, t => t.autodiff())
    }

    pub fn require_grad(self) -> Self {
        map!(self, t => t.require_grad())
    }
}

/// An Int tensor of the given rank and shape on `device` (gather indices).
pub fn int_tensor<const D: usize>(
    data: &[i64],
    shape: &[usize],
    device: &Device,
) -> Tensor<D, Int> {
    assert_eq!(
        shape.len(),
        D,
        "index tensor has rank {} but the input has rank {D}",
        shape.len()
    );
    Tensor::from_data(TensorData::new(data.to_vec(), shape.to_vec()), device)
}

/// A Bool tensor of the given rank and shape on `device` (masks).
pub fn bool_tensor<const D: usize>(
    data: &[bool],
    shape: &[usize],
    device: &Device,
) -> Tensor<D, Bool> {
    assert_eq!(
        shape.len(),
        D,
        "mask has rank {} but the input has rank {D}",
        shape.len()
    );
    Tensor::from_data(TensorData::new(data.to_vec(), shape.to_vec()), device)
}
