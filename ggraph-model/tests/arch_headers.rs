//! Every architecture's header as llama.cpp reads it, and malformed ones
//! refused with an error that names what is wrong: a missing key, head
//! counts that do not divide, a tensor of the wrong shape, a missing or a
//! foreign tensor. The headers are those of the llama.cpp fixtures
//! (`fixtures/arch/`, see its README).

use std::path::PathBuf;

use ggraph_model::arch::{ARCHITECTURES, ModelConfig, read_config};
use ggraph_model::desc::ModelDesc;
use ggraph_model::gguf::{GgufHeader, TensorInfo, Value, read_header};

fn header(arch: &str) -> GgufHeader {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/arch")
        .join(format!("{arch}.gguf"));
    read_header(&path, None).unwrap()
}

fn config(arch: &str) -> ModelConfig {
    read_config(&header(arch)).unwrap()
}

fn rebuilt(
    h: &GgufHeader,
    kv: impl Fn(&str, &Value) -> Option<Value>,
    tensors: impl Fn(&TensorInfo) -> Option<TensorInfo>,
) -> GgufHeader {
    let kv = h
        .kv()
        .iter()
        .filter_map(|(k, v)| kv(k, v).map(|v| (k.clone(), v)))
        .collect();
    let tensors = h.tensors().iter().filter_map(tensors).collect();
    GgufHeader::new(h.version(), kv, tensors).unwrap()
}

