//! Properties every sampler chain holds, whatever the logits and the
//! parameters: a token is always chosen from the vocabulary and never
//! panics, every filter keeps at least one candidate, the probabilities
//! after the draw sum to 1, and the same seed gives the same tokens.

use ggraph_model::sampling::{
    Candidates, MinP, Sampler, SamplerType, SamplingParams, TokenSampler, TopK, TopNSigma, TopP,
    Typical, Xtc,
};
use proptest::prelude::*;

/// Logits with the values that trouble samplers: ties, minus infinity,
/// a huge spread.
fn logits() -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(
        prop_oneof![
            6 => -30.0f32..30.0,
            1 => Just(f32::NEG_INFINITY),
            1 => Just(0.0f32),
            1 => Just(5.0f32),
        ],
        1..300,
    )
    .prop_filter("at least one finite logit", |v| {
        v.iter().any(|x| x.is_finite())
    })
}

fn params() -> impl Strategy<Value = SamplingParams> {
    (
        (
            0u32..1000,
            -1.0f32..2.5,
            0i32..60,
            0.0f32..=1.0,
            0.0f32..=1.0,
            0.0f32..=1.0,
        ),
        (
            0.0f32..=1.0,
            0.0f32..=1.0,
            0.0f32..1.5,
            0usize..5,
            0u8..=2,
            -1.0f32..3.0,
        ),
        (
            0.5f32..2.0,
            0.0f32..1.0,
            0.0f32..1.0,
            prop::sample::subsequence(SamplerType::ALL.to_vec(), 0..9),
        ),
    )
        .prop_map(|(a, b, c)| SamplingParams {
            seed: a.0,
            temp: a.1,
            top_k: a.2,
            top_p: a.3,
            min_p: a.4,
            typ_p: a.5,
            xtc_probability: b.0,
            xtc_threshold: b.1,
            dynatemp_range: b.2,
            min_keep: b.3,
            mirostat: b.4,
            top_n_sigma: b.5,
            penalty_repeat: c.0,
            penalty_freq: c.1,
            penalty_present: c.2,
            samplers: c.3.into_iter().map(|e| e.0).collect(),
            ..SamplingParams::default()
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn a_chain_always_chooses_a_token_and_repeats_with_its_seed(
        l in logits(), p in params(), history in prop::collection::vec(0i32..300, 0..20)
    ) {
        let n = l.len();
        let run = || {
            let mut s = TokenSampler::new(p.chain(n, None).unwrap());
            for &t in &history {
                s.accept(t % n as i32, false).unwrap();
            }
            let mut out = Vec::new();
            for _ in 0..8 {
                let id = s.sample(&l).unwrap();
                prop_assert!((0..n as i32).contains(&id));
                s.accept(id, true).unwrap();
                out.push(id);
            }
            Ok(out)
        };
        prop_assert_eq!(run()?, run()?);
    }

    #[test]
    fn the_draw_leaves_probabilities_that_sum_to_one(l in logits(), seed in 0u32..100) {
        let p = SamplingParams { seed, top_k: 0, top_p: 1.0, min_p: 0.0, temp: 1.0,
                                 ..SamplingParams::default() };
        let mut s = TokenSampler::new(p.chain(l.len(), None).unwrap());
        let id = s.sample(&l).unwrap();
        let probs = s.top_probs(usize::MAX);
        let sum: f64 = probs.iter().map(|&(_, p)| p as f64).sum();
        prop_assert!((sum - 1.0).abs() < 1e-4, "sum {}", sum);
        // the token drawn had a chance
        let chosen = probs.iter().find(|(t, _)| *t == id).map(|&(_, p)| p);
        prop_assert!(chosen.is_some_and(|p| p > 0.0), "{:?}", chosen);
    }

    #[test]
    fn every_filter_keeps_a_candidate(
        l in logits(), k in 0i32..10, q in 0.0f32..=1.0, keep in 0usize..4, seed in 0u32..50
    ) {
        let filters: Vec<Box<dyn Sampler>> = vec![
            Box::new(TopK::new(k)),
            Box::new(TopP::new(q, keep)),
            Box::new(MinP::new(q, keep)),
            Box::new(Typical::new(q, keep)),
            Box::new(Xtc::new(1.0, q * 0.5, keep, seed)),
            Box::new(TopNSigma::new(q * 3.0)),
        ];
        for mut f in filters {
            let mut c = Candidates::from_logits(&l);
            f.apply(&mut c);
            prop_assert!(!c.is_empty(), "{} removed every candidate", f.name());
        }
    }
}

#[test]
fn out_of_range_values_name_their_flag() {
    let base = SamplingParams::default();
    for (p, flag) in [
        (
            SamplingParams {
                top_k: -1,
                ..base.clone()
            },
            "--top-k",
        ),
        (
            SamplingParams {
                top_p: 1.5,
                ..base.clone()
            },
            "--top-p",
        ),
        (
            SamplingParams {
                min_p: -0.1,
                ..base.clone()
            },
            "--min-p",
        ),
        (
            SamplingParams {
                temp: f32::NAN,
                ..base.clone()
            },
            "--temp",
        ),
        (
            SamplingParams {
                temp: f32::INFINITY,
                ..base.clone()
            },
            "--temp",
        ),
        (
            SamplingParams {
                penalty_repeat: 0.0,
                ..base.clone()
            },
            "--repeat-penalty",
        ),
        (
            SamplingParams {
                mirostat: 3,
                ..base.clone()
            },
            "--mirostat",
        ),
        (
            SamplingParams {
                logit_bias: vec![(100, 1.0)],
                ..base.clone()
            },
            "--logit-bias",
        ),
        (
            SamplingParams {
                logit_bias: vec![(-1, 1.0)],
                ..base.clone()
            },
            "--logit-bias",
        ),
        (
            SamplingParams {
                logit_bias: vec![(3, f32::NAN)],
                ..base.clone()
            },
            "--logit-bias",
        ),
    ] {
        let e = p.chain(100, None).unwrap_err().to_string();
        assert!(e.contains(flag), "{flag}: {e}");
    }
    let dry = SamplingParams {
        dry_multiplier: 0.8,
        ..base
    };
    let e = dry.chain(100, None).unwrap_err().to_string();
    assert!(e.contains("vocabulary"), "{e}");
}

#[test]
fn a_ban_on_every_token_falls_back_without_panicking() {
    let p = SamplingParams {
        logit_bias: (0..5).map(|t| (t, f32::NEG_INFINITY)).collect(),
        seed: 1,
        ..SamplingParams::default()
    };
    let mut s = TokenSampler::new(p.chain(5, None).unwrap());
    let id = s.sample(&[1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
    assert!((0..5).contains(&id));
    // and an empty vocabulary is an error, not a panic
    assert!(s.sample(&[]).is_err());
}

#[test]
fn temperature_zero_takes_the_most_likely_token() {
    // of two equal logits, the one top-k's partial sort puts first, as
    // llama.cpp takes it: the same for every seed
    let l = [0.5f32, 3.0, 3.0, -1.0, 2.9];
    let chosen: Vec<i32> = (0..20)
        .map(|seed| {
            let p = SamplingParams {
                seed,
                ..SamplingParams::greedy()
            };
            TokenSampler::new(p.chain(l.len(), None).unwrap())
                .sample(&l)
                .unwrap()
        })
        .collect();
    assert!(
        chosen.iter().all(|&t| t == chosen[0] && (t == 1 || t == 2)),
        "{chosen:?}"
    );
}
