//! Measured behaviour of burn 0.22.1's `Tensor::cast` between float dtypes on Flex with
//! autodiff (the `cast` op; difftest/divergences/rules.py, difftest/ops/dtype_support.py):
//! the backward casts the gradient back to the input's dtype, a cast to the own dtype returns
//! the tensor itself, and inputs of mixed dtypes panic.

#[cfg(test)]
mod tests {
    use burn::tensor::{DType, Device, FloatDType, Tensor, TensorCreationOptions, TensorData, f16};
    use std::panic::{AssertUnwindSafe, catch_unwind};

    fn leaf(device: &Device) -> Tensor<1> {
        let data = TensorData::new(vec![0.1f32, 3.0, -1.7], [3]);
        Tensor::<1>::from_data(data, device).require_grad()
    }

    #[test]
    fn gradient_is_cast_back_to_the_input_dtype() {
        let device = Device::flex().autodiff();
        let x = leaf(&device);
        let h = x.clone().cast(FloatDType::F16);
        assert_eq!(h.dtype(), DType::F16);
        let grads = h.clone().mul(h).sum().backward();
        let g = x.grad(&grads).expect("x has a gradient");
        assert_eq!(g.dtype(), DType::F32);
        // d(h*h)/dx = 2 h, h = x rounded to f16 (0.1 -> 0.0999755859375); 2 h is exact in f16
        let want: Vec<f64> = [0.1f32, 3.0, -1.7]
            .iter()
            .map(|&x| 2.0 * f16::from_f32(x).to_f64())
            .collect();
        assert_eq!(g.try_to_vec_as::<f64>().unwrap(), want);
    }

    #[test]
    fn cast_to_the_own_dtype_returns_the_tensor() {
        let device = Device::flex().autodiff();
        let x = leaf(&device);
        let s = x.clone().cast(FloatDType::F32);
        assert!(
            s.is_require_grad(),
            "a cast to f32 of an f32 leaf is the leaf itself"
        );
        let grads = s.clone().exp().sum().backward();
        assert!(s.grad(&grads).is_some() && x.grad(&grads).is_some());
        let y = x.clone().cast(FloatDType::F64);
        assert!(!y.is_require_grad(), "a real cast is a recorded node");
    }

    #[test]
    fn mixed_dtypes_panic() {
        let device = Device::flex().autodiff();
        let x = leaf(&device);
        let options = TensorCreationOptions::new(device.clone()).with_dtype(DType::F16);
        let h = Tensor::<1>::from_data(TensorData::new(vec![1.0f64, 2.0, 3.0], [3]), options);
        let err = catch_unwind(AssertUnwindSafe(|| x.add(h))).expect_err("f32 + f16 panics");
        let msg = err
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        assert!(msg.contains("dtype mismatch"), "{msg}");
    }
}
