//! Requests as llama-server and OpenAI shape them, read into a job: the
//! prompt (a chat rendered with the model's template, or a completion's
//! text or ids), the sampling parameters (OpenAI's names and llama.cpp's
//! extra fields over the server's defaults), stop strings, the token
//! budget and a grammar. Every mistake is an [`ApiError`] naming the
//! field, before any token is generated.

use ggraph_model::chat_template::{ChatMessage, ChatTemplate};
use ggraph_model::reasoning::{ReasoningFormat, ReasoningSplitter};
use ggraph_model::sampling::{GrammarSource, RANDOM_SEED, SamplerType, SamplingParams};
use ggraph_model::tokenizer::Tokenizer;
use serde_json::{Map, Value, json};

/// An error answer: its HTTP status and message, in OpenAI's shape.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: u16,
    /// What was wrong.
    pub message: String,
}

impl ApiError {
    /// A 400: the request is wrong.
    pub fn bad(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            message: message.into(),
        }
    }

    /// OpenAI's error body.
    pub fn body(&self) -> Value {
        let kind = match self.status {
            400 | 405 | 413 => "invalid_request_error",
            401 => "authentication_error",
            404 => "not_found_error",
            408 => "timeout_error",
            501 => "not_supported_error",
            503 => "unavailable_error",
            _ => "server_error",
        };
        json!({"error": {"code": self.status, "message": self.message, "type": kind}})
    }
}

/// The parts of a generation request the engine needs, read and checked.
#[derive(Clone, Debug)]
pub struct GenRequest {
    /// The prompt's ids.
    pub prompt: Vec<i32>,
    /// Sampling parameters.
    pub params: SamplingParams,
    /// Tokens to generate at most (`None`: until the slot's context).
    pub n_predict: Option<usize>,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Stream the answer (SSE).
    pub stream: bool,
    /// With streaming, a last chunk with the usage.
    pub include_usage: bool,
    /// Log-probabilities: how many candidates (None: none).
    pub logprobs: Option<usize>,
    /// The grammar the output must follow.
    pub grammar: Option<GrammarSource>,
    /// Go on past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Reuse the slot's cache and keep this request's cells after it
    /// (llama-server's `cache_prompt`, on by default).
    pub cache_prompt: bool,
    /// llama-server's `/completion`: list the generated ids in the
    /// answer (`return_tokens`).
    pub return_tokens: bool,
    /// A chat answer whose template carries reasoning (Harmony's
    /// channels, Gemma 4's thought channel, thinking tags): the splitter
    /// that takes the reasoning to `reasoning_content` and the rest to
    /// `content`, as llama-server's default `reasoning_format` does.
    pub reasoning: Option<ReasoningSplitter>,
}

fn object(body: &Value) -> Result<&Map<String, Value>, ApiError> {
    body.as_object()
        .ok_or_else(|| ApiError::bad("the request body is not a JSON object"))
}

fn number(o: &Map<String, Value>, key: &str) -> Result<Option<f64>, ApiError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| ApiError::bad(format!("'{key}' must be a number, not {v}"))),
    }
}

fn integer(o: &Map<String, Value>, key: &str) -> Result<Option<i64>, ApiError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .map(Some)
            .ok_or_else(|| ApiError::bad(format!("'{key}' must be an integer, not {v}"))),
    }
}

fn boolean(o: &Map<String, Value>, key: &str) -> Result<Option<bool>, ApiError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_bool()
            .map(Some)
            .ok_or_else(|| ApiError::bad(format!("'{key}' must be true or false, not {v}"))),
    }
}

fn strings(o: &Map<String, Value>, key: &str) -> Result<Option<Vec<String>>, ApiError> {
    let bad = || ApiError::bad(format!("'{key}' must be a string or an array of strings"));
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(vec![s.clone()])),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().map(str::to_string).ok_or_else(bad))
            .collect::<Result<_, _>>()
            .map(Some),
        Some(_) => Err(bad()),
    }
}

