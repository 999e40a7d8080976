//! Measured conventions of burn 0.22.1's `BatchNorm` (burn-nn `modules/norm/batch.rs`), the
//! evidence behind the `batch_norm` module kind (`modules/batch_norm.rs`,
//! difftest/program/module_kinds.py) and its declared conventions
//! (difftest/divergences/running_stats.py). Expected values are computed here from the
//! formulas, not copied from a run.

#[cfg(test)]
mod tests {
    use burn::module::Module;
    use burn::nn::{BatchNorm, BatchNormConfig};
    use burn::tensor::{Device, Tensor, TensorData};

    const X1: [f32; 8] = [1.0, 2.0, 4.0, 8.0, 3.0, -1.0, 0.5, 2.5];
    const X2: [f32; 8] = [0.0, 1.0, -2.0, 3.0, 5.0, 1.5, 2.0, -0.5];
    const M: f64 = 0.3;

    fn input(data: [f32; 8], device: &Device) -> Tensor<2> {
        Tensor::<2>::from_data(TensorData::new(data.to_vec(), [4, 2]), device)
    }

    fn read(t: Tensor<1>) -> Vec<f64> {
        t.into_data()
            .iter::<f32>()
            .map(f64::from)
            .collect::<Vec<_>>()
    }

    /// Per channel of a [4, 2] batch: (mean, biased variance, unbiased variance).
    fn stats(x: &[f32; 8], c: usize) -> (f64, f64, f64) {
        let v: Vec<f64> = (0..4).map(|r| f64::from(x[r * 2 + c])).collect();
        let mean = v.iter().sum::<f64>() / 4.0;
        let ss = v.iter().map(|a| (a - mean) * (a - mean)).sum::<f64>();
        (mean, ss / 4.0, ss / 3.0)
    }

    /// Running (mean, var) after train forwards on `batches`: PyTorch's update
    /// `new = (1 - m) old + m batch`, with the biased or the unbiased batch variance.
    fn running(batches: &[[f32; 8]], biased: bool) -> [Vec<f64>; 2] {
        let (mut rm, mut rv) = (vec![0.0; 2], vec![1.0; 2]);
        for x in batches {
            for c in 0..2 {
                let (mean, b, u) = stats(x, c);
                rm[c] = (1.0 - M) * rm[c] + M * mean;
                rv[c] = (1.0 - M) * rv[c] + M * if biased { b } else { u };
            }
        }
        [rm, rv]
    }

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= 1e-5 * (1.0 + y.abs()))
    }

    fn synced(m: &BatchNorm) -> [Vec<f64>; 2] {
        [
            read(m.running_mean.value_sync()),
            read(m.running_var.value_sync()),
        ]
    }

    fn fresh(device: &Device) -> BatchNorm {
        BatchNormConfig::new(2).with_momentum(M).init(device)
    }

    /// Momentum as PyTorch's; running_var takes the biased batch variance (PyTorch: unbiased).
    #[test]
    fn running_stats_use_torch_momentum_and_the_biased_variance() {
        let ad = Device::flex().autodiff();
        let bn = fresh(&ad);
        let _ = bn.forward(input(X1, &ad).require_grad());
        let _ = bn.forward(input(X2, &ad));
        let got = synced(&bn);
        let biased = running(&[X1, X2], true);
        let unbiased = running(&[X1, X2], false);
        assert!(close(&got[0], &biased[0]), "{got:?} vs {biased:?}");
        assert!(close(&got[1], &biased[1]), "{got:?} vs {biased:?}");
        assert!(!close(&got[1], &unbiased[1]), "{got:?} vs {unbiased:?}");
    }

    /// `RunningState::value()` may lag one update behind; `value_sync()` does not.
    #[test]
    fn value_lags_one_update() {
        let ad = Device::flex().autodiff();
        let bn = fresh(&ad);
        let _ = bn.forward(input(X1, &ad));
        assert_eq!(read(bn.running_mean.value()), vec![0.0, 0.0]);
        let after = running(&[X1], true);
        assert!(close(&read(bn.running_mean.value_sync()), &after[0]));
    }

    /// The train path needs an autodiff input and the training flag: an input on the plain
    /// device or a frozen module takes the inference path (no update); a no_grad() module on
    /// autodiff still updates.
    #[test]
    fn which_forwards_update() {
        let plain = Device::flex();
        let ad = plain.clone().autodiff();
        let initial = [vec![0.0, 0.0], vec![1.0, 1.0]];
        let bn = fresh(&plain);
        let _ = bn.forward(input(X1, &plain));
        assert_eq!(synced(&bn), initial);
        let frozen = fresh(&ad).freeze();
        let _ = frozen.forward(input(X1, &ad));
        assert_eq!(synced(&frozen), initial);
        let no_grad = fresh(&ad).no_grad();
        let _ = no_grad.forward(input(X1, &ad));
        assert!(close(&synced(&no_grad)[0], &running(&[X1], true)[0]));
    }

    /// valid() and train() copy the running state (sync, then a new `RunningState`); a clone,
    /// and so no_grad() of a clone, shares it with the original.
    #[test]
    fn which_copies_share_the_running_state() {
        let ad = Device::flex().autodiff();
        let bn = fresh(&ad);
        let trained = bn.clone().valid().train();
        let _ = trained.forward(input(X1, &ad));
        assert_eq!(synced(&bn)[0], vec![0.0, 0.0]);
        let no_grad = bn.clone().no_grad();
        let _ = no_grad.forward(input(X1, &ad));
        assert!(close(&synced(&bn)[0], &running(&[X1], true)[0]));
    }

    /// After freeze(), unfreeze() brings the train path back; train() alone does not (it restores
    /// the configured flag, which freeze cleared; as for Dropout). train() after valid() does.
    #[test]
    fn unfreeze_restores_the_train_path() {
        let ad = Device::flex().autodiff();
        let one = running(&[X1], true);
        let updates = |m: BatchNorm| {
            let _ = m.forward(input(X1, &ad));
            close(&synced(&m)[0], &one[0])
        };
        assert!(updates(fresh(&ad).freeze().unfreeze()));
        assert!(!updates(fresh(&ad).freeze().train()));
        assert!(updates(fresh(&ad).valid().train()));
    }

    /// A train-mode forward's update stays pending (`RunningState::update`); an eval-mode
    /// forward through a handle sharing the state (a frozen clone) reads `value()`, which lags
    /// it, until a `value_sync()` read of that statistic.
    #[test]
    fn eval_forward_reads_the_value_before_the_last_update() {
        let ad = Device::flex().autodiff();
        let bn = fresh(&ad);
        let _ = bn.forward(input(X1, &ad));
        let frozen = bn.clone().freeze();
        let eval = |m: &BatchNorm| {
            m.forward(input(X2, &ad))
                .into_data()
                .iter::<f32>()
                .map(f64::from)
                .collect::<Vec<_>>()
        };
        // gamma 1, beta 0: with the initial statistics (0, 1), y = x / sqrt(1 + eps)
        let initial: Vec<f64> = X2
            .iter()
            .map(|&v| f64::from(v) / (1.0f64 + 1e-5).sqrt())
            .collect();
        assert!(close(&eval(&frozen), &initial));
        let _ = bn.running_mean.value_sync();
        let _ = bn.running_var.value_sync();
        assert!(!close(&eval(&frozen), &initial));
    }
}
