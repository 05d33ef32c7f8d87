//! Subcommands of `ggraph` for model files: `plan`, `estimate`, `header`,
//! `check`, `make-model`, `tokenize`, `embed`, `serve`.

use std::process::ExitCode;

pub mod check;
pub mod devices_sample;
pub mod embed;
pub mod estimate;
pub mod header;
pub mod make;
pub mod model;
pub mod plan;
pub mod serve;
pub mod tokenize;

/// `ggraph`'s subcommands on model files (`devices` and `completions` are
/// the binary's own).
// parsed once per run: the size of a variant does not matter
#[allow(clippy::large_enum_variant)]
#[derive(clap::Subcommand, Clone, Debug)]
pub enum ModelCommand {
    /// Per-device memory and splits by a dry run of ggraph
    ///
    /// MODEL is a .gguf, a GGUF header prefix or a header JSON; only the
    /// header is read. The figures come from a dry run of ggraph's own
    /// loader, cache and allocator: a real run allocates exactly this.
    Plan(plan::PlanArgs),
    /// Memory a model needs on given GPUs (Ollama's and ggraph's)
    ///
    /// Ollama's formulas (byte for byte) next to ggraph's dry run. MODEL is
    /// a .gguf file, a GGUF header prefix (the file's first bytes, up to the
    /// end of the tensor infos, tensor data absent) or a header JSON (see
    /// `ggraph header`). Only the header is read.
    Estimate(estimate::EstimateArgs),
    /// A model's header as JSON, or as a GGUF header prefix
    ///
    /// Prints the header of MODEL (a .gguf, a header prefix or a header
    /// JSON) as JSON, to store, edit and estimate without the GGUF.
    Header(header::HeaderArgs),
    /// Read and check a whole GGUF, with a checksum
    ///
    /// Maps the file, checks its header and that every tensor lies inside
    /// it, then reads every tensor's bytes (progress on stderr for large
    /// files) and prints tensors by type and a 64-bit checksum of the data
    /// (for comparing copies; not cryptographic).
    Check(check::CheckArgs),
    /// Write a random-weight GGUF of any architecture ggraph builds
    ///
    /// Writes a GGUF of any architecture ggraph builds (--arch: llama,
    /// qwen2, qwen3, qwen3moe, gemma2, gemma3, phi3, lfm2, granitehybrid,
    /// qwen35, qwen35moe, gpt-oss) and any shape, with
    /// random weights and a vocabulary the runner's tokenizer round-trips,
    /// for tests, benches and splitting experiments.
    MakeModel(make::MakeArgs),
    /// A text's token ids with the model's own tokenizer
    ///
    /// Prints the ids as llama.cpp's `llama-tokenize --ids` does
    /// (`[1, 2, 3]`): BOS and EOS where the vocabulary adds them, control
    /// tokens written in the text recognised (unless --no-parse-special).
    /// MODEL is a .gguf, a header prefix or a header JSON holding the
    /// vocabulary.
    Tokenize(tokenize::TokenizeArgs),
    /// Embeddings of texts, as llama.cpp's llama-embedding prints them
    ///
    /// Each TEXT (split at --embd-separator) becomes one vector, pooled as
    /// the model says or --pooling asks and normalised by
    /// --embd-normalize; several texts print their cosine similarity
    /// matrix, a reranker (rank pooling) its scores of query<TAB>document
    /// pairs. --embd-output-format prints JSON, JSON with the
    /// similarities, one array, or raw lines.
    Embed(embed::EmbedArgs),
    /// An OpenAI-compatible HTTP server for a model
    ///
    /// POST /v1/chat/completions (the model's chat template; "stream":
    /// true for SSE), POST /v1/completions, POST /completion
    /// (llama-server's shape), GET /v1/models, POST /tokenize, POST
    /// /detokenize, GET /health (503 while loading), GET /metrics, GET
    /// /slots; for an embedding model (or with --embeddings, --reranking)
    /// POST /v1/embeddings, /embedding and /v1/rerank instead. Each
    /// request is a slot (-np of them share the context, batched
    /// together), sampled with llama.cpp's samplers; the request's fields
    /// (temperature, top_p, seed, stop, response_format, ...) override the
    /// sampling options given here.
    Serve(serve::ServeArgs),
}