/// The sampling fields over `defaults` (OpenAI's names, and llama.cpp's
/// for what OpenAI lacks); -1 for a last-n is the slot's context.
pub fn sampling(
    o: &Map<String, Value>,
    defaults: &SamplingParams,
    n_ctx_slot: usize,
) -> Result<SamplingParams, ApiError> {
    let mut p = defaults.clone();
    let f32s: [(&str, &mut f32); 18] = [
        ("temperature", &mut p.temp),
        ("top_p", &mut p.top_p),
        ("min_p", &mut p.min_p),
        ("typical_p", &mut p.typ_p),
        ("repeat_penalty", &mut p.penalty_repeat),
        ("presence_penalty", &mut p.penalty_present),
        ("frequency_penalty", &mut p.penalty_freq),
        ("dry_multiplier", &mut p.dry_multiplier),
        ("dry_base", &mut p.dry_base),
        ("xtc_probability", &mut p.xtc_probability),
        ("xtc_threshold", &mut p.xtc_threshold),
        ("mirostat_tau", &mut p.mirostat_tau),
        ("mirostat_eta", &mut p.mirostat_eta),
        ("top_n_sigma", &mut p.top_n_sigma),
        ("dynatemp_range", &mut p.dynatemp_range),
        ("dynatemp_exponent", &mut p.dynatemp_exponent),
        ("adaptive_target", &mut p.adaptive_target),
        ("adaptive_decay", &mut p.adaptive_decay),
    ];
    for (key, field) in f32s {
        if let Some(v) = number(o, key)? {
            *field = v as f32;
        }
    }
    let last_n = |key: &str, v: i64| -> Result<i32, ApiError> {
        match v {
            -1 => Ok(n_ctx_slot.min(i32::MAX as usize) as i32),
            v if v >= 0 && v <= i32::MAX as i64 => Ok(v as i32),
            v => Err(ApiError::bad(format!(
                "'{key}' is {v}: 0 or more, or -1 for the context"
            ))),
        }
    };
    if let Some(v) = integer(o, "repeat_last_n")? {
        p.penalty_last_n = last_n("repeat_last_n", v)?;
    }
    if let Some(v) = integer(o, "dry_penalty_last_n")? {
        p.dry_penalty_last_n = last_n("dry_penalty_last_n", v)?;
    }
    if let Some(v) = integer(o, "top_k")? {
        p.top_k = i32::try_from(v).map_err(|_| ApiError::bad(format!("'top_k' is {v}")))?;
    }
    if let Some(v) = integer(o, "dry_allowed_length")? {
        p.dry_allowed_length =
            i32::try_from(v).map_err(|_| ApiError::bad(format!("'dry_allowed_length' is {v}")))?;
    }
    if let Some(v) = integer(o, "min_keep")? {
        p.min_keep = usize::try_from(v).map_err(|_| ApiError::bad(format!("'min_keep' is {v}")))?;
    }
    if let Some(v) = integer(o, "mirostat")? {
        p.mirostat = u8::try_from(v).map_err(|_| ApiError::bad(format!("'mirostat' is {v}")))?;
    }
    p.seed = match integer(o, "seed")? {
        None | Some(-1) => RANDOM_SEED,
        Some(v) => u32::try_from(v)
            .ok()
            .filter(|&s| s != RANDOM_SEED)
            .ok_or_else(|| ApiError::bad(format!("'seed' is {v}: 0 to 4294967294, or -1")))?,
    };
    if let Some(list) = strings(o, "dry_sequence_breakers")? {
        p.dry_sequence_breakers = list;
    }
    if let Some(names) = strings(o, "samplers")? {
        let names: Vec<String> = names
            .iter()
            .flat_map(|n| n.split(';').map(str::to_string).collect::<Vec<_>>())
            .collect();
        p.samplers = SamplerType::parse_list(&names.join(";"))
            .map_err(|e| ApiError::bad(format!("'samplers': {e}")))?;
    }
    match o.get("logit_bias") {
        None | Some(Value::Null) => {}
        // OpenAI: {"token id": bias}
        Some(Value::Object(m)) => {
            for (k, v) in m {
                let token: i32 = k
                    .parse()
                    .map_err(|_| ApiError::bad(format!("'logit_bias': '{k}' is not a token id")))?;
                let bias = bias_value(v)?;
                p.logit_bias.push((token, bias));
            }
        }
        // llama.cpp: [[token id, bias], ...] (bias false bans it)
        Some(Value::Array(a)) => {
            for pair in a {
                let (Some(t), Some(b)) = (pair.get(0).and_then(Value::as_i64), pair.get(1)) else {
                    return Err(ApiError::bad(
                        "'logit_bias': each entry is [token id, bias]",
                    ));
                };
                p.logit_bias.push((t as i32, bias_value(b)?));
            }
        }
        Some(v) => {
            return Err(ApiError::bad(format!(
                "'logit_bias' must be an object, not {v}"
            )));
        }
    }
    Ok(p)
}