fn refused(h: &GgufHeader) -> String {
    match ModelDesc::from_header(h, None) {
        Ok(_) => panic!("a malformed header was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn every_fixture_reads_as_its_architecture() {
    for a in ARCHITECTURES {
        let h = header(a.name);
        let c = read_config(&h).unwrap();
        assert_eq!(c.arch, a);
        let desc = ModelDesc::from_header(&h, None).unwrap();
        let stored = desc.tensors.iter().filter(|t| t.copy_of.is_none());
        assert_eq!(stored.count(), h.tensors().len());
        // an embedding model has no output matrix
        if a.embeddings_only {
            assert!(desc.tensor("output.weight").is_none(), "{}", a.name);
            continue;
        }
        // tied embeddings: the output matrix is a copy of the embeddings
        if h.tensor("output.weight").is_none() {
            let out = desc.tensor("output.weight").unwrap();
            assert_eq!(
                out.copy_of.as_deref(),
                Some("token_embd.weight"),
                "{}",
                a.name
            );
        }
    }
}

#[test]
fn architecture_keys_are_read_as_llama_cpp_reads_them() {
    let c = config("llama");
    assert_eq!((c.head_dim, c.n_rot, c.rope_freq_base), (16, 16, 500000.0));
    assert!(!c.has_swa());

    assert_eq!(config("qwen3").head_dim, 32);
    let c = config("qwen3moe");
    assert_eq!((c.n_expert, c.n_expert_used, c.n_ff_expert), (8, 2, 32));

    // gemma2: pattern 2 (layers 0 and 2 slide), the window, both caps,
    // the sliding layers' rope base equal to the global one
    let c = config("gemma2");
    assert_eq!(c.swa_layers, [true, false, true, false]);
    assert_eq!(c.n_swa, 6);
    assert_eq!((c.attn_softcap, c.final_softcap), (2.0, 6.0));
    assert_eq!(c.rope_freq_base_swa, c.rope_freq_base);
    assert_eq!(c.attention_scale, 0.25);
    assert_eq!(c.rope(0), c.rope(1));

    // gemma3: five sliding layers to one global, its own rope base
    let c = config("gemma3");
    assert_eq!(c.swa_layers, [true, true, true, true, true, false]);
    assert_eq!((c.rope_freq_base, c.rope_freq_base_swa), (1e6, 1e4));
    assert_eq!(c.rope(0).freq_base, 1e4);
    assert_eq!(c.rope(5).freq_base, 1e6);
    assert_eq!(c.final_softcap, 0.0);

    // phi3: fused Q/K/V, a rope over 8 of 16 dimensions
    let c = config("phi3");
    assert!(c.fused_qkv);
    assert_eq!((c.head_dim, c.n_rot), (16, 8));
    assert_eq!((c.n_ctx_orig, c.rope_attn_factor), (4096, 1.0));

    // phi-3.5's LongRoPE: the original context and the attention factor,
    // and both factor tables read
    let h = header("phi3_longrope");
    let c = read_config(&h).unwrap();
    assert_eq!((c.n_ctx_orig, c.rope_attn_factor), (32, 1.19));
    assert_eq!(c.rope(0).attn_factor, 1.19);
    let desc = ModelDesc::from_header(&h, None).unwrap();
    assert!(desc.tensor("rope_factors_long.weight").is_some());

    // gpt-oss: pattern 2 by default (the even layers slide), YaRN over
    // the original context with llama.cpp's attention factor (exactly 1
    // for a factor of 32), the same rope on both kinds of layer, scores
    // scaled by the rotated dimensions
    let c = config("gpt-oss");
    assert_eq!(c.swa_layers, [true, false, true, false]);
    assert_eq!(c.n_swa, 8);
    assert_eq!((c.n_expert, c.n_expert_used, c.n_ff_expert), (8, 4, 32));
    assert_eq!((c.rope_freq_scale, c.rope_ext_factor), (1.0 / 32.0, 1.0));
    let rope = c.rope(0);
    assert_eq!((rope.n_ctx_orig, rope.attn_factor), (4096, 1.0));
    assert_eq!((rope.ext_factor, rope.freq_base), (1.0, 150000.0));
    assert_eq!(c.rope(0), c.rope(1));
    assert_eq!(c.attention_scale, 0.25);
}

/// `rope.scaling.type` as llama.cpp reads it: "none" never scales, "yarn"
/// turns YaRN on, a type llama.cpp does not know is refused by name.
#[test]
fn the_rope_scaling_type_is_read_as_llama_cpp_reads_it() {
    let with_type = |arch: &str, ty: &str| {
        let key = format!("{arch}.rope.scaling.type");
        let mut kv: Vec<(String, Value)> = header(arch)
            .kv()
            .iter()
            .filter(|(k, _)| *k != key)
            .cloned()
            .collect();
        kv.push((key, Value::from(ty)));
        kv.push((format!("{arch}.rope.scaling.factor"), Value::F32(4.0)));
        let h = header(arch);
        GgufHeader::new(h.version(), kv, h.tensors().to_vec()).unwrap()
    };
    let c = read_config(&with_type("llama", "linear")).unwrap();
    assert_eq!((c.rope_freq_scale, c.rope_ext_factor), (0.25, 0.0));
    let c = read_config(&with_type("llama", "none")).unwrap();
    assert_eq!((c.rope_freq_scale, c.rope_ext_factor), (1.0, 0.0));
    let c = read_config(&with_type("llama", "yarn")).unwrap();
    assert_eq!((c.rope_freq_scale, c.rope_ext_factor), (0.25, 1.0));
    // YaRN's mscale for 4, divided back out in f32 as llama.cpp does
    let m = 0.1f32 * 4f32.ln() + 1.0;
    assert_eq!(c.rope(0).attn_factor, m * (1.0 / (1.0 + 0.1 * 4f32.ln())));
    // a gpt-oss file without the key has no YaRN
    let c = read_config(&rebuilt(
        &header("gpt-oss"),
        |k, v| (k != "gpt-oss.rope.scaling.type").then(|| v.clone()),
        |t| Some(t.clone()),
    ))
    .unwrap();
    assert_eq!(c.rope_ext_factor, 0.0);
    let e = read_config(&with_type("llama", "dynamic"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("llama.rope.scaling.type") && e.contains("dynamic"),
        "{e}"
    );
}

/// gpt-oss's own tensors are required by name: a layer's sinks, its
/// experts' biases; a router for another expert count is a shape error
/// naming both shapes.
#[test]
fn gpt_oss_sinks_biases_and_router_are_checked_by_name() {
    for name in [
        "blk.2.attn_sinks.weight",
        "blk.1.ffn_down_exps.bias",
        "blk.0.ffn_gate_inp.bias",
        "blk.3.attn_output.bias",
    ] {
        let h = rebuilt(
            &header("gpt-oss"),
            |_, v| Some(v.clone()),
            |t| (t.name != name).then(|| t.clone()),
        );
        let e = refused(&h);
        assert!(e.contains(name) && e.contains("missing"), "{e}");
    }
    let router = "blk.1.ffn_gate_inp.weight";
    let h = rebuilt(
        &header("gpt-oss"),
        |_, v| Some(v.clone()),
        |t| {
            Some(if t.name == router {
                TensorInfo::new(&t.name, t.ggml_type, vec![64, 7], t.offset).unwrap()
            } else {
                t.clone()
            })
        },
    );
    let e = refused(&h);
    assert!(e.contains(router) && e.contains("[64, 8]"), "{e}");
}

/// Gemma 4's keys as llama.cpp reads them: heads, KV heads and rotated
/// dimensions per kind of layer, the rope bases, the shared caches, the
/// per-layer inputs, FFN widths per layer, unscaled scores and the logits'
/// cap of 30 when the file has no key.
#[test]
fn gemma4_keys_are_read_as_llama_cpp_reads_them() {
    let c = config("gemma4");
    assert_eq!(c.swa_layers, [true, true, true, false, true, false]);
    assert_eq!((c.head_dim, c.n_head_kv, c.n_rot), (32, 1, 32));
    let swa = c.heads(0);
    assert_eq!((swa.head_dim, swa.n_head_kv, swa.n_rot), (16, 2, 16));
    assert_eq!((c.n_embd_kv_of(0), c.n_embd_kv_of(3)), (32, 32));
    assert_eq!((c.rope(0).freq_base, c.rope(3).freq_base), (10000.0, 1e6));
    assert_eq!((c.rope(0).n_dims, c.rope(3).n_dims), (16, 32));
    // layers 4 and 5 read the caches of 2 (sliding) and 3 (full)
    assert_eq!((c.kv_source(4), c.kv_source(5)), (2, 3));
    assert!(c.has_kv(3) && !c.has_kv(4) && !c.has_kv(5));
    assert_eq!(c.n_embd_per_layer, 8);
    assert_eq!((c.n_ff_of(0), c.n_ff_of(4)), (128, 256));
    assert_eq!((c.attention_scale, c.final_softcap), (1.0, 30.0));
    let c = config("gemma4moe");
    assert_eq!((c.n_expert, c.n_expert_used, c.n_ff_expert), (8, 2, 32));
    assert_eq!((c.n_kv_shared, c.n_embd_per_layer), (0, 0));
}

/// A malformed Gemma 4 header: no per-layer pattern, KV heads that differ
/// within a kind of layer, a layer that keeps its own cache without K,
/// shared caches whose source is not llama.cpp's, a missing router scale.
#[test]
fn a_malformed_gemma4_header_is_refused_naming_what_is_wrong() {
    let without_key = |key: &'static str| {
        rebuilt(
            &header("gemma4"),
            move |k, v| (k != key).then(|| v.clone()),
            |t| Some(t.clone()),
        )
    };
    let e = refused(&without_key("gemma4.attention.sliding_window_pattern"));
    assert!(e.contains("gemma4.attention.sliding_window_pattern"), "{e}");
    let e = refused(&without_key("gemma4.attention.key_length_swa"));
    assert!(e.contains("key_length_swa"), "{e}");
    let e = refused(&without_key("gemma4.embedding_length_per_layer_input"));
    assert!(e.contains("embedding_length_per_layer_input"), "{e}");

    let with_kv = |key: &'static str, value: Value| {
        rebuilt(
            &header("gemma4"),
            move |k, v| Some(if k == key { value.clone() } else { v.clone() }),
            |t| Some(t.clone()),
        )
    };
    let kv_heads = Value::from(ggraph_model::gguf::ArrayValues::U32(vec![2, 2, 1, 1, 2, 1]));
    let e = refused(&with_kv("gemma4.attention.head_count_kv", kv_heads));
    assert!(
        e.contains("differs between layers") && e.contains("layer 2"),
        "{e}"
    );
    // three shared layers: layer 3 would read layer 1's cache, a sliding one
    let e = refused(&with_kv("gemma4.attention.shared_kv_layers", Value::U32(3)));
    assert!(e.contains("share an earlier layer's cache"), "{e}");

    for name in ["blk.1.attn_k.weight", "blk.0.attn_k_norm.weight"] {
        let h = rebuilt(
            &header("gemma4"),
            |_, v| Some(v.clone()),
            |t| (t.name != name).then(|| t.clone()),
        );
        let e = refused(&h);
        assert!(e.contains(name) && e.contains("missing"), "{e}");
    }
    let scale = "blk.2.ffn_gate_inp.scale";
    let h = rebuilt(
        &header("gemma4moe"),
        |_, v| Some(v.clone()),
        |t| (t.name != scale).then(|| t.clone()),
    );
    let e = refused(&h);
    assert!(e.contains(scale) && e.contains("missing"), "{e}");
}

#[test]
fn a_missing_key_is_named() {
    for a in ARCHITECTURES {
        let key = format!("{}.embedding_length", a.name);
        let h = rebuilt(
            &header(a.name),
            |k, v| (k != key).then(|| v.clone()),
            |t| Some(t.clone()),
        );
        let e = refused(&h);
        assert!(e.contains(&key), "{}: {e}", a.name);
    }
}

#[test]
fn head_counts_that_do_not_divide_are_refused() {
    for a in ARCHITECTURES {
        let key = format!("{}.attention.head_count", a.name);
        let h = rebuilt(
            &header(a.name),
            |k, v| Some(if k == key { Value::U32(3) } else { v.clone() }),
            |t| Some(t.clone()),
        );
        let e = refused(&h);
        // an encoder's fixture gives no KV heads: its 3 heads of 21 are
        // not its width
        let named = match a.encoder {
            true => e.contains("n_head 3") && e.contains("n_embd 64"),
            false => e.contains("n_head 3") && e.contains("n_head_kv 2"),
        };
        assert!(named, "{}: {e}", a.name);
    }
}

/// The attention output matrix of the fixture's last attention layer.
fn last_attn_output(h: &GgufHeader) -> String {
    let c = read_config(h).unwrap();
    let il = (0..c.n_layer)
        .rev()
        .find(|&il| !c.is_recurrent(il))
        .unwrap();
    format!("blk.{il}.attn_output.weight")
}

#[test]
fn a_tensor_of_the_wrong_shape_is_named_with_both_shapes() {
    for a in ARCHITECTURES {
        let name = last_attn_output(&header(a.name));
        let h = rebuilt(
            &header(a.name),
            |_, v| Some(v.clone()),
            |t| {
                Some(if t.name == name {
                    let mut s = t.shape.clone();
                    s[0] -= 1;
                    TensorInfo::new(&t.name, t.ggml_type, s, t.offset).unwrap()
                } else {
                    t.clone()
                })
            },
        );
        let e = refused(&h);
        assert!(e.contains(&name) && e.contains("shape"), "{}: {e}", a.name);
    }
}

#[test]
fn a_missing_or_foreign_tensor_is_named() {
    for a in ARCHITECTURES {
        // a layer's norm, and a tensor outside the layers
        let (layer_norm, outer) = match a.encoder {
            true => ("layer_output_norm", "token_embd_norm"),
            false => (a.ffn_norm, a.output_norm),
        };
        let norm = format!("blk.1.{layer_norm}.weight");
        let h = rebuilt(
            &header(a.name),
            |_, v| Some(v.clone()),
            |t| (t.name != norm).then(|| t.clone()),
        );
        let e = refused(&h);
        assert!(
            e.contains(&norm) && e.contains("missing"),
            "{}: {e}",
            a.name
        );

        let h = rebuilt(
            &header(a.name),
            |_, v| Some(v.clone()),
            |t| {
                Some(if t.name == format!("{outer}.weight") {
                    TensorInfo::new(
                        "blk.0.mystery.weight",
                        t.ggml_type,
                        t.shape.clone(),
                        t.offset,
                    )
                    .unwrap()
                } else {
                    t.clone()
                })
            },
        );
        let e = refused(&h);
        assert!(e.contains("blk.0.mystery.weight"), "{}: {e}", a.name);
    }
}

/// LFM2: a layer without KV heads convolves; the kinds must match the
/// tensors, and a convolution's state tensors must be there with their
/// shapes.
#[test]
fn lfm2_layer_kinds_come_from_the_kv_heads_and_must_match_the_tensors() {
    let c = config("lfm2");
    assert_eq!(
        c.recurrent_layers,
        [true, true, false, true, true, false],
        "layers 2 and 5 attend"
    );
    assert_eq!((c.n_head_kv, c.shortconv_l_cache), (2, 3));
    assert_eq!(c.n_embd_r(), 2 * 64);
    assert!(!c.has_swa());

    // layer 0 said to attend: its attention weights are missing
    let kv_heads = |v: Vec<u32>| {
        move |k: &str, x: &Value| {
            Some(if k == "lfm2.attention.head_count_kv" {
                Value::from(ggraph_model::gguf::ArrayValues::U32(v.clone()))
            } else {
                x.clone()
            })
        }
    };
    let h = rebuilt(&header("lfm2"), kv_heads(vec![2, 0, 2, 0, 0, 2]), |t| {
        Some(t.clone())
    });
    let e = refused(&h);
    assert!(e.contains("blk.0.shortconv"), "{e}");
    let h = rebuilt(&header("lfm2"), kv_heads(vec![0, 0, 2, 0, 0, 1]), |t| {
        Some(t.clone())
    });
    let e = refused(&h);
    assert!(e.contains("differs between layers"), "{e}");

    // a state tensor missing, or of another kernel width
    let h = rebuilt(
        &header("lfm2"),
        |_, v| Some(v.clone()),
        |t| (t.name != "blk.3.shortconv.conv.weight").then(|| t.clone()),
    );
    let e = refused(&h);
    assert!(
        e.contains("blk.3.shortconv.conv.weight") && e.contains("missing"),
        "{e}"
    );
    let h = rebuilt(
        &header("lfm2"),
        |k, v| {
            Some(if k == "lfm2.shortconv.l_cache" {
                Value::U32(4)
            } else {
                v.clone()
            })
        },
        |t| Some(t.clone()),
    );
    let e = refused(&h);
    assert!(
        e.contains("shortconv.conv.weight") && e.contains("shape"),
        "{e}"
    );
    let h = rebuilt(
        &header("lfm2"),
        |k, v| (k != "lfm2.shortconv.l_cache").then(|| v.clone()),
        |t| Some(t.clone()),
    );
    let e = refused(&h);
    assert!(e.contains("lfm2.shortconv.l_cache"), "{e}");

    // a layer without KV heads in an architecture that always attends
    let h = rebuilt(
        &header("qwen3"),
        |k, v| {
            Some(if k == "qwen3.attention.head_count_kv" {
                Value::from(ggraph_model::gguf::ArrayValues::U32(vec![2, 0, 2, 2]))
            } else {
                v.clone()
            })
        },
        |t| Some(t.clone()),
    );
    let e = refused(&h);
    assert!(e.contains("layer 1 no KV heads"), "{e}");
}

/// Qwen3.5: the layer kinds from `full_attention_interval`; the
/// multi-section rope required, and refused where it would rotate a pair
/// by the image position; as many prediction layers as layers refused.
#[test]
fn qwen35_layer_kinds_and_rope_sections_are_read_as_llama_cpp_reads_them() {
    let c = config("qwen35");
    assert_eq!(c.recurrent_layers, [true, true, true, false, true]);
    assert_eq!((c.n_rot, c.rope_sections), (8, [2, 1, 1, 0]));
    assert_eq!((c.ssm_n_head, c.ssm_n_group, c.ssm_d_state), (4, 2, 16));
    assert!(!c.fused_qkv, "the linear layers' attn_qkv is theirs");
    let with = |key: &'static str, value: Option<Value>| {
        rebuilt(
            &header("qwen35"),
            move |k, v| {
                if k == key {
                    value.clone()
                } else {
                    Some(v.clone())
                }
            },
            |t| Some(t.clone()),
        )
    };
    let e = refused(&with("qwen35.rope.dimension_sections", None));
    assert!(
        e.contains("rope.dimension_sections") && e.contains("missing"),
        "{e}"
    );
    let sections = ggraph_model::gguf::ArrayValues::I32(vec![1, 1, 1, 1]);
    let e = refused(&with(
        "qwen35.rope.dimension_sections",
        Some(Value::from(sections)),
    ));
    assert!(e.contains("fourth"), "{e}");
    let h = header("qwen35");
    let mut kv = h.kv().to_vec();
    kv.push(("qwen35.nextn_predict_layers".into(), Value::U32(5)));
    let e = refused(&GgufHeader::new(h.version(), kv, h.tensors().to_vec()).unwrap());
    assert!(e.contains("nextn_predict_layers"), "{e}");
}

#[test]
fn an_architecture_ggraph_does_not_build_is_named_with_those_it_does() {
    let h = rebuilt(
        &header("llama"),
        |k, v| {
            Some(if k == "general.architecture" {
                Value::from("mamba")
            } else {
                v.clone()
            })
        },
        |t| Some(t.clone()),
    );
    let e = refused(&h);
    assert!(e.contains("mamba") && e.contains("gemma3"), "{e}");
}

/// Ollama's estimate reads every architecture's header, with its own
/// per-architecture rules (gemma's sliding-window layers sized by the
/// window).
#[test]
fn ollamas_estimate_reads_every_architecture() {
    use ggraph_model::estimate::EstimateRequest;
    use ggraph_model::ollama;
    for a in ARCHITECTURES {
        let h = header(a.name);
        let e = ollama::estimate(&h, &EstimateRequest::default()).unwrap();
        assert_eq!(e.architecture, a.name);
        assert_eq!(e.kv.len(), config(a.name).n_layer, "{}", a.name);
    }
    let e = ollama::estimate(&header("gemma3"), &EstimateRequest::default()).unwrap();
    assert!(
        e.kv[0] < e.kv[5],
        "a sliding layer's cache is the window's: {:?}",
        e.kv
    );
}