impl ModelCommand {
    /// The subcommand's name, as typed.
    pub fn name(&self) -> &'static str {
        match self {
            ModelCommand::Plan(_) => "plan",
            ModelCommand::Estimate(_) => "estimate",
            ModelCommand::Header(_) => "header",
            ModelCommand::Check(_) => "check",
            ModelCommand::MakeModel(_) => "make-model",
            ModelCommand::Tokenize(_) => "tokenize",
            ModelCommand::Embed(_) => "embed",
            ModelCommand::Serve(_) => "serve",
        }
    }

    /// What the subcommand prints, or why it failed.
    pub fn render(&self) -> Result<String, Failure> {
        match self {
            ModelCommand::Plan(a) => plan::render(a),
            ModelCommand::Estimate(a) => estimate::render(a),
            ModelCommand::Header(a) => header::render(a),
            ModelCommand::Check(a) => check::render(a),
            ModelCommand::MakeModel(a) => make::render(a),
            ModelCommand::Tokenize(a) => tokenize::render(a),
            ModelCommand::Embed(a) => embed::render(a),
            ModelCommand::Serve(_) => Err(Failure::usage("serve runs a server: use run_with")),
        }
    }

    /// Runs the subcommand: its output on stdout, a failure on stderr.
    /// With the subcommand's clap matches: where the sampling options
    /// came from (`serve` keeps a model's own sampling where the command
    /// line is silent).
    pub fn run_with(&self, matches: Option<&clap::ArgMatches>) -> ExitCode {
        if let ModelCommand::Serve(a) = self {
            let user_set = matches
                .map(ggraph::sampling_args::SamplingArgs::user_set)
                .unwrap_or_default();
            return finish(
                self.name(),
                serve::run(a, &user_set).map(|()| String::new()),
            );
        }
        finish(self.name(), self.render())
    }
}

/// Writes `text` to stdout. A closed pipe (`ggraph ... | head`) is not an
/// error worth a panic: the output is simply cut.
pub fn out(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(text.as_bytes())
        .and_then(|_| stdout.flush());
}

/// Why a subcommand failed: exit code 2 for a usage mistake clap cannot
/// see (a combination of values), 1 for anything else.
pub struct Failure {
    pub code: u8,
    pub msg: String,
}

impl Failure {
    pub fn usage(msg: impl Into<String>) -> Failure {
        Failure {
            code: 2,
            msg: msg.into(),
        }
    }

    pub fn other(msg: impl std::fmt::Display) -> Failure {
        Failure {
            code: 1,
            msg: msg.to_string(),
        }
    }
}