fn bias_value(v: &Value) -> Result<f32, ApiError> {
    match v {
        Value::Bool(false) => Ok(f32::NEG_INFINITY),
        v => v
            .as_f64()
            .map(|b| b as f32)
            .ok_or_else(|| ApiError::bad(format!("'logit_bias': {v} is not a bias"))),
    }
}

/// The grammar a request asks for: OpenAI's `response_format`
/// (`json_object`, `json_schema`), or llama.cpp's `json_schema` and
/// `grammar`.
fn grammar(o: &Map<String, Value>) -> Result<Option<GrammarSource>, ApiError> {
    if let Some(rf) = o.get("response_format").filter(|v| !v.is_null()) {
        let kind = rf.get("type").and_then(Value::as_str).unwrap_or("");
        return match kind {
            "text" => Ok(None),
            "json_object" => Ok(Some(GrammarSource::JsonSchema(
                rf.get("schema")
                    .cloned()
                    .unwrap_or(json!({"type": "object"})),
            ))),
            "json_schema" => {
                let schema = rf
                    .get("json_schema")
                    .and_then(|j| j.get("schema"))
                    .or_else(|| rf.get("schema"))
                    .cloned()
                    .ok_or_else(|| {
                        ApiError::bad("'response_format': json_schema without a 'schema'")
                    })?;
                Ok(Some(GrammarSource::JsonSchema(schema)))
            }
            other => Err(ApiError::bad(format!(
                "'response_format': unknown type '{other}' (text, json_object, json_schema)"
            ))),
        };
    }
    if let Some(s) = o.get("json_schema").filter(|v| !v.is_null()) {
        return Ok(Some(GrammarSource::JsonSchema(s.clone())));
    }
    match o.get("grammar") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(g)) if g.is_empty() => Ok(None),
        Some(Value::String(g)) => Ok(Some(GrammarSource::Gbnf(g.clone()))),
        Some(v) => Err(ApiError::bad(format!(
            "'grammar' must be a string, not {v}"
        ))),
    }
}

/// What both endpoints share: budget, stop, stream, sampling, grammar.
fn common(
    o: &Map<String, Value>,
    prompt: Vec<i32>,
    defaults: &SamplingParams,
    n_ctx_slot: usize,
) -> Result<GenRequest, ApiError> {
    refuse_unsupported(o)?;
    if prompt.is_empty() {
        return Err(ApiError::bad("the prompt is empty"));
    }
    if prompt.len() >= n_ctx_slot {
        return Err(ApiError::bad(format!(
            "the prompt is {} tokens: a slot's context holds {n_ctx_slot}",
            prompt.len()
        )));
    }
    let mut n_predict = None;
    for key in ["max_completion_tokens", "max_tokens", "n_predict"] {
        if let Some(v) = integer(o, key)? {
            n_predict = match v {
                -1 => None,
                v if v >= 1 => Some(v as usize),
                v => return Err(ApiError::bad(format!("'{key}' is {v}: 1 or more, or -1"))),
            };
            break;
        }
    }
    let include_usage = o
        .get("stream_options")
        .and_then(|s| s.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok(GenRequest {
        prompt,
        params: sampling(o, defaults, n_ctx_slot)?,
        n_predict,
        stop: strings(o, "stop")?.unwrap_or_default(),
        stream: boolean(o, "stream")?.unwrap_or(false),
        include_usage,
        logprobs: None,
        grammar: grammar(o)?,
        ignore_eos: boolean(o, "ignore_eos")?.unwrap_or(false),
        cache_prompt: boolean(o, "cache_prompt")?.unwrap_or(true),
        return_tokens: boolean(o, "return_tokens")?.unwrap_or(false),
        reasoning: None,
    })
}

/// A 501: the request asks for something this server does not do.
fn unsupported(message: impl Into<String>) -> ApiError {
    ApiError {
        status: 501,
        message: message.into(),
    }
}

/// Refuses what OpenAI's API has and this server does not do, rather
/// than ignoring it: several choices, tools, echo, suffixes.
fn refuse_unsupported(o: &Map<String, Value>) -> Result<(), ApiError> {
    for key in ["n", "best_of"] {
        if let Some(n) = integer(o, key)?
            && n != 1
        {
            return Err(unsupported(format!(
                "'{key}' is {n}: one choice per request is supported"
            )));
        }
    }
    for key in ["tools", "functions"] {
        match o.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::Array(a)) if a.is_empty() => {}
            Some(_) => {
                return Err(unsupported(format!(
                    "'{key}': tool calls are not supported"
                )));
            }
        }
    }
    if boolean(o, "echo")?.unwrap_or(false) {
        return Err(unsupported("'echo' is not supported"));
    }
    if o.get("suffix").is_some_and(|v| !v.is_null()) {
        return Err(unsupported(
            "'suffix' (fill in the middle) is not supported",
        ));
    }
    Ok(())
}

/// A chat completion request (`POST /v1/chat/completions`).
pub fn chat(
    body: &Value,
    template: Option<&ChatTemplate>,
    tokenizer: &Tokenizer,
    defaults: &SamplingParams,
    n_ctx_slot: usize,
) -> Result<GenRequest, ApiError> {
    let o = object(body)?;
    let messages = o
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::bad("'messages' must be an array of messages"))?;
    if messages.is_empty() {
        return Err(ApiError::bad("'messages' is empty"));
    }
    let mut list = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::bad(format!("messages[{i}] has no 'role'")))?;
        let content = match m.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            // OpenAI's parts: the text ones, joined
            Some(Value::Array(parts)) => {
                let mut text = String::new();
                for p in parts {
                    match p.get("type").and_then(Value::as_str) {
                        Some("text") => {
                            text.push_str(p.get("text").and_then(Value::as_str).unwrap_or(""))
                        }
                        Some(other) => {
                            return Err(unsupported(format!(
                                "messages[{i}]: content parts of type '{other}' are not supported (text only)"
                            )));
                        }
                        None => {
                            return Err(ApiError::bad(format!(
                                "messages[{i}]: a content part without a 'type'"
                            )));
                        }
                    }
                }
                text
            }
            Some(v) => return Err(ApiError::bad(format!("messages[{i}].content is {v}"))),
        };
        list.push(ChatMessage::new(role, content));
    }
    let template = template
        .ok_or_else(|| ApiError::bad("this model has no chat template: use /v1/completions"))?;
    let text = template
        .render(&list, true)
        .map_err(|e| ApiError::bad(format!("the chat template: {e}")))?;
    let prompt = tokenizer
        .encode(&text, true, true)
        .map_err(|e| ApiError::bad(e.to_string()))?;
    let mut req = common(o, prompt, defaults, n_ctx_slot)?;
    if boolean(o, "logprobs")?.unwrap_or(false) {
        let top = integer(o, "top_logprobs")?.unwrap_or(0);
        if !(0..=20).contains(&top) {
            return Err(ApiError::bad(format!("'top_logprobs' is {top}: 0 to 20")));
        }
        req.logprobs = Some(top as usize);
    }
    // llama-server's reasoning formats: every one but "none" takes the
    // reasoning out of the content (the streaming deltas included)
    let splits = match o.get("reasoning_format") {
        None | Some(Value::Null) => true,
        Some(Value::String(f)) => match f.as_str() {
            "none" => false,
            "auto" | "deepseek" | "deepseek-legacy" => true,
            other => {
                return Err(ApiError::bad(format!(
                    "'reasoning_format' is '{other}': none, auto, deepseek or deepseek-legacy"
                )));
            }
        },
        Some(v) => return Err(ApiError::bad(format!("'reasoning_format' is {v}"))),
    };
    req.reasoning = ReasoningFormat::of_template(template)
        .filter(|_| splits)
        .map(|format| ReasoningSplitter::new(format, &text));
    Ok(req)
}