/// Prints what a subcommand made, or its failure prefixed with `name`.
fn finish(name: &str, result: Result<String, Failure>) -> ExitCode {
    match result {
        Ok(text) => {
            out(&text);
            ExitCode::SUCCESS
        }
        Err(f) if f.code == 2 => {
            eprintln!(
                "ggraph {name}: {}\n\nFor more information, try 'ggraph {name} --help'.",
                f.msg
            );
            ExitCode::from(2)
        }
        Err(f) => {
            eprintln!("ggraph {name}: {}", f.msg);
            ExitCode::from(f.code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        format!(
            "{}/../ggraph-model/tests/fixtures/gguf/{name}",
            env!("CARGO_MANIFEST_DIR")
        )
    }

    fn temp(name: &str) -> String {
        std::env::temp_dir()
            .join(format!("ggraph-cli-{}-{name}", std::process::id()))
            .display()
            .to_string()
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        command: ModelCommand,
    }

    /// `ggraph COMMAND ARGS...` as clap parses it.
    fn parse(a: &[&str]) -> Result<ModelCommand, clap::Error> {
        ggraph::tool::try_parse_from::<Cli, _, _>(
            std::iter::once("ggraph").chain(a.iter().copied()),
        )
        .map(|c| c.command)
    }

    /// What `ggraph COMMAND ARGS...` prints.
    fn run(a: &[&str]) -> Result<String, Failure> {
        parse(a).unwrap_or_else(|e| panic!("{a:?}: {e}")).render()
    }

    fn json(text: &str) -> ggraph::model::serde_json::Value {
        ggraph::model::serde_json::from_str(text).unwrap()
    }

    fn estimate_json(model: &str, extra: &[&str]) -> ggraph::model::serde_json::Value {
        let mut a = vec!["estimate", model, "--json"];
        a.extend(extra);
        let Ok(text) = run(&a) else {
            panic!("estimate {a:?} failed")
        };
        json(&text)
    }

    #[test]
    fn estimate_json_has_the_documented_members() {
        let j = estimate_json(
            &fixture("tiny_llama.gguf"),
            &[
                "--ctx",
                "128",
                "--gpu-free",
                "1GiB",
                "--gpu-free=512MiB",
                "--kv-type",
                "q8_0",
                "--flash-attn",
                "on",
            ],
        );
        assert_eq!(j["model"]["source"], "gguf");
        assert_eq!(
            j["request"]["gpu_free"],
            ggraph::model::serde_json::json!([1u64 << 30, 512u64 << 20])
        );
        let o = &j["ollama"];
        // 128 * (16 + 16) * 1 KV head * 1 byte (q8_0 with flash attention).
        assert_eq!(o["kv"], ggraph::model::serde_json::json!([4096, 4096]));
        assert_eq!(o["kv_total"], 8192);
        assert_eq!(o["kv_type"], "q8_0");
        assert!(o["graph_partial"].as_u64().unwrap() > 0);
        assert!(o["graph_full"].as_u64().unwrap() > 0);
        assert_eq!(o["gpus"][0]["id"], "0");
        assert_eq!(
            o["gpus"][0]["layers"],
            ggraph::model::serde_json::json!([0, 1, 2])
        );
        assert_eq!(o["gpus"][1]["layers"], ggraph::model::serde_json::json!([]));
        assert_eq!(o["layers_on_gpu"], 3);
        assert_eq!(o["graph_kind"], "full");
        // this model's K rows (16 values) are no whole Q8_0 block: ggraph
        // says so instead of guessing
        let err = j["exact"]["error"].as_str().unwrap();
        assert!(err.contains("Q8_0"), "{err}");
        let j = estimate_json(
            &fixture("tiny_llama.gguf"),
            &["--ctx", "128", "--gpu-free", "1GiB", "--gpu-free=512MiB"],
        );
        let x = &j["exact"];
        assert_eq!(x["devices"][0]["name"], "CPU");
        assert_eq!(x["devices"][1]["name"], "sim:0");
        assert_eq!(x["devices"][2]["name"], "sim:1");
        assert_eq!(x["n_ctx"], 128);
        let total = |d: &ggraph::model::serde_json::Value| d["total"].as_u64().unwrap();
        assert!(total(&x["devices"][1]) > 0);
        assert!(total(&x["devices"][1]) <= 1 << 30, "fits the 1 GiB GPU");
        assert!(x["fit"].as_str().is_some());
    }

    #[test]
    fn a_header_prefix_and_a_header_json_estimate_like_the_file() {
        let full = estimate_json(&fixture("tiny_llama.gguf"), &["--gpu-free", "600MiB"]);

        let prefix = temp("tiny.prefix.gguf");
        let json_path = temp("tiny.header.json");
        run(&[
            "header",
            &fixture("tiny_llama.gguf"),
            "--out",
            &json_path,
            "--prefix-out",
            &prefix,
        ])
        .ok()
        .unwrap();
        let from_prefix = estimate_json(&prefix, &["--gpu-free", "600MiB"]);
        assert_eq!(from_prefix["model"]["source"], "gguf-prefix");
        assert_eq!(from_prefix["ollama"], full["ollama"]);
        let from_json = estimate_json(&json_path, &["--gpu-free", "600MiB"]);
        assert_eq!(from_json["model"]["source"], "json");
        assert_eq!(from_json["ollama"], full["ollama"]);
        // A prefix written from the JSON is the file's header prefix.
        let prefix2 = temp("tiny.prefix2.gguf");
        run(&["header", &json_path, "--prefix-out", &prefix2])
            .ok()
            .unwrap();
        assert_eq!(
            std::fs::read(&prefix).unwrap(),
            std::fs::read(&prefix2).unwrap()
        );
        for p in [prefix, prefix2, json_path] {
            std::fs::remove_file(p).ok();
        }
    }

    #[test]
    fn a_context_too_large_to_count_is_an_error_not_an_overflow() {
        let huge = u64::MAX / 2;
        let j = estimate_json(
            &fixture("tiny_llama.gguf"),
            &["--ctx", &huge.to_string(), "--parallel", "4"],
        );
        let e = j["exact"]["error"].as_str().unwrap_or_default().to_string();
        assert!(e.contains("too large a context"), "{j:#}");
    }

    #[test]
    fn the_table_shows_layers_per_gpu_and_the_graph_kind() {
        let Ok(t) = run(&[
            "estimate",
            &fixture("tiny_llama.gguf"),
            "--gpu-free",
            "1GiB",
        ]) else {
            panic!()
        };
        assert!(t.contains("0-2"), "{t}");
        assert!(t.contains("3 of 3 layers on GPUs"), "{t}");
        assert!(t.contains("full graph"), "{t}");
        assert!(t.contains("context_length 256"), "{t}");
        assert!(t.contains("exact      ggraph's dry run"), "{t}");
    }

    #[test]
    fn usage_mistakes_are_clap_errors_naming_the_flag_and_bad_files_exit_1() {
        use clap::error::ErrorKind;
        let err = |a: &[&str]| parse(a).expect_err("a usage error");
        assert_eq!(
            err(&["estimate"]).kind(),
            ErrorKind::MissingRequiredArgument
        );
        for (a, flag) in [
            (&["estimate", "m", "--kv-type", "q5"][..], "--kv-type"),
            (&["estimate", "m", "--gpu-free", "lots"], "--gpu-free"),
            (&["plan", "m", "--tensor-split", "3,x"], "--tensor-split"),
            (&["plan", "m", "-ngl", "some"], "--n-gpu-layers"),
            (&["make-model", "o.gguf", "--shape", "huge"], "--shape"),
            (&["header", "m", "--max-array", "many"], "--max-array"),
            (&["plan", "m", "--frobnicate"], "--frobnicate"),
        ] {
            let e = err(a);
            assert_eq!(e.exit_code(), 2, "{a:?}");
            assert!(e.to_string().contains(flag), "{a:?}: {e}");
        }
        assert_eq!(err(&["check"]).exit_code(), 2);
        assert_eq!(
            run(&["estimate", "/nonexistent.gguf"])
                .err()
                .map(|f| f.code),
            Some(1)
        );
        let bad = temp("bad.gguf");
        std::fs::write(&bad, b"GGUF\x03\0\0\0").unwrap();
        let e = run(&["estimate", &bad]).err().unwrap();
        assert!(e.code == 1 && e.msg.contains("truncated"), "{}", e.msg);
        std::fs::remove_file(bad).ok();
        // a combination clap cannot see is still a usage mistake
        let e = run(&[
            "plan",
            &fixture("tiny_llama.gguf"),
            "--kv-type",
            "q8_0",
            "-fa",
            "off",
        ])
        .err()
        .unwrap();
        assert_eq!(e.code, 2, "{}", e.msg);
    }

    #[test]
    fn make_model_writes_what_model_gguf_makes() {
        let out = temp("made.gguf");
        let t = run(&[
            "make-model",
            &out,
            "--n-layer",
            "2",
            "--weights",
            "q8_0",
            "--seed",
            "5",
        ])
        .ok()
        .unwrap();
        assert!(t.contains("2 layers") && t.contains("Q8_0"), "{t}");
        let t = ggraph::runner::preset("tiny").unwrap();
        let mut c = ggraph::model::arch::ModelConfig::dense(
            t.n_vocab,
            t.n_embd,
            2,
            t.n_head,
            t.n_head_kv,
            t.n_ff,
        );
        c.rope_freq_base = t.rope_freq_base;
        let desc = ggraph::model::desc::ModelDesc::random(c, ggraph::DType::Q8_0, 5).unwrap();
        let want = ggraph::model::make::model_gguf(
            &desc,
            ggraph::model::make::make_vocab(desc.config.n_vocab),
        )
        .unwrap()
        .to_bytes()
        .unwrap();
        assert!(
            std::fs::read(&out).unwrap() == want,
            "the file differs from model_gguf's"
        );
        std::fs::remove_file(out).ok();
    }

    #[test]
    fn make_model_writes_every_architecture_and_plan_reads_it_back() {
        use ggraph::model::arch::{ARCHITECTURES, ModelConfig, read_config};
        for a in ARCHITECTURES {
            let out = temp(&format!("made-{}.gguf", a.name));
            let t = run(&["make-model", &out, "--arch", a.name, "--weights", "f16"])
                .ok()
                .unwrap();
            assert!(t.contains(a.name), "{t}");
            // the file reads back as the architecture's defaults on the
            // tiny shape
            let file = ggraph::model::gguf::ModelFile::open(&out).unwrap();
            let got = read_config(file.header()).unwrap();
            let p = ggraph::runner::preset("tiny").unwrap();
            let mut want =
                ModelConfig::new(a, p.n_vocab, p.n_embd, 2, p.n_head, p.n_head_kv, p.n_ff);
            if a.name == "llama" {
                want.rope_freq_base = p.rope_freq_base;
            }
            assert_eq!(got, want, "{}", a.name);
            let plan = run(&[
                "plan",
                &out,
                "--ctx",
                "64",
                "--gpu-free",
                "64MiB",
                "--gpu-free",
                "64MiB",
            ])
            .ok()
            .unwrap();
            assert!(plan.contains("sim:1"), "{}: {plan}", a.name);
            std::fs::remove_file(out).ok();
        }
    }

    /// Each architecture's header (the llama.cpp fixtures'), as JSON, with
    /// one flaw: `plan` names it.
    #[test]
    fn plan_names_what_is_wrong_with_a_malformed_header_of_each_architecture() {
        use ggraph::model::arch::ARCHITECTURES;
        use ggraph::model::gguf::json::header_to_json;
        use ggraph::model::gguf::{JsonOptions, read_header};
        use ggraph::model::serde_json::Value;
        for a in ARCHITECTURES {
            let path = format!(
                "{}/../ggraph-model/tests/fixtures/arch/{}.gguf",
                env!("CARGO_MANIFEST_DIR"),
                a.name
            );
            let h = read_header(std::path::Path::new(&path), None).unwrap();
            let good = header_to_json(&h, &JsonOptions::default());
            // an attention layer's output matrix (hybrids' other layers
            // have none)
            let attn_output = (h.tensors().iter())
                .map(|t| t.name.clone())
                .rfind(|n| n.ends_with(".attn_output.weight"))
                .unwrap();
            let three_heads = "n_head 3";
            type Flaw<'a> = &'a dyn Fn(&mut Value);
            let flaws: [(&str, Flaw); 3] = [
                ("embedding_length", &|j| {
                    let kv = j["kv"].as_object_mut().unwrap();
                    kv.retain(|k, _| !k.ends_with(".embedding_length"));
                }),
                (three_heads, &|j| {
                    let key = format!("{}.attention.head_count", a.name);
                    j["kv"][key.as_str()] = 3.into();
                }),
                (&attn_output, &|j| {
                    for t in j["tensors"].as_array_mut().unwrap() {
                        if t["name"] == attn_output.as_str() {
                            t["shape"][0] = 63.into();
                        }
                    }
                }),
            ];
            for (named, flaw) in flaws {
                let mut j = good.clone();
                flaw(&mut j);
                let file = temp(&format!("flawed-{}.json", a.name));
                std::fs::write(&file, j.to_string()).unwrap();
                let e = run(&["plan", &file]).err().unwrap();
                assert!(
                    e.code == 1 && e.msg.contains(named),
                    "{} {named}: {}",
                    a.name,
                    e.msg
                );
                std::fs::remove_file(file).ok();
            }
        }
    }

    /// `embed` prints llama-embedding's listing, its JSON (the vectors of
    /// the library's embeddings, normalised) and a reranker's scores.
    #[test]
    fn embed_prints_vectors_similarities_and_scores() {
        let arch = |name: &str| {
            format!(
                "{}/../ggraph-model/tests/fixtures/arch/{name}.gguf",
                env!("CARGO_MANIFEST_DIR")
            )
        };
        let bert = arch("bert");
        // a failure prints as an empty text, which the assertions name
        let text = |a: &[&str]| run(a).ok().unwrap_or_default();
        let t = text(&["embed", &bert, "hello world", "the world"]);
        assert!(
            t.contains("embedding 1: ") && t.contains("cosine similarity matrix"),
            "{t}"
        );
        let t = text(&["embed", &bert, "hello\nthe world"]);
        assert!(t.contains("embedding 1: "), "{t}");
        let t = text(&[
            "embed",
            &bert,
            "hello world",
            "--embd-output-format",
            "json",
        ]);
        let v: ggraph::model::serde_json::Value =
            ggraph::model::serde_json::from_str(&t).unwrap_or_default();
        let e: Vec<f64> = (v["data"][0]["embedding"].as_array().into_iter().flatten())
            .filter_map(|x| x.as_f64())
            .collect();
        assert_eq!(e.len(), 64, "{t}");
        let length: f64 = e.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((length - 1.0).abs() < 1e-5, "{length}");
        let t = text(&["embed", &arch("bert_rank"), "hello\tworld"]);
        assert!(t.starts_with("rerank score 0: "), "{t}");
        let e = run(&["embed", &bert, "x", "--embd-normalize", "-3"]).err();
        assert!(e.is_some_and(|e| e.code == 2));
    }

    #[test]
    fn check_reads_every_tensor_and_names_types_ggraph_does_not_compute() {
        let Ok(t) = run(&["check", &fixture("all_types.gguf")]) else {
            panic!()
        };
        assert!(t.contains("12 tensors"), "{t}");
        // I8 is a type ggraph reads but does not compute with
        assert!(t.contains("I8 ") && t.contains("does not compute"), "{t}");
        assert!(t.contains("checksum "), "{t}");
    }

    #[test]
    fn a_tensor_of_a_type_ggraph_does_not_compute_is_an_error_naming_it() {
        // tiny_llama's header with one matrix in Q8_1, which ggraph reads
        // but does not compute with
        let Ok(header) = run(&["header", &fixture("tiny_llama.gguf")]) else {
            panic!("header failed")
        };
        let mut h = json(&header);
        let tensors = h["tensors"].as_array_mut().unwrap();
        let down = tensors
            .iter_mut()
            .find(|t| t["name"] == "blk.0.ffn_down.weight")
            .unwrap();
        down["type"] = "Q8_1".into();
        let path = temp("q8_1.json");
        std::fs::write(&path, h.to_string()).unwrap();
        let Err(e) = run(&["plan", &path]) else {
            panic!("plan accepted a Q8_1 matrix")
        };
        let names = |e: &str| e.contains("blk.0.ffn_down.weight") && e.contains("Q8_1");
        assert!(names(&e.msg), "{}", e.msg);
        // Ollama's formulas need no types; ggraph's exact figures say why
        // they are missing
        let t = run(&["estimate", &path]).unwrap_or_else(|e| panic!("estimate failed: {}", e.msg));
        assert!(t.contains("cannot estimate") && names(&t), "{t}");
        std::fs::remove_file(path).ok();
    }

    #[test]
    fn plan_prints_a_row_per_device_and_the_splits() {
        let Ok(t) = run(&[
            "plan",
            &fixture("tiny_llama.gguf"),
            "--ctx",
            "64",
            "--gpu-free",
            "1MiB",
            "--gpu-free",
            "1MiB",
            "--split-mode",
            "row",
        ]) else {
            panic!("plan failed")
        };
        assert!(
            t.contains("\nCPU ") && t.contains("\nsim:0 ") && t.contains("\nsim:1 "),
            "{t}"
        );
        assert!(t.contains("split(s):"), "{t}");
        assert!(t.contains("weights by buffer type: "), "{t}");
        let Ok(f) = run(&[
            "plan",
            &fixture("tiny_llama.gguf"),
            "--ctx",
            "64",
            "--gpu-free",
            "64KiB",
            "--fit",
        ]) else {
            panic!("plan --fit failed")
        };
        assert!(f.contains("fit      "), "{f}");
        assert!(
            parse(&[
                "plan",
                &fixture("tiny_llama.gguf"),
                "--split-mode",
                "diagonal"
            ])
            .is_err()
        );
    }
}