/// A completion request (`POST /v1/completions`).
pub fn completion(
    body: &Value,
    tokenizer: &Tokenizer,
    defaults: &SamplingParams,
    n_ctx_slot: usize,
) -> Result<GenRequest, ApiError> {
    let o = object(body)?;
    let n_vocab = tokenizer.n_vocab() as i64;
    let ids = |a: &[Value]| -> Result<Vec<i32>, ApiError> {
        a.iter()
            .map(|v| {
                v.as_i64()
                    .filter(|t| (0..n_vocab).contains(t))
                    .map(|t| t as i32)
                    .ok_or_else(|| {
                        ApiError::bad(format!("'prompt': {v} is not a token of the vocabulary"))
                    })
            })
            .collect()
    };
    let prompt = match o.get("prompt") {
        Some(Value::String(s)) => tokenizer
            .encode(s, true, true)
            .map_err(|e| ApiError::bad(e.to_string()))?,
        Some(Value::Array(a)) if a.iter().all(Value::is_number) => ids(a)?,
        Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => tokenizer
            .encode(a[0].as_str().unwrap_or(""), true, true)
            .map_err(|e| ApiError::bad(e.to_string()))?,
        Some(Value::Array(_)) => {
            return Err(ApiError::bad(
                "'prompt': one prompt at a time (a string or token ids)",
            ));
        }
        _ => {
            return Err(ApiError::bad(
                "'prompt' must be a string or an array of token ids",
            ));
        }
    };
    let mut req = common(o, prompt, defaults, n_ctx_slot)?;
    if let Some(n) = integer(o, "logprobs")? {
        if !(0..=20).contains(&n) {
            return Err(ApiError::bad(format!("'logprobs' is {n}: 0 to 20")));
        }
        req.logprobs = Some(n as usize);
    }
    if let Some(n) = integer(o, "n_probs")? {
        req.logprobs = Some(n.clamp(0, 20) as usize);
    }
    Ok(req)
}

/// A sampling error in the request's words: the command-line flag the
/// library names becomes the JSON field.
pub fn field_names(message: &str) -> String {
    const FIELDS: [(&str, &str); 17] = [
        ("--top-k", "top_k"),
        ("--top-p", "top_p"),
        ("--min-p", "min_p"),
        ("--typical", "typical_p"),
        ("--temp", "temperature"),
        ("--repeat-penalty", "repeat_penalty"),
        ("--repeat-last-n", "repeat_last_n"),
        ("--presence-penalty", "presence_penalty"),
        ("--frequency-penalty", "frequency_penalty"),
        ("--dry-multiplier", "dry_multiplier"),
        ("--dry-base", "dry_base"),
        ("--xtc-probability", "xtc_probability"),
        ("--xtc-threshold", "xtc_threshold"),
        ("--mirostat", "mirostat"),
        ("--top-nsigma", "top_n_sigma"),
        ("--logit-bias", "logit_bias"),
        ("--dynatemp-range", "dynatemp_range"),
    ];
    for (flag, field) in FIELDS {
        if let Some(rest) = message.strip_prefix(flag)
            && rest.starts_with(':')
        {
            return format!("'{field}'{rest}");
        }
    }
    message.to_string()
}
